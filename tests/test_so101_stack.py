"""The SO-101 twin behind the ROS 2 stack (issue 47): the simulated arm's scene (a new cube each
episode, the ground truth), the twin's cameras rendering it, the arm node executing each streamed
command once per period and resetting the scene after its own reset, and ``robot-rl launch
so101_sim`` running the task's expert end to end over the simulated serial bus."""

from __future__ import annotations

import json
import socket
import sys

import time

import numpy as np
import pytest

from robot_rl.contract import STATE_SLICES


@pytest.fixture
def scene():
    """A simulated SO-101 bus (in this process: nothing drives it through the SDK here) and its scene."""
    from robot_rl.drivers.so101_sim import SimulatedSo101Bus
    from robot_rl.drivers.so101_sim_node import So101Scene

    with SimulatedSo101Bus() as bus:
        yield So101Scene(bus, "PickCubeSO101", seed=3)


def test_the_scene_places_a_new_cube_each_episode_and_grades_a_lift(scene):
    task = scene.task
    _, success, first = scene.snapshot()
    assert not success and scene.episodes == 1
    assert task.cube_region_low[0] <= first[0] <= task.cube_region_high[0] and abs(first[2] - task.cube_half) < 0.002
    scene.place_objects()
    _, success, second = scene.snapshot()
    assert not success and scene.episodes == 2 and np.linalg.norm(second[:2] - first[:2]) > 1e-3
    with scene.bus.lock:  # the cube lifted 6 cm (as the gripper would): the task's success
        scene.bus.physics.place_cube(second[:3] + [0.0, 0.0, 0.06], second[3:])
        state, success, _ = scene.snapshot()
    assert success and state.shape == (scene.bus.physics.model.nq,)


def test_the_scene_refuses_a_task_of_another_robot():
    from robot_rl.drivers.so101_sim import SimulatedSo101Bus
    from robot_rl.drivers.so101_sim_node import So101Scene
    from robot_rl.errors import InputError

    with SimulatedSo101Bus() as bus:
        with pytest.raises(InputError, match="so101_sim_node runs an SO-101 task; PickCube is the panda's"):
            So101Scene(bus, "PickCube")


def test_the_twins_cameras_render_the_so101_scene_they_are_sent(scene):
    from robot_rl.drivers.camera import CameraError, SimCamera

    camera = SimCamera("front", "PickCubeSO101", (48, 64))
    try:
        with pytest.raises(CameraError, match="no scene state from the sim yet"):
            camera.read()
        state, _, cube = scene.snapshot()
        camera.set_scene(state, 123)
        frame = camera.read()
        assert frame.image.shape == (48, 64, 3) and frame.stamp_ns == 123 and 30 < camera.fovy() < 90
        moved = state.copy()
        a = scene.bus.physics._cube_qpos
        moved[a:a + 3] += [0.0, 0.0, 0.08]  # the cube lifted in view
        camera.set_scene(moved, 124)
        assert np.abs(camera.read().image.astype(int) - frame.image.astype(int)).max() > 30
    finally:
        camera.close()
    with pytest.raises(CameraError, match=r"the twin of PickCubeSO101 has no camera 'top'; it has \['front', 'wrist', 'side'\]"):
        SimCamera("top", "PickCubeSO101")


ROUNDS = 5  # of three moving commands each, for one to land mid-period on a loaded machine


