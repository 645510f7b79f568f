import numpy as np

from robot_rl.geometry import matrix_to_quat, matrix_to_rotvec, quat_to_matrix, quat_to_yaw, rotvec_to_matrix, yaw_to_quat


def test_rotvec_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(50):
        v = rng.normal(size=3)
        v *= rng.uniform(0, 3.0) / np.linalg.norm(v)
        np.testing.assert_allclose(matrix_to_rotvec(rotvec_to_matrix(v)), v, atol=1e-9)


def test_quat_round_trip_and_yaw():
    rng = np.random.default_rng(1)
    for _ in range(50):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        q = q if q[0] >= 0 else -q
        np.testing.assert_allclose(matrix_to_quat(quat_to_matrix(q)), q, atol=1e-9)
    assert abs(quat_to_yaw(yaw_to_quat(0.7)) - 0.7) < 1e-12


def test_quat_to_yaw_takes_one_quaternion_or_rows_of_them():
    yaws = np.radians([-170.0, -20.0, 0.0, 45.0, 170.0])
    rows = np.stack([yaw_to_quat(y) for y in yaws])
    assert isinstance(quat_to_yaw(rows[0]), float)
    np.testing.assert_allclose(quat_to_yaw(rows), [quat_to_yaw(q) for q in rows])
    np.testing.assert_allclose(quat_to_yaw(rows), yaws, atol=1e-12)
