"""The one actor loop (robot_rl/actor.py): the same seed and policy give the same transitions
in-process (as ``robot-rl train`` runs it) and through the ROS actor node over DDS (arm_node
with the sim twin in lockstep), and the loop's own bookkeeping: human takeover, operator
events, episodes the arm held or its collision reflex ended."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robot_rl.actor import ActorLoop, ScriptedPolicy
from robot_rl.data.recorder import EpisodeRecorder, store_fields
from robot_rl.envs import FlatObservation

TASK, ARM_SEED, ACTOR_SEED, STEPS = "PickCube", 4, 7, 25


class ListSink:
    """An in-memory episode store for ``EpisodeRecorder``."""

    def __init__(self, fields: dict):
        self.fields, self.episodes = fields, []

    def add_episode(self, episode: dict) -> int:
        self.episodes.append(episode)
        return len(self.episodes) - 1


def sim_loop(max_episode_steps: int = STEPS, **kwargs) -> tuple[ActorLoop, ListSink]:
    from robot_rl.sim.env import PandaCellEnv

    env = PandaCellEnv(TASK, "mujoco", images=False, privileged=True, max_episode_steps=max_episode_steps)
    flat = FlatObservation(env, "state")
    sink = ListSink(store_fields(env.observation_space, 7)[0])
    kwargs.setdefault("act", ScriptedPolicy(TASK, ACTOR_SEED))
    return ActorLoop(env, flat.observation, recorder=EpisodeRecorder(sink), **kwargs), sink


@pytest.mark.ros
def test_in_process_and_ros_actor_give_the_same_transitions(tmp_path):
    pytest.importorskip("rclpy")
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.drivers import messages as msgs
    from robot_rl.drivers import topics
    from robot_rl.runtime.wire import decode
    from tests.helpers.ros import Probe, free_domain_id, node_process

    loop, sink = sim_loop()
    loop.start(seed=ARM_SEED + 1)  # the arm node resets its twin once on start, then once per episode
    while not loop.episodes:
        loop.step()
    in_process = sink.episodes[0]

    domain = free_domain_id()
    probe = Probe(domain)
    received = probe.subscribe(UInt8MultiArray, topics.EPISODES, topics.qos_data(100))
    try:
        # the actor first, and the arm only once the probe sees the actor's episode publisher: a
        # lockstep episode takes a fraction of a second, and a message published before the
        # probe's subscription matches it is not delivered
        with node_process("robot_rl.drivers.actor_node", {"policy": "expert", "obs": "state", "cameras": [],
                                                          "sim": True, "max_episode_steps": STEPS, "episodes": 1,
                                                          "seed": ACTOR_SEED, "command_latency_ms": 0.0},
                          domain, tmp_path):
            probe.spin_until(lambda: probe.node.count_publishers(topics.EPISODES) >= 1, 120,
                             "the actor's episode publisher")
            with node_process("robot_rl.drivers.arm_node", {"seed": ARM_SEED, "lockstep": True}, domain, tmp_path):
                probe.spin_until(lambda: received, 180, "the ROS actor's first episode")
    finally:
        probe.close()
    over_ros = decode(msgs.payload_bytes(received[0][1])).arrays

    assert len(over_ros["action"]) == len(in_process["action"]) > 10
    for key in ("action", "reward", "terminated", "truncated", "is_intervention", "has_action", "success"):
        np.testing.assert_array_equal(over_ros[key], in_process[key], err_msg=key)
    observed = [k for k in in_process if k.startswith(("state", "privileged"))]
    assert "state" in observed and any(k.startswith("privileged") for k in observed)
    for key in observed:
        np.testing.assert_allclose(over_ros[key], in_process[key], atol=1e-5, err_msg=key)


def run_episode(loop: ActorLoop, limit: int = 200):
    for _ in range(limit):
        result = loop.step()
        if result is not None and (result.episode is not None or result.dropped):
            return result
    raise AssertionError(f"no episode ended within {limit} steps")


def test_the_humans_action_is_executed_flagged_and_counted_as_one_takeover():
    steps = {"n": 0}
    human_action = np.array([0, 0, 1, 0, 0, 0, 0], np.float32)

    def human(raw):
        steps["n"] += 1
        return human_action if 3 <= steps["n"] <= 5 else None

    loop, sink = sim_loop(max_episode_steps=8, human=human)
    loop.start(seed=1)
    episode = run_episode(loop).episode
    recorded = sink.episodes[0]
    assert recorded["is_intervention"][:8].tolist() == [False, False, True, True, True, False, False, False]
    np.testing.assert_array_equal(recorded["action"][2:5], np.stack([human_action] * 3))
    assert (episode["interventions"], episode["intervention_steps"], episode["episode_steps"]) == (1, 3, 8)
    assert loop.stats.interventions == 1 and loop.stats.intervention_steps == 3


def test_operator_events_end_episodes_with_their_outcome_or_drop_the_recording():
    loop, sink = sim_loop(act=lambda raw, obs: np.zeros(7, np.float32))
    loop.start(seed=2)
    loop.step()
    loop.handle("success")
    result = loop.step()
    assert result.episode["success"] and result.reward == 1.0 and result.episode["reward_source"] == "operator"
    assert result.episode["ground_truth_solved"] is False  # the sim's ground truth still grades it
    assert len(sink.episodes) == 1

    loop.step()
    loop.handle("rerecord")
    result = loop.step()
    assert result.episode["ended_by"] == "rerecord" and not result.episode["success"]
    assert len(sink.episodes) == 1 and loop.stats.rerecorded == 1  # dropped from the recording

    loop.handle("pause")
    assert loop.step() is None and loop.step() is None
    loop.handle("resume")
    assert loop.step() is not None
    with pytest.raises(ValueError, match="unknown operator event 'explode'"):
        loop.handle("explode")


def held_after_one_step(why: str, **kwargs):
    """An actor loop one step into its episode when the arm starts holding for ``why``; returns
    the loop, its recording sink, its log lines, the step's result and a function that lets go."""
    holding = {"now": ""}
    logged = []
    loop, sink = sim_loop(act=lambda raw, obs: np.zeros(7, np.float32), arm_holds=lambda: holding["now"],
                          log=logged.append, **kwargs)
    loop.start(seed=3)
    loop.step()
    holding["now"] = why
    return loop, sink, logged, loop.step(), lambda: holding.update(now="")


