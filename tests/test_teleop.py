"""Teleop without ROS: devices (mapping, HID decoding, absent hardware), the intervention switch,
the simulated human, the operator's outcome, the arm's teleop priority, the console's API and
its token, and training with a simulated human."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from robot_rl.contract import Transition
from robot_rl.contract import ControlLimits
from robot_rl.teleop.devices import (DeviceUnavailable, Gamepad, GamepadLayout, KeyboardDevice, Mapping, SpaceMouse,
                                     TeleopInput, dead_zone, decode_spacemouse_report, to_action)
from robot_rl.teleop.intervention import InterventionSwitch
from tests.helpers.console import RecordingBackend


def test_dead_zone_and_scaling_map_device_deflection_to_the_action():
    np.testing.assert_allclose(dead_zone([0.05, -0.05, 0.55, -1.0, 2.0], 0.1), [0, 0, 0.5, -1.0, 1.0])
    action = to_action([0.55, 0.0, -1.0], [0.0, 0.0, 1.0], 1.0, Mapping(dead_zone=0.1, rotation_scale=0.5))
    np.testing.assert_allclose(action, [0.5, 0, -1.0, 0, 0, 0.5, 1.0], atol=1e-6)
    turned = to_action([1.0, 0.0, 0.0], [0, 0, 0], 0.0, Mapping(dead_zone=0.0, yaw_deg=90))
    np.testing.assert_allclose(turned[:3], [0, 1, 0], atol=1e-6)  # the device's forward is the robot's +y
    with pytest.raises(ValueError, match="dead_zone"):
        Mapping(dead_zone=1.0).validate()


class RecordedHid:
    """A HID device replaying recorded input reports (what hidapi's read returns)."""

    def __init__(self, reports):
        self.reports = list(reports)
        self.closed = False

    def read(self, size):
        if self.reports and self.reports[0] == "unplug":
            raise OSError("read error")
        return self.reports.pop(0) if self.reports else []

    def close(self):
        self.closed = True


def report(kind: int, *values: int) -> list[int]:
    return [kind, *struct.pack(f"<{len(values)}h", *values)]


def test_spacemouse_reports_become_actions_in_the_robot_frame():
    # pushed away from the user (HID y < 0) and lifted (HID z < 0), twisted left (HID rz < 0)
    hid = RecordedHid([report(1, 0, -350, -175), report(2, 0, 0, -350), [3, 0b01]])
    mouse = SpaceMouse(Mapping(dead_zone=0.1, rotation_scale=1.0), device=hid)
    reading = mouse.read()
    np.testing.assert_allclose(reading.action[:6], [1.0, 0.0, (0.5 - 0.1) / 0.9, 0, 0, 1.0], atol=1e-6)
    assert reading.action[6] == 1.0 and reading.active  # left button closes
    hid.reports = [[3, 0b10], report(1, 0, 0, 0, 0, 0, 0)]  # newer models: all six axes in report 1
    reading = mouse.read()
    assert reading.action[6] == -1.0 and not np.any(reading.action[:6]) and reading.active  # right button opens
    hid.reports = [[3, 0]]
    assert not mouse.read().active  # at rest, no buttons: the policy drives
    axes, buttons = np.zeros(6), [False, False]
    decode_spacemouse_report([], axes, buttons)
    decode_spacemouse_report([9, 1, 2, 3], axes, buttons)  # unknown report ids are ignored
    assert not np.any(axes)
    hid.reports = ["unplug"]
    with pytest.raises(DeviceUnavailable, match="unplugged"):
        mouse.read()
    mouse.close()
    assert hid.closed


def test_absent_devices_say_what_to_check():
    with pytest.raises(DeviceUnavailable, match="no SpaceMouse found"):
        SpaceMouse()  # hidapi enumerates the USB bus: nothing here
    with pytest.raises(DeviceUnavailable, match="no gamepad 0 found"):
        Gamepad()  # SDL (pygame) finds no joystick here


class RecordedJoystick:
    def __init__(self, axes, buttons):
        self.axes, self.buttons = list(axes), list(buttons)

    def get_numaxes(self):
        return len(self.axes)

    def get_axis(self, i):
        return self.axes[i]

    def get_numbuttons(self):
        return len(self.buttons)

    def get_button(self, i):
        return self.buttons[i]

    def quit(self):
        pass


def test_gamepad_sticks_buttons_and_events():
    layout = GamepadLayout()
    stick = RecordedJoystick([0.0] * 6, [0] * 11)
    pad = Gamepad(Mapping(dead_zone=0.1), layout, joystick=stick)
    assert not pad.read().active
    stick.axes[layout.left_y] = -1.0  # left stick up: forward
    stick.axes[layout.right_y] = 0.05  # inside the dead zone
    stick.buttons[layout.intervene] = 1
    stick.buttons[layout.close] = 1
    stick.buttons[layout.success] = 1
    reading = pad.read()
    np.testing.assert_allclose(reading.action, [1, 0, 0, 0, 0, 0, 1])
    assert reading.active and reading.events == ("success",)
    assert pad.read().events == ()  # a held button is one event, not one per reading
    stick.buttons[layout.intervene] = 0
    assert not pad.read().active


def test_console_keys_move_and_grip():
    keys = KeyboardDevice()
    keys.set_keys(["W", "r", "c"])
    np.testing.assert_allclose(keys.read().action, [0.6, 0, 0.6, 0, 0, 0, 1], atol=1e-6)
    keys.set_keys(["q", "v"])
    reading = keys.read()
    assert reading.action[5] > 0 and reading.action[6] == -1.0 and reading.active
    keys.set_keys([])
    assert not keys.read().active


def test_intervention_switch_hold_and_toggle():
    idle = TeleopInput(np.zeros(7, np.float32), False)
    moving = TeleopInput(np.full(7, 0.5, np.float32), True)
    hold = InterventionSwitch("hold")
    assert not hold.decide([("spacemouse", idle)]).intervening
    decision = hold.decide([("console", idle), ("spacemouse", moving)])
    assert decision.intervening and decision.source == "spacemouse" and decision.action[0] == 0.5
    toggle = InterventionSwitch("toggle")
    assert not toggle.decide([("spacemouse", moving)]).intervening  # toggle mode: moving alone does not take over
    toggle.toggle()
    decision = toggle.decide([("spacemouse", idle)])
    assert decision.intervening and not np.any(decision.action)  # on, hands off: hold still
    toggle.decide([("gamepad", TeleopInput(np.zeros(7, np.float32), False, toggle_intervention=True))])
    assert not toggle.toggled
    toggle.held_by_console = True
    assert toggle.decide([]).intervening
    with pytest.raises(ValueError, match="intervention mode"):
        InterventionSwitch("sometimes")


def test_a_takeover_ends_with_its_episode():
    """The toggle and the console's hold end with the episode; a SpaceMouse still held through
    the reset takes over again once it has let go; a fresh toggle takes over at once."""
    idle = TeleopInput(np.zeros(7, np.float32), False)
    moving = TeleopInput(np.full(7, 0.5, np.float32), True)
    hold = InterventionSwitch("hold")
    assert hold.decide([("spacemouse", moving)]).intervening
    hold.episode_over()
    assert not hold.decide([("spacemouse", moving)]).intervening  # held through the reset
    assert not hold.decide([("spacemouse", moving)]).intervening
    assert not hold.decide([("spacemouse", idle)]).intervening  # let go
    assert hold.decide([("spacemouse", moving)]).intervening  # and took the controls again
    hold.held_by_console = True
    hold.episode_over()
    assert not hold.held_by_console and not hold.decide([("console", idle)]).intervening
    toggle = InterventionSwitch("toggle")
    toggle.toggle()
    toggle.episode_over()
    assert not toggle.toggled and not toggle.decide([("spacemouse", moving)]).intervening
    pressed = TeleopInput(np.full(7, 0.5, np.float32), True, toggle_intervention=True)
    assert toggle.decide([("gamepad", pressed)]).intervening  # pressed in the new episode


def run_with_human(task: str, eagerness: float, episodes: int, policy="zero", **kw):
    from robot_rl.sim import make
    from robot_rl.teleop.simulated_human import SimulatedHuman, SimulatedHumanConfig

    env = make(task, "mujoco")
    out = []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=ep)
            human = SimulatedHuman(task, SimulatedHumanConfig(eagerness=eagerness, **kw), seed=ep)
            flags = []
            while True:
                action = human(obs)
                flags.append(action is not None)
                obs, _, terminated, truncated, info = env.step(action if action is not None else np.zeros(7, np.float32))
                if terminated or truncated:
                    break
            out.append((bool(info["success"]), flags, human.takeovers))
    finally:
        env.close()
    return out


