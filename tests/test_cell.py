"""Task files for a real cell (robot_rl/cell.py): the shipped examples, every refusal of a bad file
(one line naming the file and the field), start sampling, sim tasks as cell tasks, the train
stack's task_file argument, `robot-rl task`, and the nodes that read a task file."""

import copy
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml

from robot_rl.cell import (CameraSpec, CellTask, StartPose, TaskFileError, UnknownCellTask, example_task_files,
                           from_sim_task, load_task_file, resolve_task)
from robot_rl.commands.cli import main as cli
from robot_rl.contract import ControlLimits, SafetyBox
from robot_rl.runtime.launcher import resolve
from robot_rl.sim.tasks import get_task


def example_data(name: str = "PickCube") -> dict:
    return yaml.safe_load(example_task_files()[name].read_text())


def write(tmp_path, data, name: str = "cell.yaml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


# ------------------------------------------------------------------------------ the examples
def test_the_examples_ship_in_the_package_and_install_as_package_data():
    import tomllib
    from pathlib import Path

    import robot_rl

    examples = example_task_files()
    assert set(examples) == {"PickCube", "PegInsert", "PickCubeSO101"}
    assert {p.name for p in examples.values()} == {"pick_cube_franka.yaml", "peg_insert_franka.yaml",
                                                   "pick_cube_so101.yaml"}
    assert all(p.parent == Path(robot_rl.__file__).parent / "tasks" for p in examples.values())
    setup = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "robot_rl.tasks" in setup["packages"] and setup["package-data"]["robot_rl.tasks"] == ["*.yaml"]


def test_the_so101_example_loads_with_its_six_joints_and_webcams():
    from robot_rl.sim import so101_description

    task = load_task_file(example_task_files()["PickCubeSO101"])
    assert task.robot == "so101" and np.allclose(task.home_joints, so101_description.HOME)
    assert task.camera("front").source == "/dev/video0" and task.camera("wrist").serial == ""
    assert task.start.position == (0.2, 0.0, 0.1) and task.control_limits() == ControlLimits(control_hz=10.0)


@pytest.mark.parametrize("name", ["PickCube", "PegInsert"])
def test_the_examples_load_and_match_their_sim_twins(name):
    task, twin, sim = load_task_file(example_task_files()[name]), from_sim_task(name), get_task(name)
    assert task.name == name and task.robot == "franka" and task.path == str(example_task_files()[name])
    assert task.workspace == sim.safety_box and task.home_joints == tuple(sim.home_joints)
    assert task.start.position == tuple(sim.home_tcp_pos) and task.start.quat_wxyz == (0.0, 1.0, 0.0, 0.0)
    for field in ("max_episode_steps", "uses_gripper", "control_hz", "image_size", "camera_names", "classifier"):
        assert getattr(task, field) == getattr(twin, field), field
    assert task.uses_gripper == (name == "PickCube")
    assert task.camera("front").crop is not None and task.camera("wrist").crop is None
    assert task.control_limits() == ControlLimits(control_hz=10.0)
    assert task.privileged_sizes() == sim.privileged_sizes()  # a sim task's name: the twin's object poses


def test_from_sim_task_and_resolve_task():
    task = from_sim_task("PegInsert")
    assert task == CellTask(name="PegInsert", robot="panda", workspace=get_task("PegInsert").safety_box,
                            home_joints=get_task("PegInsert").home_joints, start=StartPose(position=(0.5, 0.0, 0.15)),
                            control_hz=10.0, max_episode_steps=100,
                            cameras=(CameraSpec("front"), CameraSpec("wrist")), classifier=None, uses_gripper=False)
    assert task.path is None and task.image_size == (64, 64)
    with pytest.raises(UnknownCellTask, match=r"unknown task 'Wipe'; sim tasks: PegInsert, PegInsertHard, PickCube, PickCubeHard, PickCubeSO101, PushCube .*task_file:="):
        from_sim_task("Wipe")
    assert resolve_task("PegInsert", "") == task
    assert resolve_task("PegInsert", str(example_task_files()["PickCube"])).name == "PickCube"  # the file wins


# ------------------------------------------------------------------------------ refusals
def drop(*keys):
    def change(d):
        target = d
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]
    return change


