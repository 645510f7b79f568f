import numpy as np
import pytest

from robot_rl import contract
from robot_rl.contract import ActionError, GripperCommand, SafetyBox, gripper_command, validate_action


def test_state_layout_is_contiguous_and_documented():
    assert contract.STATE_DIM == 20
    slices = contract.STATE_SLICES
    assert slices["tcp_pos"] == slice(0, 3)
    assert slices["ee_torque"] == slice(17, 20)


@pytest.mark.parametrize("bad", [np.zeros(6), np.zeros((1, 7)), np.zeros(8), [0.0] * 3, np.zeros((7, 1))])
def test_wrong_shaped_action_is_a_clear_error(bad):
    with pytest.raises(ActionError, match=r"shape \(7,\)"):
        validate_action(bad)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_action_is_refused(value):
    action = np.zeros(7)
    action[2] = value
    with pytest.raises(ActionError, match="NaN or inf at index \\[2\\]"):
        validate_action(action)


def test_out_of_range_action_is_clipped_to_unit_box():
    out = validate_action([5, -5, 0.5, 0, 0, 0, 2])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [1, -1, 0.5, 0, 0, 0, 1])


def test_gripper_command_thresholds():
    assert gripper_command(1.0) is GripperCommand.CLOSE
    assert gripper_command(-0.9) is GripperCommand.OPEN
    assert gripper_command(0.3) is GripperCommand.STAY


def test_safety_box_rejects_inverted_bounds():
    with pytest.raises(ValueError, match="below high"):
        SafetyBox(low=(0, 0, 0), high=(1, -1, 1))


def test_safety_box_clips_position_and_rotation():
    box = SafetyBox(low=(0, 0, 0), high=(1, 1, 1), max_rotation_rad=(0.1, 0.2, 0.3))
    np.testing.assert_allclose(box.clip_position(np.array([2.0, -1.0, 0.5])), [1, 0, 0.5])
    np.testing.assert_allclose(box.clip_rotation(np.array([1.0, -1.0, 0.0])), [0.1, -0.2, 0.0])
