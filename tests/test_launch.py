"""Stacks: launch/stacks.yaml, `robot-rl launch` (supervised processes), the ROS 2 launch files
built from the same description, and `colcon build` of the repository."""

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

import pytest
import yaml

from robot_rl.commands.cli import main as cli
from robot_rl.runtime.launcher import (EXECUTABLES, LaunchError, NodeSpec, Supervisor, launch, load_stacks,
                                      parse_overrides, resolve)
from robot_rl.runtime.checkpoint import latest_checkpoint, read_state
from tests.helpers.common import free_port, wait_until  # noqa: E402

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
STACKS = ("sim_train", "train", "record_demos", "session", "franka_sim", "so101_sim")


def test_every_stack_has_a_launch_file_and_valid_nodes():
    stacks = load_stacks()
    assert set(stacks) == set(STACKS)
    for name in STACKS:
        nodes = resolve(name)
        required = {n.name for n in nodes if n.required}
        # their exit ends the stack: the actor's when its episodes are done, the arm driver's (a
        # failed connect, a fault) rather than an actor waiting for an arm that is gone
        assert required == ({"actor", "arm", "so101_sim"} if name == "so101_sim" else {"actor", "arm"})
        assert (ROOT / "launch" / f"{name}.launch.py").exists()


def test_arguments_are_substituted_with_types():
    nodes = {n.name: n for n in resolve("sim_train", {"run_dir": "/tmp/r", "image_size": "32", "demo_store": "d.zarr",
                                                       "learner.batch_size": "16"})}
    assert nodes["camera_front"].parameters["height"] == 32
    assert nodes["recorder"].parameters == {"path": "/tmp/r/online.zarr", "task": "PickCube",
                                            "cameras": ["front", "wrist", "side"], "image_size": [32, 32],
                                            "privileged": True}
    assert nodes["learner"].parameters["batch_size"] == 16 and nodes["learner"].respawn
    assert nodes["actor"].parameters["reward_classifier"] == "" and nodes["actor"].parameters["demo_store"] == "d.zarr"
    # the twin's collision reflex: off unless asked for; the arm stops on it, the learner records it for evaluations
    assert nodes["arm"].parameters["collision_reflex"] is False and nodes["learner"].parameters["collision_reflex"] is False
    nodes = {n.name: n for n in resolve("sim_train", {"collision_reflex": "true"})}
    assert nodes["arm"].parameters["collision_reflex"] is True and nodes["learner"].parameters["collision_reflex"] is True


NODE_CONFIGS = {"actor_node": ("robot_rl.node_config", "ActorNodeConfig"),
                "learner_node": ("robot_rl.node_config", "LearnerNodeConfig"),
                "arm_node": ("robot_rl.drivers.arm_node", "ArmNodeConfig"),
                "camera_node": ("robot_rl.drivers.camera_node", "CameraNodeConfig"),
                "recorder_node": ("robot_rl.drivers.recorder_node", "RecorderNodeConfig"),
                "teleop_node": ("robot_rl.teleop.teleop_node", "TeleopNodeConfig"),
                "franka_sim_node": ("robot_rl.drivers.franka_sim_node", "FrankaSimConfig"),
                "so101_sim_node": ("robot_rl.drivers.so101_sim_node", "So101SimNodeConfig")}


@pytest.mark.parametrize("stack", STACKS)
def test_every_node_of_a_stack_takes_its_parameters(stack, tmp_path):
    """Each node's parameters file, as the launcher writes it with the stack's defaults, read by
    the node's own config through ROS (rclpy's parameter types): every parameter is a field of
    that config and has the field's type. The real cell's stack once gave its actor, learner,
    teleop and recorder ``cameras: "[front,wrist]"`` (a string where a string array belongs),
    and every one of them stopped at start-up."""
    import dataclasses
    import importlib

    rclpy = pytest.importorskip("rclpy")
    from rclpy.context import Context
    from rclpy.node import Node

    from robot_rl.drivers.node import declare_config
    from robot_rl.runtime.launcher import write_params
    from tests.helpers.ros import free_domain_id

    assert set(NODE_CONFIGS) == set(EXECUTABLES)
    context = Context()
    rclpy.init(context=context, domain_id=free_domain_id())
    try:
        for spec in resolve(stack):
            module, name = NODE_CONFIGS[spec.executable]
            config_cls = getattr(importlib.import_module(module), name)
            fields = {f.name for f in dataclasses.fields(config_cls)}
            assert set(spec.parameters) <= fields, (spec.name, sorted(set(spec.parameters) - fields))
            params_file = write_params(spec, tmp_path)
            node = Node(f"check_{spec.name}", context=context, cli_args=["--ros-args", "--params-file", str(params_file)])
            try:
                cfg = declare_config(node, config_cls)
            finally:
                node.destroy_node()
            for key, value in spec.parameters.items():
                got = getattr(cfg, key)
                if isinstance(got, tuple) and not dataclasses.is_dataclass(got):
                    assert list(got) == list(value), (spec.name, key)
    finally:
        rclpy.shutdown(context=context)