@pytest.mark.ros
def test_the_arm_node_moves_the_simulated_so101_once_per_command_and_resets_its_scene(tmp_path):
    """so101_sim_node and arm_node (so101) as the stack starts them: the arm waits for the bus, each
    command streamed in a period moves the TCP by its displacement once (not again at the tick), the
    next state comes a whole period after the command (observe_after_command) and shows its motion,
    the scene's state and cube pose come stamped as the arm's, and arm/reset places a new cube."""
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from std_msgs.msg import Float32, Float64MultiArray
    from std_srvs.srv import Trigger

    from robot_rl.contract import ControlLimits
    from robot_rl.drivers import messages as msgs
    from robot_rl.drivers import topics
    from tests.helpers.ros import Probe, free_domain_id, node_process

    domain = free_domain_id()
    port, calibration = tmp_path / "so101.tty", tmp_path / "so101_calibration.json"
    sim_params = {"port": str(port), "calibration_out": str(calibration)}
    arm_params = {"backend": "so101", "task": "PickCubeSO101", "port": str(port), "calibration": str(calibration),
                  "port_wait_s": 120.0, "latency_timer_ms": 100.0, "scene_reset": "sim/reset_scene",
                  "priority": "normal", "observe_after_command": True}
    with node_process("robot_rl.drivers.arm_node", arm_params, domain, tmp_path) as arm, \
            node_process("robot_rl.drivers.so101_sim_node", sim_params, domain, tmp_path) as sim:
        probe = Probe(domain)
        try:
            poses = probe.subscribe(PoseStamped, topics.TCP_POSE, topics.qos_sensor(50))
            objects = probe.subscribe(Float64MultiArray, topics.SIM_OBJECTS, topics.qos_sensor(50))
            probe.spin_until(lambda: len(poses) > 3 and len(objects) > 3, 180, "the arm's state and the scene")
            stamps = {msgs.ns_from_stamp(m.header.stamp) for _, m in poses}
            assert any(abs(int(round(m.data[0] * 1e9)) - s) < 1000 for _, m in objects[-3:] for s in stamps)
            before = np.array(objects[-1][1].data[1:4])
            reply = probe.call(Trigger, topics.RESET, timeout=60)
            assert reply.success, reply.message
            probe.spin_until(lambda: len(objects) > 0 and np.linalg.norm(np.array(objects[-1][1].data[1:4]) - before)
                             > 1e-3, 30, "a new cube after the reset")

            velocity = probe.node.create_publisher(TwistStamped, topics.VELOCITY_COMMAND, 10)
            gripper = probe.node.create_publisher(Float32, topics.GRIPPER_COMMAND, 10)
            limits = ControlLimits()

            sent: list[tuple[int, float]] = []  # when each moving command that landed mid-period was sent, its sign
            period_ns = 1e9 / limits.control_hz

            def command(dy: float) -> None:  # one command per arm state, as the actor sends them
                seen = len(poses)
                probe.spin_until(lambda: len(poses) > seen, 30, "the arm's next state")
                observed = msgs.ns_from_stamp(poses[-1][1].header.stamp)
                # the actor's latency: a command lands mid-period (timing what follows, not asserting it)
                time.sleep(max(0.0, (observed + 0.5 * period_ns - time.time_ns()) / 1e9))
                velocity.publish(msgs.delta_to_twist(np.array([0, dy, 0, 0, 0, 0]), 0, limits.max_translation_m,
                                                     limits.max_rotation_rad, limits.control_hz))
                gripper.publish(Float32(data=0.0))
                now = time.time_ns()
                if dy and now - observed < 0.8 * period_ns:  # a probe woken late (a loaded machine) is not timed
                    sent.append((now, float(np.sign(dy))))

            # rounds of three steps of 1.5 cm, back and forth, until a command of a round landed
            # mid-period: on a loaded machine the probe can wake late for all three (seen in CI)
            moves = []
            for round_ in range(ROUNDS):
                sign = 1.0 if round_ % 2 == 0 else -1.0
                command(0.0)
                start = poses[-1][1].pose.position.y
                for _ in range(3):
                    command(0.5 * sign)
                for _ in range(12):
                    command(0.0)
                moves.append(sign * (poses[-1][1].pose.position.y - start))
                if sent:
                    break
            assert sent, f"no command of {3 * ROUNDS} in {ROUNDS} rounds landed mid-period"
            states = sorted((msgs.ns_from_stamp(m.header.stamp), m.pose.position.y) for _, m in poses)
            for when, sign in sent:  # the first state after each command: a period later, the command's motion in it
                # against the last state before it (not the one the probe last saw: on a loaded machine a
                # tick can repeat the previous command between the probe's look and its command)
                y = [pose for stamp, pose in states if stamp <= when][-1]
                after = [(stamp, pose) for stamp, pose in states if stamp > when]
                stamp, pose = after[0]
                # without observe_after_command: 42-46 ms later, 8 mm of the first command's 15 shown
                assert stamp - when >= 0.9 * period_ns, (stamp - when) / 1e6
                # at least the command's 15 mm; 30 where it reached the arm after a tick (DDS late on a
                # loaded machine: seen in CI), which repeated the previous command, not yet in the
                # state that tick read (the total below bounds repeats). Where the previous command was
                # the standstill before the first step, that tick moved nothing (within 3 mm; seen in CI:
                # -0.6 mm) and the step is in the next state; a step half shown (the bug above) is neither
                step, bound = sign * (pose - y), 2.2 * 0.015
                if abs(step) < 0.2 * 0.015 and len(after) > 1:
                    step = sign * (after[1][1] - y)
                elif 0.4 * 0.015 < step <= 0.8 * 0.015 and len(after) > 1:
                    # the simulated servos behind wall time (its physics process starved on a loaded
                    # machine; seen in CI: 8.1 mm a full period after the command, timed above): the
                    # step moves on in the next state, which may hold the next command's 15 mm too
                    step, bound = sign * (after[1][1] - y), 3.2 * 0.015
                assert 0.8 * 0.015 < step < bound, step
            # each round 4.5 cm, not the 9 of each command executed on arrival and again at the tick; a
            # command late for its period (a loaded machine) lets the tick repeat the last one: 6 cm; the
            # probe two periods late (a loaded machine) lets the watchdog hold the arm where it is, losing
            # what was left of a step in flight (seen in CI: 3 cm)
            assert all(0.025 < moved < 0.065 for moved in moves), moves
            assert arm.poll() is None and sim.poll() is None
        finally:
            probe.close()