def runs_of(flags):
    lengths, n = [], 0
    for f in flags + [False]:
        if f:
            n += 1
        elif n:
            lengths.append(n)
            n = 0
    return lengths


def test_simulated_human_takes_over_a_stalled_policy_for_bounded_stretches():
    results = run_with_human("PickCube", 0.5, 10)
    assert sum(s for s, _, _ in results) >= 8  # a policy that does nothing succeeds because the human steps in
    for success, flags, takeovers in results:
        assert not any(flags[:12])  # patience 6 / 0.5 = 12 steps of no progress before stepping in
        stretches = runs_of(flags)
        assert stretches and all(n <= 15 for n in stretches) and takeovers <= 3 and len(stretches) == takeovers
        # the first takeover is a correction: it hands back once the scene passes where the policy
        # had it (at least 3 steps); a policy that stalls again gets the whole 15 steps
        assert 3 <= stretches[0] < 15
        assert all(n == 15 for n in stretches[1:-1]) and (len(stretches) == 1 or stretches[-1] == 15 or success)
    eager = run_with_human("PickCube", 1.0, 3, max_takeovers=1)
    for _, flags, takeovers in eager:
        assert flags.index(True) == 6 and takeovers == 1  # eager: 6 steps; one takeover allowed
    peg = run_with_human("PegInsert", 0.5, 5)
    assert sum(s for s, _, _ in peg) >= 4