def test_bad_launch_requests_are_refused_clearly(tmp_path, capsys):
    with pytest.raises(LaunchError, match="no stack 'nope'; stacks: franka_sim, record_demos, session, sim_train, so101_sim, train"):
        resolve("nope")
    with pytest.raises(LaunchError, match="has no argument 'colour'"):
        resolve("sim_train", {"colour": "red"})
    with pytest.raises(LaunchError, match="no node 'critic'"):
        resolve("sim_train", {"critic.lr": "1"})
    with pytest.raises(LaunchError, match="name:=value"):
        parse_overrides(["run_dir=/tmp"])
    bad = tmp_path / "stacks.yaml"
    bad.write_text(yaml.safe_dump({"stacks": {"s": {"nodes": [{"name": "x", "executable": "rm_node"}]}}}))
    with pytest.raises(LaunchError, match="executable 'rm_node'"):
        resolve("s", stacks=load_stacks(bad))
    bad.write_text("- just a list")
    with pytest.raises(LaunchError, match="top-level 'stacks'"):
        load_stacks(bad)
    assert cli(["launch", "sim_train", "colour:=red"]) == 2
    assert "has no argument 'colour'" in capsys.readouterr().err


# ------------------------------------------------------------------------------ ros2 launch
class Recorded:
    """Stands in for a launch / launch_ros class (those packages are not on PyPI): keeps the
    arguments it was built with."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def fake_launch_modules(monkeypatch, values: dict):
    launch = types.ModuleType("launch")
    launch.LaunchDescription = Recorded
    actions = types.ModuleType("launch.actions")
    actions.DeclareLaunchArgument = Recorded
    actions.OpaqueFunction = Recorded
    actions.Shutdown = Recorded
    subs = types.ModuleType("launch.substitutions")

    class LaunchConfiguration:
        def __init__(self, name):
            self.name = name

        def perform(self, context):
            return values.get(self.name, context[self.name])

    subs.LaunchConfiguration = LaunchConfiguration
    launch_ros = types.ModuleType("launch_ros")
    ros_actions = types.ModuleType("launch_ros.actions")
    ros_actions.Node = Recorded
    for name, module in {"launch": launch, "launch.actions": actions, "launch.substitutions": subs,
                         "launch_ros": launch_ros, "launch_ros.actions": ros_actions}.items():
        monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.parametrize("stack", STACKS)
def test_launch_files_build_the_nodes_robot_rl_launch_starts(stack, monkeypatch):
    source = (ROOT / "launch" / f"{stack}.launch.py").read_text()
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "generate"]
    assert [c.args[0].value for c in calls] == [stack]  # each file describes its own stack
    overrides = {"run_dir": "/tmp/somewhere"} if stack != "record_demos" else {"out": "/tmp/d.zarr"}
    fake_launch_modules(monkeypatch, overrides)
    namespace: dict = {}
    exec(compile(source, f"{stack}.launch.py", "exec"), namespace)
    description = namespace["generate_launch_description"]()
    *declared, opaque = description.args[0]
    defaults = {k: "" if v is None else str(v) for k, v in load_stacks()[stack]["args"].items()}
    assert {d.args[0]: d.kwargs["default_value"] for d in declared} == defaults
    context = dict(defaults)
    nodes = opaque.kwargs["function"](context)
    expected = resolve(stack, overrides)
    assert [n.kwargs["name"] for n in nodes] == [e.name for e in expected]
    for node, spec in zip(nodes, expected):
        assert node.kwargs["package"] == "robot_rl" and node.kwargs["executable"] == spec.executable
        assert node.kwargs["parameters"] == [spec.parameters] and node.kwargs["remappings"] == spec.remappings
        assert node.kwargs["respawn"] == spec.respawn and (node.kwargs["on_exit"] is not None) == spec.required


def test_colcon_build_installs_launch_files_and_the_ament_index_entry(tmp_path):
    colcon = Path(sys.executable).with_name("colcon")
    if not colcon.exists():
        pytest.skip("colcon is not installed (pip install robot-rl[dev])")
    (tmp_path / "src").mkdir()
    os.symlink(ROOT, tmp_path / "src" / "robot_rl")
    result = subprocess.run([str(colcon), "build", "--base-paths", "src"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    install = tmp_path / "install" / "robot_rl"
    assert (install / "share" / "ament_index" / "resource_index" / "packages" / "robot_rl").exists()
    for stack in STACKS:
        assert (install / "share" / "robot_rl" / "launch" / f"{stack}.launch.py").exists()
    assert (install / "share" / "robot_rl" / "launch" / "stacks.yaml").read_text() == (ROOT / "launch" / "stacks.yaml").read_text()
    for node in ("arm_node", "camera_node", "actor_node", "learner_node", "recorder_node"):
        assert os.access(install / "lib" / "robot_rl" / node, os.X_OK)  # `ros2 run robot_rl <node>`
    shutil.rmtree(tmp_path / "build", ignore_errors=True)


# ------------------------------------------------------------------------------- supervisor
def test_supervisor_respawns_and_stops_when_the_required_node_exits(tmp_path, monkeypatch):
    marker = tmp_path / "crashes"
    scripts = {
        "crasher": f"import pathlib,sys; p=pathlib.Path({str(marker)!r}); n=int(p.read_text()) if p.exists() else 0; "
                   "p.write_text(str(n+1)); sys.exit(3)",
        "sleeper": "import time; time.sleep(60)",
        "finisher": "import time; time.sleep(3); print('done', flush=True)",
    }
    monkeypatch.setattr("robot_rl.runtime.launcher.node_command", lambda node, params: [sys.executable, "-c", scripts[node.name]])
    lines = []
    supervisor = Supervisor([NodeSpec("crasher", "learner_node", respawn=True), NodeSpec("sleeper", "arm_node"),
                             NodeSpec("finisher", "actor_node", required=True)], log=lines.append, grace_s=5)
    assert supervisor.run() == 0
    assert int(marker.read_text()) >= 2 and supervisor.restarts["crasher"] >= 1  # died, came back
    assert "[finisher] done" in lines and any("finisher exited (0); stopping the stack" in x for x in lines)
    assert all(p.poll() is not None for p in supervisor.procs.values())  # the sleeper was stopped
    assert supervisor.folder is not None and not supervisor.folder.exists()  # its parameter files removed


def test_supervisor_says_once_that_an_optional_node_failed_and_returns_0_when_stopped(monkeypatch):
    scripts = {"quitter": "import sys; sys.exit(4)", "crasher": "import sys; sys.exit(3)",
               "sleeper": "import time; time.sleep(600)"}
    monkeypatch.setattr("robot_rl.runtime.launcher.node_command",
                        lambda node, params: [sys.executable, "-c", scripts[node.name]])
    lines: list[str] = []
    supervisor = Supervisor([NodeSpec("quitter", "arm_node"), NodeSpec("crasher", "learner_node", respawn=True),
                             NodeSpec("sleeper", "actor_node", required=True)], log=lines.append, grace_s=5)
    result = {}
    runner = threading.Thread(target=lambda: result.update(code=supervisor.run()))
    runner.start()
    try:
        wait_until(lambda: any("quitter exited (4)" in x for x in lines), "the quitter's exit")
        seen = supervisor.restarts["crasher"]
        # each respawn is a later pass over every node, the exited quitter included
        wait_until(lambda: supervisor.restarts["crasher"] >= seen + 2, "two more passes of the supervisor")
    finally:
        supervisor.stopping.set()  # what launch()'s SIGTERM handler does
        runner.join(60)
    assert result == {"code": 0}  # stopped from outside, the required node still running
    assert sum("quitter" in x for x in lines if x.startswith("[launch]")) == 2, lines  # started, exited: once
    assert all(p.poll() is not None for p in supervisor.procs.values())  # the sleeper was stopped
    assert not supervisor.folder.exists()  # stopped from outside, it removed its parameter files all the same


@pytest.mark.parametrize("keep", [False, True])
def test_launch_removes_the_nodes_parameter_files_unless_asked_to_keep_them(tmp_path, monkeypatch, keep):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the stack's parameter files go
    monkeypatch.setattr("robot_rl.runtime.launcher.node_command", lambda node, params: [sys.executable, "-c", "pass"])
    if keep:
        monkeypatch.setenv("ROBOT_RL_KEEP_LAUNCH_FILES", "1")
    else:
        monkeypatch.delenv("ROBOT_RL_KEEP_LAUNCH_FILES", raising=False)
    assert launch("sim_train", [], log=lambda line: None) == 0  # the required actor exited (0)
    folders = list(tmp_path.glob("robot-rl-launch-*"))
    if keep:
        (folder,) = folders
        assert (folder / "actor.params.yaml").is_file()
    else:
        assert folders == []


STOPPED_BY = {"SIGTERM": (signal.SIGTERM, 0), "SIGHUP": (signal.SIGHUP, 0), "SIGINT": (signal.SIGINT, 130),
              "SIGINT-in-background": (signal.SIGINT, 130)}


@pytest.mark.parametrize("how", STOPPED_BY)
def test_a_launch_stopped_by_a_signal_stops_its_nodes_and_removes_its_files(tmp_path, how):
    """Ctrl-C (SIGINT), SIGTERM and SIGHUP (the terminal closed) stop the stack: every node is
    stopped and the parameter folder is removed, so nothing is left in the temporary folder.
    A launcher started in the background (`&` in a script, a CI job) inherits SIGINT ignored,
    so Python would raise no KeyboardInterrupt: SIGINT stops it all the same."""
    sig, code = STOPPED_BY[how]
    background = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if how.endswith("background") else ""
    script = (background + "import sys\n"
              "import robot_rl.runtime.launcher as launcher\n"
              "launcher.node_command = lambda node, params: [sys.executable, '-c', 'import time; time.sleep(600)']\n"
              "sys.exit(launcher.launch('sim_train', [], log=lambda line: print(line, flush=True)))\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("ROBOT_RL_KEEP_LAUNCH_FILES", None)
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        nodes, pids = len(resolve("sim_train")), []
        for line in proc.stdout:  # until every node has started (EOF if the launcher died)
            if line.startswith("[launch] started "):
                pids.append(int(line.rsplit("(pid ", 1)[1].rstrip(")\n")))
                if len(pids) == nodes:
                    break
        assert len(pids) == nodes and len(list(tmp_path.glob("robot-rl-launch-*"))) == 1
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)  # a failsafe: the nodes stop at once on SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, out
    assert list(tmp_path.iterdir()) == []  # the parameter folder is gone
    for pid in pids:  # and so are the nodes (the launcher waited for each)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_robot_rl_launch_runs_the_sim_stack(tmp_path):
    """`robot-rl launch sim_train` end to end over real ROS 2: the actor acts on the twin with
    the learner's weights until env_steps, and the recorder stores its episodes."""
    pytest.importorskip("rclpy")
    from robot_rl.commands.record import record_rollouts
    from robot_rl.data.store import EpisodeStore
    from tests.helpers.ros import free_domain_id, ros_environment, run_stack

    demos = tmp_path / "demos.zarr"
    record_rollouts(demos, "PickCube", 2, noise=0.1, seed=5, keep="successes")
    run = tmp_path / "run"
    cmd = [str(Path(sys.executable).with_name("robot-rl")), "launch", "sim_train", f"run_dir:={run}",
           f"demo_store:={demos}", "env_steps:=60", "image_size:=32", "cameras:=[front]",
           "learner.pretrain_steps:=20", "learner.critic_warmup_steps:=20", "learner.batch_size:=32",
           "actor.max_episode_steps:=20", "collision_reflex:=true"]
    # the stack's side/wrist cameras still run; the actor and recorder read only the front one
    result = run_stack(cmd, ros_environment(free_domain_id()), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "actor exited (0); stopping the stack" in result.stdout
    store = EpisodeStore.open(run / "online.zarr")
    assert len(store) >= 2 and store.cameras == {"front": (32, 32)}
    ckpt = latest_checkpoint(run)  # the learner's newest checkpoint, verified
    trained = read_state(ckpt)["train_config"]
    assert trained["task"] == "PickCube" and trained["collision_reflex"] is True  # what robot-rl eval grades on


def test_a_stack_run_that_overruns_leaves_nothing_running(tmp_path):
    """tests/helpers/ros.py's run_stack on a launcher that hangs with a child holding its output
    open (what a stuck stack looks like): it fails in bounded time, and neither is left running."""
    from tests.helpers.ros import run_stack

    pid_file = tmp_path / "child.pid"
    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
              "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
              f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
              "print('started', flush=True)\n"
              "time.sleep(600)\n")
    with pytest.raises(AssertionError, match="still ran after 2 s") as err:
        run_stack([sys.executable, "-c", script], dict(os.environ), timeout=2, grace_s=1)
    assert "started" in str(err.value)
    child = int(pid_file.read_text())
    wait_until(lambda: not _alive(child), "the launcher's child to be gone", 10)


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_cell_whose_arm_driver_exits_stops_with_its_code(tmp_path):
    """`robot-rl launch train` for an SO-101 that is not plugged in: the arm node exits with a
    configuration error (2) naming the port, and the stack stops with that code, rather than an
    actor waiting for the arm's reset service forever."""
    pytest.importorskip("rclpy")
    from tests.helpers.ros import free_domain_id, ros_environment, run_stack

    absent = tmp_path / "ttyACM9"
    cmd = [str(Path(sys.executable).with_name("robot-rl")), "launch", "train", f"run_dir:={tmp_path / 'run'}",
           "arm_backend:=so101", f"task_file:={ROOT / 'robot_rl' / 'tasks' / 'pick_cube_so101.yaml'}",
           f"so101_port:={absent}", f"so101_calibration:={tmp_path / 'calibration.json'}", "camera_backend:=opencv",
           "devices:=[]", f"console_port:={free_port()}", "control_priority:=normal"]
    result = run_stack(cmd, ros_environment(free_domain_id()), timeout=300)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[launch] arm exited (2); stopping the stack" in result.stdout, result.stdout[-3000:]
    assert str(absent) in result.stdout or "calibration.json" in result.stdout, result.stdout[-3000:]


