"""Both engines serve the same contract: spaces, dtypes, determinism, safety, errors."""

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim
from robot_rl import contract
from robot_rl.contract import ActionError
from robot_rl.sim import make
from robot_rl.sim.experts import make_expert
from robot_rl.geometry import HOME_ROTATION, quat_to_matrix
from tests.helpers.common import press_the_peg_onto_the_block

BACKENDS = ["mujoco", "pybullet"]
TASKS = ["PickCube", "PickCubeHard", "PegInsert", "PegInsertHard", "PushCube"]


@pytest.fixture(scope="module", params=[(b, t) for b in BACKENDS for t in TASKS], ids=lambda p: f"{p[0]}-{p[1]}")
def env(request):
    backend, task = request.param
    env = make(task, backend=backend)
    yield env
    env.close()


def test_spaces_and_dtypes(env):
    obs, info = env.reset(seed=0)
    assert env.action_space.shape == (7,) and env.action_space.dtype == np.float32
    assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
    assert env.observation_space.contains(obs)
    assert obs["state"].dtype == np.float32 and obs["state"].shape == (contract.STATE_DIM,)
    assert "images" not in obs  # rendered only when asked for
    assert set(obs["privileged"]) == {o.name for o in env.task.objects}
    obs, reward, terminated, truncated, info = env.step(np.zeros(7, np.float32))
    assert env.observation_space.contains(obs)
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert {"success", "safety_clipped"} <= set(info)


def test_home_pose(env):
    obs, _ = env.reset(seed=1)
    s = contract.STATE_SLICES
    np.testing.assert_allclose(obs["state"][s["tcp_pos"]], env.task.home_tcp_pos, atol=2e-3)
    np.testing.assert_allclose(quat_to_matrix(obs["state"][s["tcp_quat"]]), HOME_ROTATION, atol=1e-2)
    np.testing.assert_allclose(obs["state"][s["ee_force"]], 0.0, atol=1.0)


def test_same_seed_same_episode_bit_for_bit(env):
    actions = np.random.default_rng(0).uniform(-1, 1, size=(15, 7)).astype(np.float32)

    def rollout(seed):
        obs, _ = env.reset(seed=seed)
        out = [obs["state"].copy(), *[v.copy() for v in obs["privileged"].values()]]
        for a in actions:
            obs, *_ = env.step(a)
            out += [obs["state"].copy(), *[v.copy() for v in obs["privileged"].values()]]
        return out

    first, second = rollout(7), rollout(7)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    other = rollout(8)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_zero_action_holds_position(env):
    obs0, _ = env.reset(seed=2)
    for _ in range(5):
        obs, *_ = env.step(np.zeros(7))
    np.testing.assert_allclose(obs["state"][:3], obs0["state"][:3], atol=3e-3)


def test_translation_moves_the_tcp_a_few_cm_per_step(env):
    obs0, _ = env.reset(seed=3)
    obs, *_ = env.step(np.array([0, 1, 0, 0, 0, 0, 0], np.float32))
    obs, *_ = env.step(np.array([0, 1, 0, 0, 0, 0, 0], np.float32))
    dy = obs["state"][1] - obs0["state"][1]
    assert 0.02 < dy <= 2 * env.limits.max_translation_m + 1e-3


def test_safety_box_clips_the_target(env):
    env.reset(seed=4)
    clipped = []
    for _ in range(25):
        obs, _, _, _, info = env.step(np.array([0, 0, 1, 0, 0, 0, 0], np.float32))
        clipped.append(info["safety_clipped"])
    assert clipped[-1] and not clipped[0]
    box = env.task.safety_box
    assert obs["state"][2] <= box.high[2] + 0.01
    env.reset(seed=4)
    for _ in range(25):
        obs, *_ = env.step(np.array([1, -1, -1, 0, 0, 0, 0], np.float32))
    pos = obs["state"][:3]
    assert box.contains(pos, tol=0.01), pos


def test_rotation_is_bounded_by_the_safety_box(env):
    env.reset(seed=5)
    for _ in range(30):
        obs, *_ = env.step(np.array([0, 0, 0, 0, 0, 1, 0], np.float32))
    rot = quat_to_matrix(obs["state"][3:7])
    yaw = np.arctan2(rot[1, 0], rot[0, 0])
    assert abs(yaw) <= env.task.safety_box.max_rotation_rad[2] + 0.05
    assert abs(yaw) > 0.2  # it did rotate


def test_nan_and_shape_errors_leave_the_env_usable(env):
    env.reset(seed=6)
    with pytest.raises(ActionError, match="NaN"):
        env.step(np.full(7, np.nan))
    with pytest.raises(ActionError, match="shape"):
        env.step(np.zeros(3))
    env.step(np.zeros(7))


