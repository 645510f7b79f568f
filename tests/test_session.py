"""``robot-rl session``: the session stack on the twin with the simulated human as the operator."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from tests.helpers.common import free_port  # noqa: E402

pytestmark = pytest.mark.ros


def test_session_with_a_simulated_human_records_its_interventions(tmp_path):
    """The policy holds still (policy teleop); the simulated human (eagerness 1) steps in after
    6 steps without progress; a precise one (no noise: a random wrong gripper command mid-lift
    would drop the cube). The session stack records everything: the human's steps are
    flagged in the store, and the console served the whole time. ``--episodes 1``: the actor
    stops once one episode is recorded (an episode during which the arm held, on a loaded
    machine, does not count) and waits until the recorder has it in the store."""
    pytest.importorskip("rclpy")
    from robot_rl.data.store import EpisodeStore
    from tests.helpers.ros import free_domain_id, ros_environment, run_stack

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    cmd = [str(Path(sys.executable).with_name("robot-rl")), "session", "--task", "PickCube", "--policy", "teleop",
           "--simulated-human", "1.0", "--human-noise", "0", "--devices", "--episodes", "1", "--console-port", str(port),
           "--run-dir", str(run)]
    result = run_stack(cmd, ros_environment(free_domain_id()), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"console on http://127.0.0.1:{port}/" in result.stdout
    store = EpisodeStore.open(run / "session.zarr")
    assert len(store) == 1
    episodes = [store.get_episode(i, ["is_intervention", "success", "has_action"]) for i in range(len(store))]
    first = episodes[0]["is_intervention"][episodes[0]["has_action"]]
    # the human waits, then drives: it counts the arm's ticks and the store the actor's steps, which
    # a loaded machine can set apart by a tick or two (a fresh-clone CI run recorded its takeover at
    # step 4), so the patience's own count is tests/test_teleop.py's to check, not this stack's
    assert first.any() and not first[0]
    assert episodes[0]["success"][-1]  # a policy that holds still, and the human got the cube up
    summary = json.loads((run / "actor_summary.json").read_text())
    flagged = sum(int(e["is_intervention"][e["has_action"]].sum()) for e in episodes)
    assert summary["policy"] == "teleop" and summary["intervention_steps"] == flagged
    assert summary["interventions"] >= 1


def test_session_refuses_a_bad_eagerness_and_negative_counts(capsys):
    from robot_rl.commands.cli import main

    assert main(["session", "--simulated-human", "3"]) == 2
    assert "eagerness" in capsys.readouterr().err
    for flag in ("--steps", "--episodes"):
        assert main(["session", flag, "-1"]) == 2
        assert "--episodes count" in capsys.readouterr().err
    assert main(["session", "--human-noise", "-0.1"]) == 2
    assert "--human-noise is a standard deviation" in capsys.readouterr().err


# ---------------------------------------------------------------------- supervision of the operator
def test_the_human_in_the_loop_stacks_respawn_the_teleop_node_and_the_arm_requires_it():
    from robot_rl.runtime.launcher import CONSOLE_TOKEN_ENV, load_stacks, node_environment, resolve

    for stack in ("train", "session"):
        nodes = {n.name: n for n in resolve(stack)}
        assert nodes["teleop"].respawn and not nodes["teleop"].required
        assert nodes["arm"].parameters["require_operator"] is True
        assert not any("token" in key for n in nodes.values() for key in n.parameters)
        assert not any("token" in key for key in load_stacks()[stack]["args"])  # never a ROS parameter
        env = {CONSOLE_TOKEN_ENV: "t" * 20, "PATH": "/bin"}
        assert node_environment(nodes["teleop"], env) == env
        assert node_environment(nodes["arm"], env) == {"PATH": "/bin"}  # the token reaches the teleop node only
    for stack in ("sim_train", "record_demos"):  # no operator in these stacks: nothing to wait for
        assert "require_operator" not in {n.name: n for n in resolve(stack)}["arm"].parameters


@contextlib.contextmanager
def supervised(nodes, env):
    """``robot-rl launch``'s supervisor running ``nodes`` in the background; stopped on exit."""
    from robot_rl.runtime.launcher import Supervisor

    lines: list[str] = []
    supervisor = Supervisor(nodes, log=lines.append, env=env, grace_s=5)
    runner = threading.Thread(target=supervisor.run, daemon=True)
    runner.start()
    try:
        yield supervisor, lines
    finally:
        supervisor.stopping.set()
        runner.join(60)


