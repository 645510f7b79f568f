"""The SO-101 MuJoCo model (robot_rl.sim.so101_description, its kinematics and So101Sim): kinematics,
servos, grasp, cameras."""

import mujoco
import numpy as np
import pytest

from robot_rl.sim import so101_description as so101
from robot_rl.sim import so101_kinematics as kinematics
from robot_rl.sim.so101_description import (
    ARM_JOINTS,
    HOME,
    JOINTS,
    LIMITS,
    SERVO_MAX_SPEED_RAD_S,
    SERVO_STALL_TORQUE_NM,
    so101_spec,
)
from robot_rl.sim.so101_kinematics import forward_kinematics, jacobian
from robot_rl.sim.so101_physics import So101Sim

DOWN = np.array([0.0, 0.0, -1.0])


@pytest.fixture
def sim():
    s = So101Sim()
    yield s
    s.close()


def _rotation_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """World-frame rotation vector that turns ``current`` into ``target``."""
    quat, vel = np.zeros(4), np.zeros(3)
    mujoco.mju_mat2Quat(quat, (target @ current.T).flatten())
    mujoco.mju_quat2Vel(vel, quat, 1.0)
    return vel


def _dls(joints, position, rotation, iterations=30, damping=1e-2, rot_weight=0.3):
    """Damped least squares on the tcp pose (all 6 rows) over the 5 arm joints."""
    q = np.array(joints, dtype=float)
    low, high = so101.LIMITS_LOW[:5], so101.LIMITS_HIGH[:5]
    for _ in range(iterations):
        p, r = forward_kinematics(q)
        err = np.concatenate([position - p, rot_weight * _rotation_error(rotation, r)])
        jac = jacobian(q)
        jac[3:] *= rot_weight
        q[:5] = np.clip(q[:5] + jac.T @ np.linalg.solve(jac @ jac.T + damping ** 2 * np.eye(6), err), low, high)
    return q


def test_model_compiles_and_its_tcp_lands_where_expected():
    model = so101_spec().compile()
    assert model.nu == 6 and model.njnt == 7  # six hinges and the cube's free joint
    assert [model.joint(i).name for i in range(6)] == list(JOINTS)
    assert model.opt.timestep <= 0.0025 and model.opt.gravity[2] < 0
    np.testing.assert_allclose(model.jnt_range[:6], [LIMITS[j] for j in JOINTS])
    np.testing.assert_allclose(model.actuator_forcerange, [[-SERVO_STALL_TORQUE_NM, SERVO_STALL_TORQUE_NM]] * 6)
    # masses as in the URDF, the cube 20 g
    assert model.body("upper_arm").mass[0] == pytest.approx(0.103)
    assert model.body("cube").mass[0] == pytest.approx(0.02)
    bare = so101_spec(cube=False, cameras=False).compile()
    assert bare.ncam == 0 and bare.njnt == 6

    # all zeros: upper arm straight up, forearm and gripper straight out in front (+x)
    pos, rot = forward_kinematics(np.zeros(6))
    print("tcp at all-zero joints:", pos.round(4), "\n", rot.round(3))
    assert 0.30 < pos[0] < 0.40 and abs(pos[1]) < 0.01 and 0.22 < pos[2] < 0.30
    np.testing.assert_allclose(rot[:, 1], [-1.0, 0.0, 0.0], atol=1e-3)  # fingers (tcp -y) point forward

    pos, rot = forward_kinematics(HOME)
    print("tcp at HOME:", pos.round(4), "\n", rot.round(3))
    np.testing.assert_allclose(pos, [0.2, 0.0, 0.1], atol=0.005)
    # the tcp's -y axis runs along the fingers: at HOME it points straight down ...
    assert rot[:, 1] @ DOWN < -0.999
    # ... and it is the direction from the wrist roll joint down to the tcp, whatever the pose
    model = so101_spec(cube=False, cameras=False).compile()
    data = mujoco.MjData(model)
    for joints in (HOME, np.zeros(6), np.array([0.3, -0.5, 0.7, 0.2, 1.0, 0.5])):
        data.qpos[:6] = joints
        mujoco.mj_kinematics(model, data)
        tcp = model.site("tcp").id
        along = data.site_xpos[tcp] - data.xpos[model.body("gripper").id]
        assert along @ -data.site_xmat[tcp].reshape(3, 3)[:, 1] / np.linalg.norm(along) > 0.99