def test_episode_truncates_at_the_time_limit(env):
    env.reset(seed=0)
    for i in range(env.max_episode_steps):
        _, _, terminated, truncated, _ = env.step(np.zeros(7))
    assert truncated and not terminated


@pytest.mark.parametrize("backend", BACKENDS)
def test_cameras_render_uint8_images_of_configured_size(backend):
    env = make("PickCube", backend=backend, images=True, image_size=(48, 64))
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    for cam in ("front", "wrist"):
        img = obs["images"][cam]
        assert img.shape == (48, 64, 3) and img.dtype == np.uint8
        assert img.std() > 5  # not a blank frame
    before = obs["images"]["wrist"].copy()
    for _ in range(3):
        obs, *_ = env.step(np.array([0, 0, -1, 0, 0, 0, 0], np.float32))
    assert np.abs(obs["images"]["wrist"].astype(int) - before).mean() > 1  # the wrist camera moves with the hand
    env.close()


def red_rows(image: np.ndarray) -> np.ndarray:
    """Rows of the image where the red cube shows (red well above green and blue)."""
    img = image.astype(int)
    red = (img[:, :, 0] > 60) & (img[:, :, 0] > 2 * img[:, :, 1]) & (img[:, :, 0] > 2 * img[:, :, 2])
    return np.nonzero(red.any(axis=1))[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_side_camera_sees_the_cube_on_the_table_below_the_lift_line(backend):
    """The side camera looks level at PickCube's success height: a cube resting on the table
    shows below the image's middle row."""
    env = make("PickCube", backend=backend, images=True, image_size=(64, 64), cameras=("side",))
    obs, _ = env.reset(seed=0)
    rows = red_rows(obs["images"]["side"])
    assert len(rows) and rows.min() > 32
    env.close()


def test_side_camera_keeps_a_cube_lifted_to_the_top_of_the_safety_box_in_view():
    env = make("PickCube", images=True, image_size=(64, 64), cameras=("side",))
    expert = make_expert("PickCube", noise=0.0, seed=0)
    obs, _ = env.reset(seed=1)  # the cube on the far side of the workspace from the camera
    for _ in range(60):  # grasp and lift to 25 cm
        obs, *_ = env.step(expert(obs))
    assert obs["privileged"]["cube"][2] > 0.2
    rows = red_rows(obs["images"]["side"])
    assert len(rows) and 0 < rows.min() and rows.max() < 32  # above the lift line, inside the frame
    env.close()


def test_backends_agree_on_contract():
    envs = {b: make("PickCube", backend=b) for b in BACKENDS}
    obs = {b: e.reset(seed=11)[0] for b, e in envs.items()}
    assert envs["mujoco"].observation_space == envs["pybullet"].observation_space
    assert envs["mujoco"].action_space == envs["pybullet"].action_space
    np.testing.assert_allclose(obs["mujoco"]["privileged"]["cube"], obs["pybullet"]["privileged"]["cube"], atol=1e-6)
    np.testing.assert_allclose(obs["mujoco"]["state"][:7], obs["pybullet"]["state"][:7], atol=3e-3)
    action = np.array([1, 0, -1, 0, 0, 0, 0], np.float32)
    for _ in range(3):
        obs = {b: e.step(action)[0] for b, e in envs.items()}
    np.testing.assert_allclose(obs["mujoco"]["state"][:3], obs["pybullet"]["state"][:3], atol=0.015)
    for e in envs.values():
        e.close()


def test_unknown_task_lists_available_tasks():
    with pytest.raises(robot_rl.sim.UnknownTaskError,
                       match="available tasks: PegInsert, PegInsertHard, PickCube, PickCubeHard, PickCubeSO101, PushCube"):
        make("StackCubes")


def test_unknown_backend_lists_backends():
    with pytest.raises(robot_rl.sim.UnknownBackendError, match="mujoco, pybullet"):
        make("PickCube", backend="isaac")


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="unknown cameras"):
        make("PickCube", cameras=("top",))
    with pytest.raises(ValueError, match="image_size"):
        make("PickCube", image_size=(4, 4))


def test_step_before_reset_is_an_error():
    env = make("PickCube")
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(7))


@pytest.mark.parametrize("task", TASKS)
def test_registered_gymnasium_ids(task):
    env = gym.make(f"robot_rl/{task}-v0", backend="mujoco")
    obs, _ = env.reset(seed=0)
    assert obs["state"].shape == (contract.STATE_DIM,)
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrench_sensor_feels_the_peg_landing_on_the_fixture(backend):
    env = make("PegInsert", backend=backend)
    obs, _ = env.reset(seed=0)
    s = contract.STATE_SLICES
    hole = obs["privileged"]["hole"][:3]
    # Over the fixture's wall (4 cm off the hole centre), then straight down onto it.
    for _ in range(10):
        tcp = obs["state"][s["tcp_pos"]]
        action = np.zeros(7, np.float32)
        action[:2] = np.clip((hole[:2] + [0.04, 0.0] - tcp[:2]) / env.limits.max_translation_m, -1, 1)
        obs, *_ = env.step(action)
    free_force = obs["state"][s["ee_force"]].copy()
    for _ in range(8):
        obs, _, terminated, _, _ = env.step(np.array([0, 0, -1, 0, 0, 0, 0], np.float32))
    force = obs["state"][s["ee_force"]]
    assert not terminated
    assert abs(free_force[2]) < 2.0
    assert force[2] > 10.0, force  # the fixture pushes the hand up
    env.close()