def test_the_session_stacks_teleop_node_starts_with_the_stacks_arguments():
    """`robot-rl launch session devices:=[]` crashed the teleop node: the stack's "0" for
    simulated_human reached it as an integer. Its node, as the launcher writes it, now runs: it
    beats its heartbeat and serves the console with the token from its environment."""
    pytest.importorskip("rclpy")
    import httpx
    from std_msgs.msg import Empty

    from robot_rl.drivers import topics
    from robot_rl.runtime.launcher import CONSOLE_TOKEN_ENV, resolve
    from tests.helpers.ros import Probe, free_domain_id, ros_environment

    port, domain, token = free_port(), free_domain_id(), "the-session-token-0123"
    teleop = {n.name: n for n in resolve("session", {"devices": "[]", "console_port": str(port)})}["teleop"]
    assert teleop.parameters["simulated_human"] == 0 and teleop.parameters["devices"] == []  # as the YAML reads them
    probe = Probe(domain)
    beats = probe.subscribe(Empty, topics.TELEOP_HEARTBEAT, topics.qos_sensor())
    try:
        with supervised([teleop], {**ros_environment(domain), CONSOLE_TOKEN_ENV: token}) as (supervisor, lines):
            probe.spin_until(lambda: len(beats) >= 5, 90, "the teleop node's heartbeat")
            state = httpx.get(f"http://127.0.0.1:{port}/api/state", params={"token": token}, timeout=30).json()
            assert state["task"] == "PickCube" and state["devices"] == []
            assert supervisor.procs["teleop"].poll() is None and supervisor.restarts["teleop"] == 0, lines
            assert any(f"operator console: http://127.0.0.1:{port}/?token={token}" in line for line in lines)
    finally:
        probe.close()


def test_the_arm_holds_while_the_operator_is_lost_until_the_teleop_node_is_back(tmp_path):
    """The teleop node hangs (SIGSTOP): the arm says operator_lost, ignores commands, holds its
    pose and refuses to reset; an actor's reset waits. It dies (SIGKILL): the supervisor
    respawns it, and with its heartbeat back the arm takes commands and the reset goes through."""
    pytest.importorskip("rclpy")
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    from robot_rl.contract import ControlLimits
    from robot_rl.drivers import messages as msgs
    from robot_rl.drivers import topics
    from robot_rl.drivers.ros_env import RosArmEnv
    from robot_rl.runtime.launcher import NodeSpec
    from tests.helpers.ros import Probe, free_domain_id, ros_environment

    limits = ControlLimits()
    domain = free_domain_id()
    arm = NodeSpec("arm", "arm_node", {"seed": 1, "require_operator": True})
    teleop = NodeSpec("teleop", "teleop_node", {"devices": [], "cameras": [], "console_port": 0}, respawn=True)
    probe = Probe(domain)
    status = probe.subscribe(String, topics.ARM_STATUS, topics.qos_latched())
    poses = probe.subscribe(PoseStamped, topics.TCP_POSE, topics.qos_sensor(50))
    velocity = probe.node.create_publisher(TwistStamped, topics.VELOCITY_COMMAND, 10)

    def twist(z: float):
        return msgs.delta_to_twist(np.array([0, 0, z, 0, 0, 0]), 0, limits.max_translation_m, limits.max_rotation_rad,
                                   limits.control_hz)

    def status_of() -> dict:
        return json.loads(status[-1][1].data) if status else {}

    def z_now() -> float:
        return poses[-1][1].pose.position.z

    def publish_until(msg, condition, timeout: float, what: str) -> None:
        probe.spin_until(condition, timeout, what, between=lambda: velocity.publish(msg))

    try:
        with supervised([arm, teleop], ros_environment(domain)) as (supervisor, lines):
            probe.spin_until(lambda: status_of().get("operator_present") is True and poses, 120,
                             "the operator's heartbeat at the arm")
            z0 = z_now()
            publish_until(twist(1.0), lambda: z_now() > z0 + 0.03, 60, "the arm to rise")

            probe.spin_until(lambda: status_of()["mode"] == "watchdog", 30, "the arm to hold after the rise")

            os.kill(supervisor.procs["teleop"].pid, signal.SIGSTOP)  # the operator's path hangs
            probe.spin_until(lambda: status_of()["mode"] == "operator_lost", 30, "operator_lost status")
            assert status_of()["operator_present"] is False
            z_lost, mark = z_now(), len(poses)
            publish_until(twist(-1.0), lambda: len(poses) >= mark + 10
                          and status_of()["counts"]["ignored_operator_lost"] > 0, 30, "commands ignored")
            held = np.array([m.pose.position.z for _, m in poses[mark:]])  # one pose per arm tick
            # put, whatever it is told: 10 commands at full speed down would be 30 cm; the arm may still settle
            # by a few mm from the rise it was held in (3.3 mm once in CI on a loaded machine)
            assert np.all(np.abs(held - z_lost) < 6e-3), held - z_lost
            refused = probe.call(Trigger, topics.RESET)
            assert not refused.success and refused.message.startswith(topics.RESET_REFUSED_NO_OPERATOR)

            said: list[str] = []  # an actor's reset waits for the operator
            env = RosArmEnv(probe.node, "PickCube", sim=True, log=said.append)
            resets: list = []
            waiting = threading.Thread(target=lambda: resets.append(env.reset()), daemon=True)
            waiting.start()
            probe.spin_until(lambda: any("waiting for the operator" in m for m in said), 30, "the actor to wait")
            assert not resets

            supervisor.procs["teleop"].kill()  # it dies: the supervisor starts it again
            probe.spin_until(lambda: resets, 120, "the operator back and the actor's reset done")
            assert supervisor.restarts["teleop"] >= 1 and status_of()["operator_present"] is True, lines
            assert status_of()["counts"]["operator_losses"] == 1
            z_back = z_now()
            publish_until(twist(1.0), lambda: z_now() > z_back + 0.03, 60, "the arm to take commands again")
            waiting.join(10)
    finally:
        probe.close()