@pytest.mark.ros
def test_a_scene_reset_nobody_serves_fails_the_arms_reset_in_one_line(tmp_path):
    from std_srvs.srv import Trigger

    from robot_rl.drivers import topics
    from tests.helpers.ros import Probe, free_domain_id, node_process

    domain = free_domain_id()
    params = {"backend": "sim", "task": "PickCube", "scene_reset": "sim/nobody", "scene_reset_timeout_s": 1.0,
              "priority": "normal"}
    with node_process("robot_rl.drivers.arm_node", params, domain, tmp_path) as arm:
        probe = Probe(domain)
        try:
            reply = probe.call(Trigger, topics.RESET, timeout=120)
            assert not reply.success
            assert reply.message == "reset failed: no scene reset service sim/nobody within 1 s"
            assert arm.poll() is None
        finally:
            probe.close()


@pytest.mark.ros
@pytest.mark.integration
def test_the_so101_sim_stack_runs_the_expert_over_the_simulated_bus(tmp_path):
    """``robot-rl launch so101_sim policy:=expert``: the simulated arm on its pty, the arm node's
    so101 backend, the twin's cameras, teleop, recorder, learner and actor; the expert picks the
    cube through all of it, a new cube each episode. The simulated human watches it: standing by
    through each reset, it never takes over an episode's first step (it did in nearly every
    episode while it judged the new episode's first state against the last one's progress)."""
    from robot_rl.data.store import EpisodeStore
    from tests.helpers.ros import free_domain_id, ros_environment, run_stack

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        console = s.getsockname()[1]
    run_dir = tmp_path / "run"
    out = run_stack([sys.executable, "-m", "robot_rl.commands.cli", "launch", "so101_sim", "policy:=expert",
                     "simulated_human:=0.5", "episodes:=3", f"run_dir:={run_dir}", f"console_port:={console}",
                     "control_priority:=normal"], ros_environment(free_domain_id()), timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "arm (so101, PickCubeSO101)" in out.stdout
    summary = json.loads((run_dir / "actor_summary.json").read_text())
    store = EpisodeStore.open(run_dir / "online.zarr")
    episodes = [store.get_episode(i) for i in range(len(store))]
    assert len(episodes) == 3, out.stdout[-3000:]
    successes = sum(bool(e["success"].any()) for e in episodes)
    assert successes >= len(episodes) - 1, summary["episode_log"]  # the expert: one may fail on a loaded machine
    assert not any(e["is_intervention"][0] for e in episodes), [e["is_intervention"].tolist() for e in episodes]
    firsts = np.array([e["privileged_cube"][0, :2] for e in episodes])
    assert np.all(np.linalg.norm(np.diff(firsts, axis=0), axis=1) > 1e-3)  # a new cube each episode
    lifted = [e for e in episodes if e["success"].any()][0]
    assert lifted["state"][-1][STATE_SLICES["tcp_pos"]][2] > 0.05  # the arm's own state: it lifted


def _untrained_checkpoint(run) -> None:
    """A checkpoint of an untrained policy that reads PickCubeSO101's state observations."""
    import torch

    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.envs import make_env
    from robot_rl.runtime.checkpoint import write_checkpoint

    env = make_env("PickCubeSO101", obs="state")
    torch.manual_seed(0)
    agent = SACAgent(SACConfig(state_dim=env.observation_space["state"].shape[0], hidden=(32, 32),
                               action_dim=env.action_space.shape[0], grasp_critic=True))
    env.close()
    write_checkpoint(run, "step_000000010", agent, None, {"env_steps": 10})


@pytest.mark.ros
@pytest.mark.integration
def test_the_so101_sim_stack_grades_a_checkpoint_alone(tmp_path):
    """``robot-rl launch so101_sim policy:=checkpoint checkpoint:=RUN``: the run's policy acts alone
    (no learner weights, no human) through the simulated bus for the episodes asked, as the main
    job's grade through the stack does."""
    from tests.helpers.ros import free_domain_id, ros_environment, run_stack

    trained = tmp_path / "trained"
    _untrained_checkpoint(trained)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        console = s.getsockname()[1]
    run_dir = tmp_path / "grade"
    out = run_stack([sys.executable, "-m", "robot_rl.commands.cli", "launch", "so101_sim", "policy:=checkpoint",
                     f"checkpoint:={trained}", "simulated_human:=0", "episodes:=2", f"run_dir:={run_dir}",
                     f"console_port:={console}", "actor.max_episode_steps:=10"],
                    ros_environment(free_domain_id()), timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    summary = json.loads((run_dir / "actor_summary.json").read_text())
    assert summary["policy"] == "checkpoint" and summary["checkpoint"] == str(trained)
    assert len(summary["episode_log"]) == 2 and summary["interventions"] == 0, summary
    assert [e["steps"] for e in summary["episode_log"]] == [10, 20]  # each to its time limit: nothing lifted
    assert not any(e["ground_truth_solved"] for e in summary["episode_log"])


@pytest.mark.ros
@pytest.mark.parametrize("params, says", [
    ({"policy": "checkpoint"}, "policy 'checkpoint' and the checkpoint parameter go together"),
    ({"checkpoint": "runs/x"}, "policy 'checkpoint' and the checkpoint parameter go together"),
    ({"policy": "checkpoint", "checkpoint": "{tmp}/absent"}, "no checkpoint at {tmp}/absent"),
])
def test_an_actor_asked_for_a_checkpoint_it_cannot_use_refuses_in_one_line(tmp_path, params, says):
    import subprocess

    from tests.helpers.ros import free_domain_id, ros_environment

    params = {"task": "PickCubeSO101", "priority": "normal",
              **{k: v.format(tmp=tmp_path) for k, v in params.items()}}
    args = sum((["-p", f"{k}:={v}"] for k, v in params.items()), [])
    out = subprocess.run([sys.executable, "-m", "robot_rl.drivers.actor_node", "--ros-args", *args],
                         env=ros_environment(free_domain_id()), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("actor_node: error: ") and says.format(tmp=tmp_path) in last, out.stderr[-1500:]
    assert "Traceback" not in out.stderr, out.stderr[-1500:]