def test_the_twins_human_stands_by_once_the_ground_truth_has_succeeded():
    """Where the classifier's reward misses a success the twin's episode runs on; the human built
    as training builds it hands the arm back at the ground truth's success and stays off for the
    rest of the episode, and one that does not watch success takes over again with the cube held."""
    from robot_rl.commands.learning_aids import make_human
    from robot_rl.config import TrainConfig
    from robot_rl.sim import make
    from robot_rl.teleop.simulated_human import SimulatedHuman, SimulatedHumanConfig

    env = make("PickCube", "mujoco", max_episode_steps=60)
    try:
        human = make_human(TrainConfig(task="PickCube", human_eagerness=1.0, human_max_takeovers=3), env)
        blind = SimulatedHuman("PickCube", SimulatedHumanConfig(eagerness=1.0, max_takeovers=3), seed=0)
        for operator in (human, blind):
            obs, _ = env.reset(seed=0)
            operator.reset()
            assert not env.succeeded
            flags, successes = [], []
            for _ in range(60):  # on past success, as under a classifier that misses it; the policy holds still
                action = operator(obs)
                flags.append(action is not None)
                obs, _, _, _, info = env.step(action if action is not None else np.zeros(7, np.float32))
                successes.append(info["success"])
            first = successes.index(True)  # the takeovers lifted the cube
            assert env.succeeded and any(flags[:first + 1])
            if operator is human:
                assert not any(flags[first + 1:]) and not human.intervening
            else:
                assert any(flags[first + 1:])  # with the cube up, its progress stalls: it steps in again
        env.reset(seed=1)
        assert not env.succeeded  # a new episode
    finally:
        env.close()


def test_simulated_human_leaves_a_working_policy_alone_and_rejects_bad_eagerness():
    from robot_rl.sim import make
    from robot_rl.sim.experts import make_expert
    from robot_rl.teleop.simulated_human import SimulatedHuman, SimulatedHumanConfig

    env = make("PickCube", "mujoco")
    expert = make_expert("PickCube", seed=0)
    human = SimulatedHuman("PickCube", SimulatedHumanConfig(eagerness=0.5), seed=0)
    obs, _ = env.reset(seed=3)
    while True:
        assert human(obs) is None  # the expert makes progress every few steps: no reason to step in
        obs, _, terminated, truncated, info = env.step(expert(obs))
        if terminated or truncated:
            break
    env.close()
    assert info["success"]
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="eagerness"):
            SimulatedHuman("PickCube", SimulatedHumanConfig(eagerness=bad))
    for bad in (0, 16):
        with pytest.raises(ValueError, match="min_takeover_steps"):
            SimulatedHuman("PickCube", SimulatedHumanConfig(min_takeover_steps=bad))


