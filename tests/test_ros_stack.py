"""The whole sim stack over real ROS 2, as separate processes: sim arm, sim camera, actor,
learner, recorder (pixel policy, 32x32 frames). Transitions reach the learner, weights reach
the actor, episodes reach the store; the learner is killed and restarted mid-run without losing
a completed episode while the actor keeps acting with the weights it has."""

import contextlib
import json
import signal

import pytest

pytest.importorskip("rclpy", reason="ROS 2 wheels (pip install robot-rl[ros])")
from geometry_msgs.msg import TwistStamped  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from robot_rl.commands.record import record_rollouts  # noqa: E402
from robot_rl.data.store import EpisodeStore  # noqa: E402
from robot_rl.drivers import topics  # noqa: E402
from robot_rl.runtime.checkpoint import latest_checkpoint  # noqa: E402
from tests.helpers.ros import Probe, free_domain_id, node_process, stop  # noqa: E402

pytestmark = pytest.mark.ros

SIZE = 32
PIXELS = {"task": "PickCube", "obs": "pixels", "cameras": "[front]", "image_size": f"[{SIZE},{SIZE}]"}


@contextlib.contextmanager
def first(action):
    """``action()`` where this stands in a ``with`` chain: after the contexts before it are entered,
    before the ones after it."""
    action()
    yield


def latest(messages) -> dict:
    return json.loads(messages[-1][1].data) if messages else {}


@pytest.mark.timeout(420)
def test_sim_stack_trains_and_survives_a_learner_restart(tmp_path):
    demos = tmp_path / "demos.zarr"
    record_rollouts(demos, "PickCube", 2, noise=0.1, seed=5, keep="successes", images=True, image_size=(SIZE, SIZE))
    run = tmp_path / "run"
    online = run / "online.zarr"
    learner_params = {**PIXELS, "run_dir": str(run), "demo_store": str(demos), "online_store": str(online),
                      "pretrain_steps": 20, "critic_warmup_steps": 20, "batch_size": 16, "utd": 0.5,
                      "weights_every": 5, "checkpoint_every_s": 3.0}
    domain = free_domain_id()
    probe = Probe(domain)
    actor_status = probe.subscribe(String, "actor/status", topics.qos_latched())
    recorder_status = probe.subscribe(String, "recorder/status", topics.qos_latched())
    commands = probe.subscribe(TwistStamped, topics.VELOCITY_COMMAND, 10)
    with node_process("robot_rl.drivers.arm_node", {"seed": 2}, domain, tmp_path) as arm, \
            node_process("robot_rl.drivers.camera_node", {"name": "front", "height": SIZE, "width": SIZE}, domain,
                         tmp_path, "camera_front") as camera, \
            node_process("robot_rl.drivers.recorder_node", {**{k: PIXELS[k] for k in ("task", "cameras", "image_size")},
                                                            "path": str(online)}, domain, tmp_path) as recorder, \
            first(lambda: probe.spin_until(lambda: bool(recorder_status), 120,  # the recorder's store made: the
                                           "the recorder's first status")), \
            node_process("robot_rl.drivers.learner_node", learner_params,  # learner reloads what it finds at start
                         domain, tmp_path) as learner, \
            node_process("robot_rl.drivers.actor_node", {**PIXELS, "max_episode_steps": 15, "demo_store": str(demos)}, domain, tmp_path) as actor:
        try:
            # the learner pre-trains on the demos, publishes weights (latched), the actor acts,
            # the recorder commits episodes, and updated weights come back to the actor
            probe.spin_until(lambda: latest(recorder_status).get("episodes", 0) >= 2
                             and latest(actor_status).get("weights_version", 0) >= 2, 240,
                             "2 recorded episodes and updated weights at the actor")
            assert "recorded episodes (0 steps)" in (tmp_path / "learner_node.log").read_text()

            # its first checkpoint written (every checkpoint_every_s of its wall time: on a loaded
            # machine the updates above can all come first), what the restarted learner resumes from
            probe.spin_until(lambda: latest_checkpoint(run) is not None, 120, "the learner's first checkpoint")
            # kill the learner; the actor goes on acting with the weights it has (counted in
            # steps, not seconds: its rate under load is the ros benchmark's business)
            learner.send_signal(signal.SIGKILL)
            learner.wait(10)
            committed = latest(recorder_status)["episodes"]
            steps_at_kill = latest(actor_status)["steps"]
            # weights already in flight may still land during the first steps after the kill
            probe.spin_until(lambda: latest(actor_status)["steps"] >= steps_at_kill + 20, 120,
                             "the actor acting on after the learner died")
            version_before, steps_before = latest(actor_status)["weights_version"], latest(actor_status)["steps"]
            commands_before = len(commands)
            probe.spin_until(lambda: latest(actor_status)["steps"] >= steps_before + 30, 120,
                             "the actor acting on with the weights it has")
            assert len(commands) - commands_before >= 25  # it commanded the arm at every step but resets
            assert latest(actor_status)["weights_version"] == version_before  # nothing new without a learner

            # restart it: every episode committed so far is back in its replay; new weights flow
            with node_process("robot_rl.drivers.learner_node", learner_params, domain, tmp_path,
                              "learner_restarted") as learner2:
                probe.spin_until(lambda: latest(actor_status).get("weights_version") not in (None, version_before),
                                 120, "weights from the restarted learner")
                log = (tmp_path / "learner_restarted.log").read_text()
                assert "resumed the agent from" in log
                reloaded = int(log.split(" recorded episodes")[0].rsplit("] ", 1)[-1].split()[-1])
                assert reloaded >= committed
                assert learner2.poll() is None
            for proc in (arm, camera, recorder, actor):
                assert proc.poll() is None, f"{proc.args[2]} died"
        finally:
            for proc in (actor, recorder, camera, arm):
                stop(proc)
            probe.close()
    store = EpisodeStore.open(online)
    assert len(store) >= committed >= 2
    episode = store.get_episode(0)
    assert episode["front"].shape[1:] == (SIZE, SIZE, 3) and episode["has_action"][:-1].all()
    assert "privileged_cube" in store.fields  # the sim's object poses are kept for evaluation