def test_holding_home_for_two_seconds_moves_the_tcp_under_2_mm(sim):
    sim.reset()
    start, _ = sim.tcp_pose()
    drift = []
    for _ in range(20):
        sim.step(0.1)
        drift.append(np.linalg.norm(sim.tcp_pose()[0] - start))
    print(f"tcp drift holding HOME: max {1000 * max(drift):.3f} mm")
    assert sim.time == pytest.approx(2.0, abs=0.01)
    assert max(drift) < 0.002
    assert np.all(np.abs(sim.joint_efforts()) <= SERVO_STALL_TORQUE_NM + 1e-9)
    np.testing.assert_allclose(sim.joint_positions(), HOME, atol=0.01)


# Gravity-free axes (pan, roll) and a lift against gravity stay under the servo's speed; a move
# that gravity helps along (the forearm swinging down) may overrun it a little, as a back-driven
# motor does: measured 5.07 rad/s (7 %) for this elbow step.
@pytest.mark.parametrize("joint, delta, slack", [("shoulder_pan", 1.0, 1.01), ("wrist_roll", -2.0, 1.01),
                                                 ("elbow_flex", -0.8, 1.01), ("elbow_flex", 0.8, 1.10)])
def test_a_target_step_moves_no_faster_than_the_servo_and_gets_there(sim, joint, delta, slack):
    i = JOINTS.index(joint)
    sim.reset()
    targets = HOME.copy()
    targets[i] += delta
    sim.set_targets(targets)
    sim.step(sim.timestep)
    assert abs(sim.commands[i] - HOME[i]) <= SERVO_MAX_SPEED_RAD_S * sim.timestep + 1e-12  # the command ramps
    positions, speeds = [sim.joint_positions()[i]], [abs(sim.joint_velocities()[i])]
    while sim.time < 1.0:
        sim.step(sim.timestep)
        positions.append(sim.joint_positions()[i])
        speeds.append(abs(sim.joint_velocities()[i]))
    positions = np.array(positions)
    moved = np.abs(positions - HOME[i])
    reached = int(np.argmax(moved >= 0.95 * abs(delta))) * sim.timestep
    mean_speed = np.max(np.abs(np.diff(positions[::10]))) / (10 * sim.timestep)  # over 20 ms windows
    print(f"{joint}: peak {max(speeds):.3f} rad/s, peak over 20 ms {mean_speed:.3f} rad/s "
          f"(limit {SERVO_MAX_SPEED_RAD_S:.3f}), 95% of the step after {reached:.3f} s")
    assert max(speeds) <= SERVO_MAX_SPEED_RAD_S * slack
    assert mean_speed <= SERVO_MAX_SPEED_RAD_S * slack
    assert reached >= 0.95 * abs(delta) / SERVO_MAX_SPEED_RAD_S
    assert abs(positions[-1] - targets[i]) < 0.005


def test_targets_outside_the_limits_are_clipped(sim):
    low, high = so101.LIMITS_LOW, so101.LIMITS_HIGH
    sim.set_targets(high + 1.0)
    np.testing.assert_array_equal(sim.targets, high)
    sim.set_targets(low - 1.0)
    np.testing.assert_array_equal(sim.targets, low)
    sim.reset(joints=HOME + 10.0)
    np.testing.assert_allclose(sim.joint_positions(), high)
    with pytest.raises(ValueError):
        sim.set_targets(np.zeros(5))
    sim.reset()
    wild = np.where(np.arange(6) % 2 == 0, high + 3.0, low - 3.0)
    sim.set_targets(wild)
    sim.step(1.5)
    assert np.all(sim.joint_positions() >= low - 0.02) and np.all(sim.joint_positions() <= high + 0.02)


def test_jacobian_matches_finite_differences_of_forward_kinematics(sim):
    rng = np.random.default_rng(0)
    before = sim.data.qpos.copy()
    for _ in range(5):
        q = rng.uniform(so101.LIMITS_LOW, so101.LIMITS_HIGH) * 0.8
        jac = jacobian(q)
        assert jac.shape == (6, len(ARM_JOINTS))
        np.testing.assert_allclose(sim.jacobian(q), jac, atol=1e-12)
        p0, r0 = forward_kinematics(q)
        fd_pos, fd_rot = np.zeros((3, 5)), np.zeros((3, 5))
        eps = 1e-6
        for k in range(5):
            dq = np.zeros(6)
            dq[k] = eps
            (pp, rp), (pm, rm) = forward_kinematics(q + dq), forward_kinematics(q - dq)
            fd_pos[:, k] = (pp - pm) / (2 * eps)
            fd_rot[:, k] = _rotation_error(rp, rm) / (2 * eps)
        np.testing.assert_allclose(jac[:3], fd_pos, atol=1e-4)
        np.testing.assert_allclose(jac[3:], fd_rot, atol=1e-4)
        # the gripper joint does not move the tcp
        np.testing.assert_allclose(forward_kinematics(np.append(q[:5], 1.5))[0], forward_kinematics(q[:5])[0])
    np.testing.assert_array_equal(sim.data.qpos, before)  # the helpers left the sim alone