def test_operator_outcome_overrides_the_reward_and_ends_the_episode():
    from robot_rl.reward.wrapper import OperatorOutcome
    from robot_rl.sim import make

    env = OperatorOutcome(make("PickCube", "mujoco"))
    env.reset(seed=0)
    *_, info = env.step(np.zeros(7, np.float32))
    assert "reward_source" not in info
    env.override(True)
    _, reward, terminated, truncated, info = env.step(np.zeros(7, np.float32))
    assert reward == 1.0 and terminated and not truncated and info["success"] and info["reward_source"] == "operator"
    assert info["ground_truth_success"] is False  # the sim knows better; the operator's key wins
    env.reset(seed=1)
    env.override(False)
    _, reward, terminated, _, info = env.step(np.zeros(7, np.float32))
    assert reward == 0.0 and terminated and not info["success"]
    env.close()


def test_arm_supervisor_runs_the_operators_action_first_while_fresh():
    from robot_rl.contract import SafetyBox
    from robot_rl.drivers.arm import ArmSupervisor

    now = [0.0]
    sup = ArmSupervisor(ControlLimits(), SafetyBox(low=(0.0, -1, 0), high=(1.0, 1, 1)), clock=lambda: now[0])
    state = np.zeros(20, np.float32)
    state[0:3] = (0.5, 0.0, 0.2)
    state[3] = 1.0
    sup.command_velocity(np.array([0.5, 0, 0, 0, 0, 0]))
    sup.command_teleop(np.array([-1.0, 0.2, 0, 0, 0, 0, 1.0]))
    assert sup.action(state)[0] == pytest.approx(0.5) and sup.mode == "velocity"  # not intervening: the policy
    sup.set_intervening(True)
    action = sup.action(state)
    assert sup.mode == "teleop" and action[0] == pytest.approx(-1.0) and action[6] == 1.0
    now[0] += 0.5  # the operator's input went stale (> 2 periods): back to the policy's
    sup.command_velocity(np.array([0.5, 0, 0, 0, 0, 0]))
    assert sup.action(state)[0] == pytest.approx(0.5) and sup.mode == "velocity"
    sup.command_teleop(np.array([-1.0, 0, 0, 0, 0, 0, 0]))
    sup.estop()
    assert sup.action(state)[0] == pytest.approx(0.0, abs=1e-6) and sup.mode == "estop"  # e-stop beats everyone


TOKEN = "s3cret-token-of-the-operator"


def test_console_api_routes_every_button_to_the_backend():
    from fastapi.testclient import TestClient

    from robot_rl.teleop.console import create_app

    backend = RecordingBackend()
    client = TestClient(create_app(backend, TOKEN), base_url="http://127.0.0.1:8080",
                        headers={"X-Console-Token": TOKEN})
    page = client.get("/")
    assert page.status_code == 200 and "Intervene (hold)" in page.text and "https://" not in page.text
    for button in ("btn-hold", "btn-toggle", "btn-success", "btn-failure", "btn-reset", "btn-pause", "btn-rerecord"):
        assert f'id="{button}"' in page.text
    assert client.get("/api/state").json()["cameras"] == ["front"]
    assert client.get("/api/camera/front").content.startswith(b"\xff\xd8")
    assert client.get("/api/camera/side").status_code == 404
    for event in ("success", "failure", "reset", "rerecord", "pause", "resume"):
        assert client.post(f"/api/event/{event}").status_code == 200
    for how in ("hold", "release", "toggle"):
        assert client.post(f"/api/intervene/{how}").status_code == 200
    assert client.post("/api/keys", json={"keys": ["w", "c"]}).status_code == 200
    assert client.post("/api/event/explode").status_code == 404
    assert client.post("/api/intervene/maybe").status_code == 404
    assert client.post("/api/keys", json={"keys": "w"}).status_code == 422
    assert client.get("/api/event/success").status_code == 405  # state changes only by POST
    assert backend.calls == [("press", e) for e in ("success", "failure", "reset", "rerecord", "pause", "resume")] + [
        ("intervene", h) for h in ("hold", "release", "toggle")] + [("keys", ["w", "c"])]