@pytest.mark.timeout(300)
def test_two_robots_feed_one_learner(tmp_path):
    """Arm and actor per robot under a namespace (robot1/arm/..., robot2/arm/...); the learner's
    topics are absolute, so one learner trains from both and both act with its weights."""
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.runtime.wire import decode

    demos = tmp_path / "demos.zarr"
    record_rollouts(demos, "PickCube", 2, noise=0.1, seed=5, keep="successes")
    state = {"task": "PickCube", "obs": "state", "cameras": "[]"}
    domain = free_domain_id()
    probe = Probe(domain)
    status = {ns: probe.subscribe(String, f"/{ns}/actor/status", topics.qos_latched()) for ns in ("robot1", "robot2")}
    events = probe.subscribe(UInt8MultiArray, topics.LEARNER_EVENTS, topics.qos_data())
    learner_params = {**state, "run_dir": str(tmp_path / "run"), "demo_store": str(demos), "pretrain_steps": 20,
                      "critic_warmup_steps": 20, "batch_size": 16, "utd": 0.5, "weights_every": 5}
    actor_params = {**state, "demo_store": str(demos), "record": False, "max_episode_steps": 15}
    with node_process("robot_rl.drivers.arm_node", {"seed": 1}, domain, tmp_path, "arm1", "/robot1"), \
            node_process("robot_rl.drivers.arm_node", {"seed": 2}, domain, tmp_path, "arm2", "/robot2"), \
            node_process("robot_rl.drivers.learner_node", learner_params, domain, tmp_path), \
            node_process("robot_rl.drivers.actor_node", actor_params, domain, tmp_path, "actor1", "/robot1"), \
            node_process("robot_rl.drivers.actor_node", actor_params, domain, tmp_path, "actor2", "/robot2"):
        try:
            def learner_online() -> int:
                kinds = [decode(bytes(m.data)) for _, m in events[-20:]]
                return max([k.meta.get("online", 0) for k in kinds if k.kind == "status"], default=0)

            probe.spin_until(lambda: all(latest(status[ns]).get("steps", 0) >= 30 and
                                         latest(status[ns]).get("weights_version", 0) >= 2 for ns in status), 200,
                             "both robots acting with updated weights")
            steps = {ns: latest(status[ns])["steps"] for ns in status}
            probe.spin_until(lambda: learner_online() >= sum(steps.values()), 30, "the learner counting both")
            assert learner_online() > max(steps.values())  # transitions from both robots
        finally:
            probe.close()