def test_the_state_quaternion_never_flips_as_the_hand_tilts_across_home():
    """Home (the gripper down) has w = 0: the usual w >= 0 choice flipped the whole quaternion on
    any tilt across it, a jump of 2 in the observation of a pose that barely moved (the
    human's corrections and the demonstrations then disagreed on the sign, issue 43)."""
    from robot_rl.contract import HOME_QUAT, state_quat
    from robot_rl.geometry import matrix_to_quat, rotvec_to_matrix

    for axis in np.eye(3):
        quats = [state_quat(matrix_to_quat(rotvec_to_matrix(angle * axis) @ HOME_ROTATION))
                 for angle in np.linspace(-0.3, 0.3, 61)]
        assert max(np.abs(np.diff(quats, axis=0)).max(axis=1)) < 0.01, axis
        assert all(q @ HOME_QUAT > 0.9 for q in quats)
    np.testing.assert_allclose(state_quat([0.0, -1.0, 0.0, 0.0]), HOME_QUAT)
    env = make("PegInsert")
    obs, _ = env.reset(seed=0)
    s = contract.STATE_SLICES["tcp_quat"]
    previous = obs["state"][s]
    for sign in (1, -1, 1, -1):  # rock the hand about x across home: w changes sign each time
        for _ in range(3):
            obs, *_ = env.step(np.array([0, 0, 0, sign * 0.5, 0, 0, 0], np.float32))
            assert np.abs(obs["state"][s] - previous).max() < 0.2
            previous = obs["state"][s]
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_collision_reflex_ends_an_episode_that_presses_the_peg_onto_the_block(backend):
    """PegInsertHard's twin stops as a Franka's reflex does: the press ends the episode there, a
    failure; with the reflex off the same press goes on, well over the 20 N."""
    env = make("PegInsertHard", backend=backend, collision_reflex=True)
    steps = list(press_the_peg_onto_the_block(env))
    obs, reward, terminated, truncated, info = steps[-1]
    assert len(steps) < 10 and terminated and not truncated
    assert info["reflex"] and not info["success"] and reward == 0.0
    assert not any(step[4]["reflex"] for step in steps[:-1])
    env.close()
    env = make("PegInsertHard", backend=backend, collision_reflex=False)
    steps = list(press_the_peg_onto_the_block(env))
    assert len(steps) == 10 and not any(step[2] or step[4]["reflex"] for step in steps)
    assert steps[-1][0]["state"][contract.STATE_SLICES["ee_force"]][2] > 30.0  # pressing hard, unstopped
    env.close()


def test_the_collision_reflex_is_asked_for_and_its_thresholds_are_checked():
    for task in ("PegInsertHard", "PickCube", "PickCubeHard", "PegInsert", "PushCube"):  # off unless asked for
        assert not make(task).unwrapped.collision_reflex
    assert make("PickCube", collision_reflex=True).unwrapped.collision_reflex
    for bad in ((20.0, 20.0, 20.0), (20.0, 20.0, 0.0, 25.0, 25.0, 25.0)):
        with pytest.raises(robot_rl.errors.InputError, match="collision_thresholds must be 6 positive values"):
            make("PegInsertHard", collision_thresholds=bad)
    for bad in (0.0, -5.0):
        with pytest.raises(robot_rl.errors.InputError, match=r"max_force \(the arm's force bound, N per axis\) must be > 0"):
            make("PegInsertHard", max_force=bad)


def test_the_twin_and_the_franka_driver_share_the_reflex_thresholds():
    from robot_rl.drivers.franka import DEFAULT_FORCE_THRESHOLDS

    assert DEFAULT_FORCE_THRESHOLDS == contract.COLLISION_FORCE_THRESHOLDS == (20.0, 20.0, 20.0, 25.0, 25.0, 25.0)
    from robot_rl.config import ARM_MAX_FORCE
    from robot_rl.sim.controller import ImpedanceGains

    assert ImpedanceGains.max_force == ARM_MAX_FORCE  # train --arm-max-force's default is the controller's own
    env = make("PegInsertHard")
    assert tuple(env.unwrapped.collision_thresholds) == contract.COLLISION_FORCE_THRESHOLDS