def test_console_refuses_requests_without_its_token_and_will_not_bind_elsewhere_without_one():
    from fastapi.testclient import TestClient

    from robot_rl.teleop.console import ConsoleError, ConsoleServer, create_app

    backend = RecordingBackend()
    client = TestClient(create_app(backend, TOKEN), base_url="http://127.0.0.1:8080")
    assert client.get("/").status_code == 401
    assert client.get("/api/state").status_code == 401
    assert client.post("/api/event/success").status_code == 401
    assert client.get("/api/state", params={"token": "wrong"}).status_code == 401
    assert backend.calls == []
    assert client.get("/api/state", headers={"X-Console-Token": TOKEN}).status_code == 200
    page = client.get("/", params={"token": TOKEN})  # sets the cookie for the page's requests
    assert page.status_code == 200 and "HttpOnly" in page.headers["set-cookie"]
    assert "SameSite=Strict" in page.headers["set-cookie"]
    assert client.post("/api/event/success").status_code == 200 and backend.calls == [("press", "success")]
    with pytest.raises(ConsoleError, match="not loopback: set ROBOT_RL_CONSOLE_TOKEN"):
        ConsoleServer(backend, host="0.0.0.0", port=0)


def test_console_server_serves_on_loopback_with_a_token_of_its_own(tmp_path):
    import urllib.error
    import urllib.request

    from robot_rl.teleop.console import ConsoleServer

    server = ConsoleServer(RecordingBackend(), host="127.0.0.1", port=0)
    url = server.start()
    try:
        assert url.startswith(server.address) and url.startswith("http://127.0.0.1:")
        assert len(server.token) >= 16 and url.endswith(f"?token={server.token}")
        with urllib.request.urlopen(f"{server.address}api/state?token={server.token}", timeout=5) as r:
            assert b"front" in r.read()
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(f"{server.address}api/state", timeout=5)
    finally:
        server.stop()
    assert ConsoleServer(RecordingBackend(), port=0).token != server.token  # a new one per start


@pytest.mark.learning
def test_training_with_a_simulated_human_flags_and_counts_its_steps(tmp_path):
    from robot_rl.commands.train import TrainConfig, train

    summary = train(TrainConfig(task="PickCube", demos=1, env_steps=150, eval_every=150, eval_episodes=2,
                                final_eval_episodes=2, human_eagerness=1.0, learner="inline", pretrain_steps=20,
                                critic_warmup_steps=10, run_dir=str(tmp_path / "run"), progress=False),
                    log=lambda m: None)
    per_episode = summary["episode_interventions"]
    assert summary["intervention_steps"] == sum(e[2] for e in per_episode) > 0
    assert summary["interventions"] == sum(e[1] for e in per_episode) >= 1
    assert all(e[2] <= e[3] and e[1] <= 3 for e in per_episode)
    with pytest.raises(ValueError, match="human_eagerness"):
        TrainConfig(human_eagerness=2.0).validate()


def test_the_learner_clones_the_humans_corrections_into_the_base_policy(tmp_path):
    """Each intervention step received buys ``intervention_bc_steps`` behaviour-cloning steps of
    the residual policy's base on the demo buffer (demos + interventions); without
    interventions the base stays as pre-training left it."""
    import torch

    from robot_rl.envs import make_env, obs_spec
    from robot_rl.runtime.learner import LATEST_ONLY, build_learner
    from robot_rl.runtime.wire import transition_arrays
    from robot_rl.runtime.transport import inprocess_pair
    from robot_rl.commands.train import TrainConfig, agent_config_for

    cfg = TrainConfig(task="PickCube", demos=1, batch_size=16, pretrain_steps=5, critic_warmup_steps=2,
                      intervention_bc_steps=3)
    env = make_env("PickCube")
    spec = obs_spec(env.observation_space)
    agent_cfg = agent_config_for(cfg, env)
    actor_end, learner_end = inprocess_pair(maxsize=1 << 16, latest_only=LATEST_ONLY)
    learner = build_learner(cfg, agent_cfg, spec, learner_end, tmp_path)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        actor_end.send("demo", transition_arrays(Transition(obs, rng.uniform(-1, 1, 7).astype(np.float32), 0.0, obs, False, False)))
    actor_end.send("begin")
    learner.pump()
    base = {k: v.clone() for k, v in learner.agent.base.state_dict().items()}

    def send(n: int, human: bool) -> None:
        for _ in range(n):
            actor_end.send("transition", transition_arrays(Transition(obs, rng.uniform(-1, 1, 7).astype(np.float32), 0.0, obs,
                                                           False, False, human)))
        learner.pump()

    send(10, human=False)
    assert learner.human_bc_steps == 0
    assert all(torch.equal(base[k], v) for k, v in learner.agent.base.state_dict().items())
    send(4, human=True)
    assert learner.human_steps_received == 4 and learner.human_bc_steps == 12 and len(learner.replay.demo) == 24
    assert not all(torch.equal(base[k], v) for k, v in learner.agent.base.state_dict().items())
    env.close()