def test_the_real_cells_stack_runs_its_loop_on_sim_backends(tmp_path):
    """`robot-rl launch train` (what `ros2 launch robot_rl train.launch.py` starts on a cell) with
    its arm and cameras on the twin's backends: every node of the real cell's stack starts, the
    actor acts from pixels with the learner's weights for its steps, episodes reach the store,
    the learner checkpoints, and the stack ends with the actor (0)."""
    pytest.importorskip("rclpy")
    from robot_rl.data.store import EpisodeStore
    from tests.helpers.ros import free_domain_id, ros_environment, run_stack

    run = tmp_path / "run"
    cmd = [str(Path(sys.executable).with_name("robot-rl")), "launch", "train", f"run_dir:={run}", "arm_backend:=sim",
           "camera_backend:=sim", "devices:=[]", "env_steps:=120", f"console_port:={free_port()}",
           "control_priority:=normal"]
    result = run_stack(cmd, ros_environment(free_domain_id()), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[launch] actor exited (0); stopping the stack" in result.stdout, result.stdout[-3000:]
    summary = json.loads((run / "actor_summary.json").read_text())
    assert summary["obs"] == "pixels" and summary["steps"] == 120 and summary["episodes"] >= 1, summary
    assert summary["weights_version"] >= 1
    store = EpisodeStore.open(run / "online.zarr")
    assert len(store) >= 1 and store.get_episode(0)["front"].shape[1:] == (64, 64, 3)
    assert latest_checkpoint(run) is not None


def test_report_of_a_ros_stack_run(tmp_path):
    from robot_rl.commands.report import write_report

    log = [{"steps": 20 * (i + 1), "success": i % 3 != 0, "ground_truth_solved": i % 4 != 0,
            "intervention_rate": 0.5 if i < 10 else 0.0} for i in range(12)]
    (tmp_path / "actor_summary.json").write_text(json.dumps(
        {"task": "PickCube", "obs": "state", "policy": "learner", "reward": "classifier", "reward_classifier": None,
         "demo_store": "demos.zarr", "steps": 240, "episodes": 12, "successes": 8, "interventions": 10,
         "intervention_steps": 60,
         "recorded": 12, "weights_version": 9, "frame_to_command_ms_p50": 11.0, "frame_to_command_ms_p99": 19.5,
         "episode_log": log}))
    (tmp_path / "eval.json").write_text(json.dumps({"success_rate": 0.9, "episodes": 50, "seed_range": [7, 56]}))
    text = write_report(tmp_path).read_text()
    assert "(ROS 2 stack)" in text and "final success: 0.90 over 50 episodes (seeds 7-56)" in text
    assert "| 1-10 | 200 | 0.60 | 0.50 |" in text and "| 11-12 | 240 | 1.00 | 0.00 |" in text
    assert "human interventions: 10 takeovers, 60 steps (25% of all steps)" in text