def put(value, *keys):
    def change(d):
        target = d
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return change


BAD = [
    # unknown keys name the key and what is allowed (typos)
    (put("red", "colour"), r"colour: unknown key \(allowed: name, robot, control_hz, .*, cameras, classifier\)"),
    (put(10, "control_rate"), r"control_rate: unknown key \(did you mean 'control_hz'\? allowed: name, robot, "),
    (put([0.5, 0.5, 1.0], "workspace", "max_rotation"),
     r"workspace.max_rotation: unknown key \(did you mean 'max_rotation_rad'\? allowed: low, high, max_rotation_rad\)"),
    (put(0.1, "start", "randomize_m"), r"start.randomize_m: unknown key \(did you mean 'randomise_m'\? allowed: "),
    (put("x", "cameras", 0, "exposure"), r"cameras\[0\].exposure: unknown key \(allowed: name, serial, source, crop, resize\)"),
    # missing fields
    (drop("home_joints"), r"home_joints: missing \(required\)"),
    (drop("workspace", "high"), r"workspace.high: missing \(required\)"),
    (drop("start", "position"), r"start.position: missing \(required\)"),
    (drop("cameras", 1, "name"), r"cameras\[1\].name: missing \(required\)"),
    # robot
    (put("ur5", "robot"), r"robot: 'ur5' has no driver that reads task files; the robots accepted are "
                          r"'franka', 'so101'"),
    (put("so101", "robot"), r"home_joints: expected 6 numbers, got 7"),  # an SO-101 has 5 joints and its gripper
    # types and lengths
    (put([0.3, -0.25], "workspace", "low"), r"workspace.low: expected 3 numbers, got 2"),
    (put("0.3 -0.25 0.01", "workspace", "low"), r"workspace.low: expected 3 numbers, got str '0.3 -0.25 0.01'"),
    (put([0.3, "a", 0.01], "workspace", "low"), r"workspace.low\[1\]: expected a number, got str 'a'"),
    (put([0.3, float("nan"), 0.01], "workspace", "high"), r"workspace.high\[1\]: expected a finite number, got nan"),
    (put("PickCube", "workspace"), r"workspace: expected a mapping of low, high, max_rotation_rad, got str"),
    (put([0.0] * 6, "home_joints"), r"home_joints: expected 7 numbers, got 6"),
    (put([0.0] * 6 + [float("inf")], "home_joints"), r"home_joints\[6\]: expected a finite number, got inf"),
    (put([0.0] * 6 + [True], "home_joints"), r"home_joints\[6\]: expected a number, got bool True"),
    (put(42, "name"), r"name: expected a non-empty string, got int 42"),
    (put("yes please", "uses_gripper"), r"uses_gripper: expected true or false, got str 'yes please'"),
    (put([0, 1, 0], "start", "quat_wxyz"), r"start.quat_wxyz: expected 4 numbers, got 3"),
    (put([0, 0.5, 0, 0], "start", "quat_wxyz"), r"start.quat_wxyz: not a unit quaternion \(norm 0.5\)"),
    (put([0.03, -0.03, 0.0], "start", "randomise_m"), r"start.randomise_m: ranges must be >= 0 metres"),
    (put(4.0, "start", "randomise_yaw_rad"), r"start.randomise_yaw_rad: must lie in \[0, pi\] radians, got 4.0"),
    (put(None, "classifier"), None),  # allowed: none
    (put(3, "classifier"), r"classifier: expected a string, got int 3"),
    # the box, the rate, the episode length
    (put([0.7, -0.25, 0.01], "workspace", "low"), r"workspace: low must be below high on every axis; x: low 0.7 >= "
                                                  r"high 0.7"),
    (put([0.5, 0.5, -1.0], "workspace", "max_rotation_rad"), r"workspace.max_rotation_rad: bounds must be >= 0"),
    (put(0, "control_hz"), r"control_hz: must be > 0 \(the policy's rate, Hz\), got 0"),
    (put(-5.0, "control_hz"), r"control_hz: must be > 0"),
    (put("10", "control_hz"), r"control_hz: expected a number, got str '10'"),
    (put(0, "max_episode_steps"), r"max_episode_steps: expected a positive whole number, got int 0"),
    (put(99.5, "max_episode_steps"), r"max_episode_steps: expected a positive whole number, got float 99.5"),
    # the start inside the box
    (put([0.5, 0.0, 0.5], "start", "position"), r"start.position: \[0.5, 0.0, 0.5\] lies outside the workspace box "
                                                r"\(low \[0.3, -0.25, 0.01\], high \[0.7, 0.25, 0.35\]\)"),
    # cameras
    (put([], "cameras"), r"cameras: expected a list of cameras"),
    (put("front", "cameras", 1, "name"), r"cameras\[1\].name: camera 'front' is named twice; camera names must be "
                                         r"unique"),
    (put(123622270882, "cameras", 0, "serial"), r"cameras\[0\].serial: write the serial number in quotes "
                                                r"\(serial: \"123622270882\"\)"),
    (lambda d: (put("/dev/video0", "cameras", 1, "source")(d), put("111", "cameras", 1, "serial")(d)),
     r"cameras\[1\].source: give serial \(a RealSense\) or source \(an OpenCV camera"),
    (put([0, 80, 480], "cameras", 0, "crop"), r"cameras\[0\].crop: expected 4 whole numbers \(top, left, height, "
                                              r"width of the sensor image\), got list \[0, 80, 480\]"),
    (put([0, 80, 0, 480], "cameras", 0, "crop"), r"cameras\[0\].crop: top and left must be >= 0 and height and width "
                                                 r"> 0"),
    (put([64.0, 64], "cameras", 0, "resize"), r"cameras\[0\].resize: expected 2 whole numbers \(height, width\)"),
    (put([0, 64], "cameras", 0, "resize"), r"cameras\[0\].resize: height and width must be > 0"),
    (put([96, 96], "cameras", 1, "resize"), r"cameras\[1\].resize: \[96, 96\] differs from front's \[64, 64\]; every "
                                            r"camera publishes one size"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_task_file_is_one_error_naming_the_file_and_the_field(tmp_path, change, message):
    data = copy.deepcopy(example_data())
    change(data)
    path = write(tmp_path, data)
    if message is None:
        assert load_task_file(path).classifier is None
        return
    with pytest.raises(TaskFileError, match=f"^{re.escape(str(path))}: {message}") as err:
        load_task_file(path)
    assert "\n" not in str(err.value)


def test_a_missing_empty_or_unreadable_file_names_the_file(tmp_path):
    with pytest.raises(TaskFileError, match=f"^task file {re.escape(str(tmp_path / 'nope.yaml'))}: No such file"):
        load_task_file(tmp_path / "nope.yaml")
    with pytest.raises(TaskFileError, match=r"cell.yaml: not valid YAML at line 2 \(mapping values are not allowed"):
        load_task_file(write(tmp_path, "name: PickCube\nrobot: franka: panda\n"))
    with pytest.raises(TaskFileError, match=r"cell.yaml: empty; a task file sets name, robot, control_hz"):
        load_task_file(write(tmp_path, "# nothing yet\n"))
    with pytest.raises(TaskFileError, match=r"cell.yaml: expected a mapping of name, robot, .*got list"):
        load_task_file(write(tmp_path, "- name: PickCube\n"))


def test_optional_fields_take_their_defaults_and_a_classifier_is_found_beside_the_file(tmp_path):
    data = example_data("PegInsert")
    del data["workspace"]["max_rotation_rad"], data["classifier"]
    data["start"] = {"position": [0.5, 0.0, 0.15]}
    data["cameras"] = [{"name": "front"}, {"name": "wrist", "serial": "123622270882", "crop": None}]
    task = load_task_file(write(tmp_path, data))
    assert task.workspace.max_rotation_rad == SafetyBox((0, 0, 0), (1, 1, 1)).max_rotation_rad
    assert task.start == StartPose(position=(0.5, 0.0, 0.15)) and task.classifier is None
    assert task.cameras == (CameraSpec("front"), CameraSpec("wrist", serial="123622270882"))
    with pytest.raises(TaskFileError, match=r"cell.yaml: cameras: no camera 'side'; it has \['front', 'wrist'\]"):
        task.camera("side")
    data["classifier"] = "classifiers/peg"
    (tmp_path / "cells").mkdir()
    task = load_task_file(write(tmp_path / "cells", data))
    assert task.classifier == str((tmp_path / "cells" / "classifiers" / "peg").resolve())
    data["name"] = "WipeTable"  # no sim twin: no object poses, said clearly
    with pytest.raises(UnknownCellTask, match=r"task 'WipeTable' has no sim twin, so no object poses .*obs pixels"):
        load_task_file(write(tmp_path, data)).privileged_sizes()


# ------------------------------------------------------------------------------ start poses
def test_sample_start_stays_within_its_randomisation_and_the_box(tmp_path):
    data = example_data()
    data["start"] = {"position": [0.5, 0.23, 0.2], "randomise_m": [0.05, 0.05, 0.0], "randomise_yaw_rad": 0.4}
    task = load_task_file(write(tmp_path, data))
    rng = np.random.default_rng(0)
    positions, yaws = [], []
    for _ in range(500):
        pos, quat = task.sample_start(rng)
        assert task.workspace.contains(pos) and np.isclose(np.linalg.norm(quat), 1.0) and quat[0] >= 0
        assert np.all(np.abs(pos - [0.5, 0.23, 0.2]) <= np.array([0.05, 0.05, 0.0]) + 1e-12)
        # gripper still pointing down, turned about the vertical by at most 0.4 rad
        w, x, y, z = quat
        assert abs(w) < 1e-9 and abs(z) < 1e-9
        yaws.append(2 * math.atan2(y, x) if x >= 0 else 2 * math.atan2(-y, -x))
        positions.append(pos)
    positions, yaws = np.array(positions), np.array(yaws)
    assert positions[:, 1].max() == pytest.approx(0.25)  # 0.23 + 0.05 clipped into the box (high y 0.25)
    assert positions[:, 0].min() < 0.46 and positions[:, 0].max() > 0.54 and np.all(positions[:, 2] == 0.2)
    assert np.abs(yaws).max() <= 0.4 + 1e-9 and yaws.min() < -0.3 and yaws.max() > 0.3
    fixed = from_sim_task("PickCube")
    pos, quat = fixed.sample_start(rng)
    assert np.array_equal(pos, [0.5, 0.0, 0.2]) and np.array_equal(quat, [0.0, 1.0, 0.0, 0.0])


# ------------------------------------------------------------------------------ stack and CLI
def test_the_train_stack_passes_task_file_to_the_nodes_that_read_it():
    nodes = {n.name: n for n in resolve("train", {"task_file": "cells/pick.yaml"})}
    for name in ("arm", "camera_front", "camera_wrist", "recorder", "learner", "actor"):
        assert nodes[name].parameters["task_file"] == "cells/pick.yaml", name
    assert "task_file" not in nodes["teleop"].parameters
    assert all(n.parameters.get("task_file", "") == "" for n in resolve("train"))  # default: the sim task named


def test_robot_rl_task_check_and_show(tmp_path, capsys):
    path = example_task_files()["PegInsert"]
    assert cli(["task", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: task PegInsert on a franka arm, OK")
    assert "episodes of 100 steps (10 s), gripper not used" in out and "camera front" in out
    assert "classifier    none: give the train stack reward_classifier:=DIR" in out
    assert cli(["task", "show", "PickCube"]) == 0
    shown = capsys.readouterr().out
    assert shown == example_task_files()["PickCube"].read_text()
    assert load_task_file(write(tmp_path, shown)).name == "PickCube"
    assert cli(["task", "show"]) == 0 and "PegInsert" in capsys.readouterr().out
    bad = write(tmp_path, {**example_data(), "control_hz": 0})
    assert cli(["task", "check", str(bad)]) == 2
    assert capsys.readouterr().err == f"robot-rl: error: {bad}: control_hz: must be > 0 (the policy's rate, Hz), got 0\n"
    assert cli(["task", "show", "Wipe"]) == 2
    assert "no example task 'Wipe'; examples: PegInsert, PickCube" in capsys.readouterr().err


# ------------------------------------------------------------------------------ nodes
def wipe_table(tmp_path, **changes):
    """A task with no sim twin: 15 Hz, 48x48 cameras, no gripper."""
    data = {**example_data(), "name": "WipeTable", "control_hz": 15, "max_episode_steps": 30, "uses_gripper": False,
            "cameras": [{"name": "front", "serial": "111", "crop": [0, 80, 480, 480], "resize": [48, 48]},
                        {"name": "wrist", "resize": [48, 48]}, {"name": "side", "source": 2, "resize": [48, 48]}],
            **changes}
    return write(tmp_path, data, "wipe.yaml")


@pytest.mark.ros
def test_node_configs_take_what_the_task_file_sets(tmp_path):
    pytest.importorskip("rclpy")
    import dataclasses

    from robot_rl.node_config import ActorNodeConfig, LearnerNodeConfig
    from robot_rl.drivers.camera_node import CameraNodeConfig, apply_camera_spec
    from robot_rl.drivers.node import apply_task_file
    from robot_rl.drivers.recorder_node import RecorderNodeConfig

    path = str(wipe_table(tmp_path))
    front = apply_camera_spec(CameraNodeConfig(name="front", backend="realsense", serial="999", task_file=path))
    assert (front.task, front.serial, front.crop, front.height, front.width) == ("WipeTable", "111", "0,80,480,480",
                                                                                 48, 48)
    wrist = apply_camera_spec(CameraNodeConfig(name="wrist", serial="999", crop="1,2,3,4", task_file=path))
    assert (wrist.serial, wrist.crop, wrist.height) == ("999", "1,2,3,4", 48)  # the file gives neither: kept
    side = apply_camera_spec(CameraNodeConfig(name="side", backend="realsense", task_file=path))
    assert (side.backend, side.source, side.height) == ("opencv", "2", 48)  # a source: an OpenCV camera (a device index)
    assert apply_camera_spec(CameraNodeConfig(name="side")) == CameraNodeConfig(name="side")  # no file: as it was
    with pytest.raises(TaskFileError, match=r"wipe.yaml: cameras: no camera 'top'"):
        apply_camera_spec(CameraNodeConfig(name="top", task_file=path))

    recorder, task = apply_task_file(RecorderNodeConfig(task_file=path))
    assert (recorder.task, recorder.control_hz, recorder.image_size) == ("WipeTable", 15.0, (48, 48))
    actor, _ = apply_task_file(ActorNodeConfig(task_file=path, control_hz=10.0))
    assert (actor.task, actor.control_hz, actor.image_size, actor.reward_classifier) == ("WipeTable", 15.0, (48, 48),
                                                                                         None)
    learner, _ = apply_task_file(LearnerNodeConfig(task_file=path))
    assert (learner.task, learner.image_size) == ("WipeTable", (48, 48))
    assert apply_task_file(LearnerNodeConfig()) == (LearnerNodeConfig(), from_sim_task("PickCube"))
    with pytest.raises(TaskFileError, match=r"wipe.yaml: cameras: no camera 'top'"):
        apply_task_file(dataclasses.replace(learner, cameras=("front", "top")))
    (tmp_path / "clf").mkdir()
    with_classifier = str(wipe_table(tmp_path, classifier="clf"))
    assert apply_task_file(ActorNodeConfig(task_file=with_classifier))[0].reward_classifier == str(tmp_path / "clf")
    given = apply_task_file(ActorNodeConfig(task_file=with_classifier, reward_classifier="mine"))[0]
    assert given.reward_classifier == "mine"  # the stack's reward_classifier wins
    missing = str(wipe_table(tmp_path, classifier="nope"))
    with pytest.raises(TaskFileError, match=r"wipe.yaml: classifier: no folder .*nope \(robot-rl classifier train"):
        apply_task_file(ActorNodeConfig(task_file=missing))


@pytest.mark.ros
def test_recorder_learner_and_actor_nodes_run_a_task_with_no_sim_twin(tmp_path):
    rclpy = pytest.importorskip("rclpy")
    from rclpy.parameter import Parameter

    from robot_rl.data.store import EpisodeStore
    from robot_rl.drivers.actor_node import ActorNode
    from robot_rl.drivers.learner_node import LearnerNode
    from robot_rl.drivers.recorder_node import RecorderNode
    from tests.helpers.ros import free_domain_id

    path = str(wipe_table(tmp_path))
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=free_domain_id())
    nodes = []
    try:
        common = [Parameter("task_file", value=path), Parameter("cameras", value=["front", "wrist"])]
        recorder = RecorderNode(context=context, parameter_overrides=common + [
            Parameter("path", value=str(tmp_path / "online.zarr")), Parameter("privileged", value=False)])
        nodes.append(recorder)
        store = EpisodeStore.open(tmp_path / "online.zarr")
        assert (store.attrs["task"], store.attrs["robot"], store.attrs["control_hz"]) == ("WipeTable", "franka", 15.0)
        assert {k: tuple(v) for k, v in store.cameras.items()} == {"front": (48, 48), "wrist": (48, 48)}

        learner = LearnerNode(context=context, parameter_overrides=common + [
            Parameter("obs", value="pixels"), Parameter("run_dir", value=str(tmp_path / "run")),
            Parameter("online_store", value=str(tmp_path / "online.zarr")), Parameter("device", value="cpu")])
        nodes.append(learner)
        assert learner.cfg.task == "WipeTable" and learner.env.observation_space["front"].shape == (48, 48, 3)
        assert not learner.learner.agent.config.grasp_critic  # uses_gripper: false

        actor = ActorNode(context=context, parameter_overrides=common + [
            Parameter("obs", value="pixels"), Parameter("sim", value=False), Parameter("run_dir", value="")])
        nodes.append(actor)
        env = actor.ros_env
        assert (env.task.name, env.max_episode_steps, env.period_s, env.image_size) == ("WipeTable", 30, 1 / 15, (48, 48))
        assert not actor.policy.config.grasp_critic and actor.cfg.control_hz == 15.0
    finally:
        for node in nodes:
            node.destroy_node()
        context.try_shutdown()


@pytest.mark.ros
@pytest.mark.parametrize("module", ["camera_node", "recorder_node"])
def test_a_node_given_a_bad_task_file_says_so_in_one_line_and_exits_2(tmp_path, module):
    pytest.importorskip("rclpy")
    from tests.helpers.ros import free_domain_id, ros_environment

    bad = write(tmp_path, {**example_data(), "home_joints": [0.0] * 6})
    params = ["-p", f"task_file:={bad}", "-p", f"path:={tmp_path / 'online.zarr'}"] if module == "recorder_node" else \
        ["-p", f"task_file:={bad}", "-p", "backend:=realsense"]
    done = subprocess.run([sys.executable, "-m", f"robot_rl.drivers.{module}", "--ros-args", *params],
                          env=ros_environment(free_domain_id()), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line == f"{module}: error: {bad}: home_joints: expected 7 numbers, got 6"
    assert not (tmp_path / "online.zarr").exists()