def test_an_episode_the_arm_held_is_dropped_and_the_next_one_starts():
    loop, sink, logged, result, let_go = held_after_one_step("estop")
    assert result.dropped and loop.stats.dropped_arm_held == 1 and loop.stats.steps == 1
    assert sink.episodes == [] and "the arm holds (estop): dropping this episode (1 steps)" in logged[0]
    let_go()
    result = loop.step()
    assert result.episode_step == 1  # a new episode
    assert loop.stats.episodes == 0


def test_a_collision_reflex_ends_the_episode_as_a_failure_that_is_learned_from():
    """Unlike an e-stop, a reflex stops the arm where the actions sent took it: the episode ends
    there as a failure (reward 0), recorded and counted, and the next one starts."""
    from robot_rl.contract import ARM_STOPPED_BY_REFLEX

    loop, sink, logged, result, let_go = held_after_one_step(ARM_STOPPED_BY_REFLEX)
    assert not result.dropped and result.reward == 0.0 and not result.success and result.info["reflex"]
    assert result.episode["reflex"] and not result.episode["success"] and result.episode_step == 2
    assert loop.stats.reflex_stops == 1 and loop.stats.episodes == 1 and loop.stats.dropped_arm_held == 0
    assert loop.stats.steps == 2  # both steps kept, the one the reflex ended too
    (episode,) = sink.episodes
    assert list(np.flatnonzero(episode["terminated"])) == [1] and episode["reward"][1] == 0.0  # step 2's frame
    assert "collision reflex: episode step 2 ends the episode as a failure" in logged[0]
    let_go()
    assert loop.step().episode_step == 1  # a new episode


def test_a_reflex_can_cost_more_than_a_failure():
    """``reflex_reward`` (robot-rl train --reflex-penalty): the step a reflex ended is rewarded
    with it, in the transition learned from and the recording; the episode is a failure as ever."""
    from robot_rl.contract import ARM_STOPPED_BY_REFLEX

    loop, sink, _, result, _ = held_after_one_step(ARM_STOPPED_BY_REFLEX, reflex_reward=-1.0)
    assert result.reward == -1.0 and result.episode["reflex"] and not result.episode["success"]
    assert sink.episodes[0]["reward"][1] == -1.0 and result.episode_return == -1.0


def test_the_arm_mode_says_a_franka_reflex_once_then_holds_while_it_recovers():
    """``ArmMode`` reads the backend's last fault from ``arm/status``: each new reflex is said once
    (its episode ends a failure); the recovery after it is a standing fault (dropped)."""
    from types import SimpleNamespace

    from robot_rl.drivers.actor_io import ArmMode

    warnings = []
    mode = ArmMode(SimpleNamespace(warning=warnings.append))
    status = lambda fault, faults, kind: SimpleNamespace(data=json.dumps(  # noqa: E731
        {"mode": "velocity", "backend_fault": fault,
         "backend": {"backend": "franka", "counts": {"faults": faults}, "last_fault": kind and {"kind": kind}}}))
    mode.on_status(status(False, 0, None))
    assert mode.holds() == ""
    mode.on_status(status(True, 1, "reflex"))
    assert mode.holds() == "reflex" and mode.holds() == "backend_fault"  # once; then recovering
    mode.on_status(status(False, 1, "reflex"))
    assert mode.holds() == ""  # recovered
    mode.on_status(status(True, 2, "connection"))
    assert mode.holds() == "backend_fault"
    mode.on_status(status(True, 3, "reflex"))
    assert mode.holds() == "reflex"
    mode.on_status(status(False, 4, "reflex"))  # a reflex the arm had recovered from by this status: said too
    assert mode.holds() == "reflex" and mode.holds() == ""
    later = ArmMode(SimpleNamespace(warning=warnings.append))  # an actor that starts after faults: not its episodes
    later.on_status(status(False, 4, "reflex"))
    assert later.holds() == ""
    mode.on_status(SimpleNamespace(data=json.dumps({"mode": "velocity", "backend": {"counts": {"faults": "x"}}})))
    assert len(warnings) == 1 and "ignoring a malformed arm status" in warnings[0]