def test_the_guard_lifts_a_peg_set_down_off_the_hole_before_a_stall_would():
    """``--human-guards``: on PegInsertHard the human steps in as soon as the peg is down on the block
    4 mm or more off the hole's axis (what a Franka's reflex stops), and its first action lifts;
    without the guard the same policy is left until the stall rule's 12 steps without progress run
    out, later. The expert's own takes (which hover 1 cm up until within 2 mm) seldom trip it."""
    from robot_rl.sim import make
    from robot_rl.sim.experts import GUARD_OFF_AXIS_M, make_expert
    from robot_rl.teleop.simulated_human import SimulatedHuman, SimulatedHumanConfig

    env = make("PegInsertHard", "mujoco")
    down = np.array([0, 0, -1, 0, 0, 0, 0], np.float32)  # a policy that sets the peg down where it is
    try:
        guarded = 0
        for seed in range(3):
            guard_step = None
            for guard in (True, False):
                obs, _ = env.reset(seed=seed)
                human = SimulatedHuman("PegInsertHard", SimulatedHumanConfig(eagerness=0.5, guard=guard), seed=seed)
                for step in range(20):
                    action = human(obs)
                    if action is not None:
                        break
                    obs, *_ = env.step(down)
                peg, hole = obs["privileged"]["peg"], obs["privileged"]["hole"]
                off_axis = float(np.linalg.norm(peg[:2] - hole[:2]))
                if off_axis < 2 * GUARD_OFF_AXIS_M:
                    continue  # the layout put the peg over the hole: nothing to guard
                if guard:
                    guarded, guard_step = guarded + 1, step
                    assert human.reason.startswith("the peg goes down"), human.reason
                    assert action[2] > 0  # it lifts the peg off the block first
                else:
                    assert step > guard_step and human.reason == "no progress for 12 steps", (step, human.reason)
        assert guarded >= 2
        expert, tripped = make_expert("PegInsertHard", noise=0.1, seed=0), 0
        for seed in range(10):
            obs, _ = env.reset(seed=100 + seed)
            expert.reset()
            unsafe = False
            while True:
                unsafe = unsafe or expert.unsafe(obs) != ""
                obs, _, terminated, truncated, info = env.step(expert(obs))
                if terminated or truncated:
                    break
            assert info["success"]
            tripped += unsafe
        assert tripped <= 1  # an approach overshooting the hover height (the demonstrations' noise 0.1)
    finally:
        env.close()


def test_the_guard_needs_an_expert_that_judges_moves():
    from robot_rl.sim.experts import NoExpertError
    from robot_rl.teleop.simulated_human import SimulatedHuman, SimulatedHumanConfig

    with pytest.raises(NoExpertError, match="the simulated human's guard .* 'PickCube''s judges none; the tasks it "
                                            "guards: PegInsertHard"):
        SimulatedHuman("PickCube", SimulatedHumanConfig(guard=True))

    class Foreign:  # a Gymnasium env's scripted policy: progress, resume and actions, no judgement
        def progress(self, obs):
            return 0.0

    with pytest.raises(ValueError, match=r"the simulated human's guard needs an expert that judges moves, "
                                         r"unsafe\(obs\); Foreign has none"):
        SimulatedHuman("any", SimulatedHumanConfig(guard=True), expert=Foreign())