def test_helpers_for_an_ik_solver_agree_with_the_sim(sim):
    _, rot = forward_kinematics(HOME)
    np.testing.assert_allclose(rot, so101.HOME_ROTATION, atol=1e-4)
    assert kinematics.tcp_yaw(rot) == pytest.approx(0.0, abs=1e-4)
    for yaw in (-2.0, -0.3, 0.0, 0.7, 3.0):
        down = kinematics.down_rotation(yaw)
        assert kinematics.tcp_yaw(down) == pytest.approx(yaw)
        np.testing.assert_allclose(down[:, 1], [0.0, 0.0, 1.0], atol=1e-12)  # fingers (tcp -y) down
    assert so101.gripper_width(0.0) == pytest.approx(0.0, abs=1e-9)
    assert so101.gripper_width(-0.1) == 0.0
    assert so101.gripper_width(so101._moving_pad()[3]) == pytest.approx(so101.CUBE_SIZE)
    assert so101.gripper_width(so101.GRIPPER_OPEN) > 0.06
    # a servo holding the arm still reads what gravity asks of it
    sim.reset()
    sim.step(1.0)
    np.testing.assert_allclose(sim.joint_efforts()[:5], kinematics.gravity_torques(sim.joint_positions())[:5], atol=0.01)
    assert abs(kinematics.gravity_torques(HOME)[1]) > 0.05  # the shoulder carries the arm


def test_the_gripper_pinches_the_cube_and_lifts_it(sim):
    cube = np.array(so101.CUBE_POS)
    _, down = forward_kinematics(HOME)  # HOME's orientation: fingers down, jaws opening along +x
    # the tcp placed so that the cube sits between the open jaws
    grasp_tcp = cube - down @ np.array(so101.CUBE_IN_TCP)
    grasp = _dls(HOME, grasp_tcp, down)
    pos, rot = forward_kinematics(grasp)
    assert np.linalg.norm(pos - grasp_tcp) < 1e-4 and rot[:, 1] @ DOWN < -0.999
    sim.reset(joints=grasp, cube_pos=cube)
    sim.step(0.3)
    np.testing.assert_allclose(sim.cube_pose()[0], cube, atol=0.002)  # nothing knocked it

    close = grasp.copy()
    close[5] = so101.GRIPPER_CLOSED
    sim.set_targets(close)
    sim.step(0.8)
    held = sim.joint_positions()[5]
    print(f"gripper stopped by the cube at {held:.3f} rad, squeezing {sim.joint_efforts()[5]:.2f} N.m")
    assert 0.2 < held < 0.45  # the cube, not the closed position, stopped the jaw
    start = sim.cube_pose()[0]

    lift = _dls(grasp, grasp_tcp + [0.0, 0.0, 0.05], down)
    assert np.abs(lift[[0, 4]] - grasp[[0, 4]]).max() < 0.01  # shoulder_lift, elbow, wrist_flex do it
    lift[5] = so101.GRIPPER_CLOSED
    sim.set_targets(lift)
    sim.step(1.0)
    end, _ = sim.cube_pose()
    print(f"tcp up {sim.tcp_pose()[0][2] - grasp_tcp[2]:.4f} m, cube up {end[2] - start[2]:.4f} m")
    assert sim.tcp_pose()[0][2] - grasp_tcp[2] > 0.045
    assert end[2] - start[2] > 0.03


def test_front_and_wrist_cameras_render_something(sim):
    sim.reset()
    for camera in ("front", "wrist"):
        image = sim.render(camera, 48, 48)
        assert image.shape == (48, 48, 3) and image.dtype == np.uint8
        assert image.std() > 5.0, camera
    assert sim.render("front", 32, 40).shape == (32, 40, 3)  # a new size, a new renderer
    sim.close()
    sim.close()