def test_an_episode_during_which_the_arm_holds_is_dropped_and_the_actor_resumes_with_the_operator(tmp_path):
    """No episode is committed without a human in the loop. The teleop node hangs
    (SIGSTOP) mid-episode: the arm holds (operator_lost), the actor drops that episode (counted,
    never committed) and its reset waits while the arm holds. The teleop node runs again
    (SIGCONT): the actor plays that episode anew and the recorder commits it. Every committed
    episode is a run of the actor's steps, whole."""
    pytest.importorskip("rclpy")
    from std_msgs.msg import String

    from robot_rl.data.store import EpisodeStore
    from robot_rl.drivers import topics
    from robot_rl.runtime.launcher import NodeSpec
    from tests.helpers.ros import Probe, free_domain_id, ros_environment

    domain, store_path = free_domain_id(), tmp_path / "online.zarr"
    nodes = [NodeSpec("arm", "arm_node", {"seed": 1, "require_operator": True}),
             NodeSpec("teleop", "teleop_node", {"devices": [], "cameras": [], "console_port": 0}, respawn=True),
             NodeSpec("recorder", "recorder_node", {"path": str(store_path), "cameras": []}),
             NodeSpec("actor", "actor_node", {"policy": "expert", "obs": "state", "cameras": [], "sim": True,
                                              "max_episode_steps": 30, "record": True, "seed": 3})]
    probe = Probe(domain)
    arm_status = probe.subscribe(String, topics.ARM_STATUS, topics.qos_latched())
    actor_status = probe.subscribe(String, topics.ACTOR_STATUS, topics.qos_latched())
    recorder_status = probe.subscribe(String, "recorder/status", topics.qos_latched())
    steps = probe.subscribe(String, topics.ACTOR_STEP, 100)

    def latest(messages) -> dict:
        return json.loads(messages[-1][1].data) if messages else {}

    def step_log() -> list[dict]:
        return [json.loads(m.data) for _, m in steps]

    def actor_said(text: str) -> bool:
        return any(text in line for line in lines if line.startswith("[actor]"))

    try:
        with supervised(nodes, ros_environment(domain)) as (supervisor, lines):
            teleop_pid = None
            try:
                # an episode committed, then the actor a few steps into the next one
                probe.spin_until(lambda: latest(recorder_status).get("episodes", 0) >= 1, 180,
                                 "a first committed episode")
                probe.spin_until(lambda: steps and latest(steps)["episode"] >= 1 and 2 <= latest(steps)["step"] <= 5,
                                 60, "the actor a few steps into the next episode")
                hung = latest(steps)["episode"]

                teleop_pid = supervisor.procs["teleop"].pid
                os.kill(teleop_pid, signal.SIGSTOP)  # the operator's path hangs mid-episode
                probe.spin_until(lambda: latest(arm_status).get("mode") == "operator_lost", 30, "operator_lost")
                probe.spin_until(lambda: latest(actor_status).get("dropped_arm_held", 0) >= 1, 30,
                                 "the actor dropping the episode")
                probe.spin_until(lambda: actor_said("waiting for the operator"), 30, "the actor's reset waiting")
                assert actor_said("the arm holds (operator_lost): dropping this episode")
                # a step the actor published before it saw the hold may still be on its way (CI once
                # counted 26 where 25 had been seen): 5 ticks of the arm's clock for it to land, then the
                # arm holds for 20 more ticks (2 s of its clock) and the actor does not step meanwhile
                settling = latest(arm_status)["ticks"]
                probe.spin_until(lambda: latest(arm_status)["ticks"] >= settling + 5, 30, "the arm holding")
                steps_held, ticks_held = len(steps), latest(arm_status)["ticks"]
                probe.spin_until(lambda: latest(arm_status)["ticks"] >= ticks_held + 20, 30, "the arm holding on")
                assert latest(arm_status)["mode"] == "operator_lost" and len(steps) == steps_held
                held = latest(actor_status)
                assert held["dropped_arm_held"] == 1 and held["recorded"] == held["episodes"] == hung
                assert latest(recorder_status)["episodes"] == hung  # the hung episode is not committed

                os.kill(teleop_pid, signal.SIGCONT)  # the operator's path is back
                teleop_pid = None
                resumed = len(arm_status)
                probe.spin_until(lambda: latest(recorder_status)["episodes"] >= hung + 1
                                 and latest(actor_status)["recorded"] >= hung + 1, 120,
                                 "an episode committed after the operator came back")
                assert latest(arm_status)["operator_present"] is True and supervisor.restarts["teleop"] == 0, lines
                # nothing dropped once the arm took commands, unless it held once more: a loaded machine can
                # starve the teleop node just back from SIGSTOP past the operator timeout (seen in CI: 2)
                held_again = sum(json.loads(m.data).get("mode") == "operator_lost" for _, m in arm_status[resumed:])
                dropped = latest(actor_status)["dropped_arm_held"]
                assert dropped == 1 or (held_again and dropped <= 2), (dropped, held_again)
                recorded = latest(actor_status)["recorded"]
                probe.spin_until(lambda: latest(recorder_status)["episodes"] >= recorded
                                 and latest(steps)["episode"] >= recorded, 60, "the next episode under way")
                log = step_log()
            finally:
                if teleop_pid is not None:  # a stopped process would not hear the supervisor's SIGTERM
                    os.kill(teleop_pid, signal.SIGCONT)
    finally:
        probe.close()

    # the actor's steps in runs, each from step 1 (the probe may have joined mid-run): a run whose
    # episode number comes again was dropped, and ends on a message that says so (dropped and over:
    # the operator's simulated human stands by through the reset)
    runs: list[list] = []  # [episode number, steps, dropped]
    for s in log:
        if s["step"] == 1 and not s["dropped"]:
            runs.append([s["episode"], 0, False])
        if runs and s["dropped"]:
            assert s["episode_over"] and s["episode"] == runs[-1][0] and s["step"] == runs[-1][1]
            runs[-1][2] = True
        elif runs:
            runs[-1][1] += 1
            assert s["step"] == runs[-1][1] and s["episode"] == runs[-1][0], "step messages in order, none missing"
    voided = [(episode, n) for (episode, n, _), (after, _, _) in zip(runs, runs[1:]) if after == episode]
    finished = {episode: n for (episode, n, _), (after, _, _) in zip(runs, runs[1:]) if after == episode + 1}
    assert len(voided) == 1 and voided[0][0] == hung and voided[0][1] >= 2
    assert [episode for episode, _, dropped in runs if dropped] == [hung]
    assert hung in finished  # played anew after the operator came back
    store = EpisodeStore.open(store_path)
    assert len(store) >= recorded > hung
    for episode, n in finished.items():  # each committed episode is the run the actor finished, whole
        assert int(store.get_episode(episode, ["has_action"])["has_action"].sum()) == n
