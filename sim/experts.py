"""Scripted experts: the stand-in for a human demonstrator (and, inside
``teleop/simulated_human.py``, for the simulated human who intervenes). They read the
sim-only ``privileged`` observation.

``noise`` is the standard deviation of Gaussian noise added to the motion part of every
action (in action units, i.e. fractions of the per-step limit), and also the chance per
step of a wrong gripper command: 0 gives clean demonstrations, ~0.3 diverse ones, >= 1
mostly failures.
"""

from __future__ import annotations

import numpy as np

from robot_rl.contract import STATE_SLICES, ControlLimits
from robot_rl.errors import InputError, UserFacingError
from robot_rl.geometry import HOME_ROTATION, matrix_to_rotvec, quat_to_matrix, quat_to_yaw
from robot_rl.sim.tasks import PegInsert, PegInsertHard, PickCube, PickCubeHard, PickCubeSO101, PushCube


def _rotation_action(tcp_rot: np.ndarray, target_rot: np.ndarray, limits: ControlLimits) -> np.ndarray:
    s = target_rot @ tcp_rot.T
    err = 0.5 * np.array([s[2, 1] - s[1, 2], s[0, 2] - s[2, 0], s[1, 0] - s[0, 1]])
    return np.clip(err / limits.max_rotation_rad, -1.0, 1.0)


def _translation_action(error: np.ndarray, limits: ControlLimits, gain: float = 1.0) -> np.ndarray:
    return np.clip(gain * error / limits.max_translation_m, -1.0, 1.0)


def _action(translation: np.ndarray, tcp_rot: np.ndarray, target_rot: np.ndarray, gripper: float,
            limits: ControlLimits) -> np.ndarray:
    """The 7-D action that moves the TCP by ``translation`` towards ``target_rot``, with ``gripper``."""
    action = np.zeros(7)
    action[:3] = _translation_action(translation, limits)
    action[3:6] = _rotation_action(tcp_rot, target_rot, limits)
    action[6] = gripper
    return action


def _tcp_pose(obs: dict) -> tuple[np.ndarray, np.ndarray]:
    """The TCP's position and rotation matrix from the observation's state."""
    state = obs["state"]
    return state[STATE_SLICES["tcp_pos"]].astype(np.float64), quat_to_matrix(state[STATE_SLICES["tcp_quat"]])


def _yaw_rotation(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]) @ HOME_ROTATION


class ScriptedExpert:
    """Base: subclasses implement ``_clean_action``; this adds the noise."""

    def __init__(self, noise: float = 0.0, seed: int | None = None, limits: ControlLimits = ControlLimits()):
        if noise < 0:
            raise InputError(f"noise must be >= 0, got {noise}")
        self.noise = noise
        self.limits = limits
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self._phase_steps = 0

    def resume(self, obs: dict) -> None:
        """Take over mid-episode: pick the phase that fits the scene as it is now."""
        self.reset()

    @staticmethod
    def progress(obs: dict) -> float:
        """How far along the task the scene is, 0 (start) to 1 (solved), from the privileged
        poses: what a watching human judges by eye."""
        raise NotImplementedError

    def unsafe(self, obs: dict) -> str:
        """What a watching operator stops before it happens, as a sentence ('' if nothing): a move
        a real arm's collision reflex would end. ``GUARDED_TASKS`` lists the tasks whose expert
        judges it; the others say ''."""
        return ""

    def __call__(self, obs: dict) -> np.ndarray:
        if "privileged" not in obs:
            raise InputError("scripted experts read obs['privileged']; create the env with privileged=True")
        action = self._clean_action(obs).astype(np.float64)
        if self.noise > 0:
            action[:6] += self.rng.normal(0.0, self.noise * self._noise_scale(obs), size=6)
            if self.rng.random() < min(self.noise, 1.0) * 0.2:
                action[6] = -action[6] if action[6] != 0 else self.rng.choice([-1.0, 1.0])
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def _noise_scale(self, obs: dict) -> float:
        """How much of ``noise`` this step gets: 1, except where a task makes a person slow down
        and move carefully."""
        return 1.0

    def _set_phase(self, phase: str) -> None:
        if phase != self.phase:
            self.phase, self._phase_steps = phase, 0

    def _clean_action(self, obs: dict) -> np.ndarray:
        raise NotImplementedError


class PickCubeExpert(ScriptedExpert):
    """Hover over the cube with the fingers aligned to its faces, descend, close, lift."""

    task = PickCube
    regrasp = False  # PickCube's demonstrations (and its measured figures) came from the expert without it
    hover = 0.07
    close_steps = 4

    @classmethod
    def _grasped(cls, obs: dict) -> bool:
        tcp = obs["state"][STATE_SLICES["tcp_pos"]]
        width = float(obs["state"][STATE_SLICES["gripper_width"]][0])
        cube = obs["privileged"]["cube"][:3]
        return bool(np.linalg.norm(cube - tcp) < 0.03 and width < 2 * cls.task.cube_half + 0.008)

    def resume(self, obs: dict) -> None:
        self.reset()
        if self._grasped(obs):
            self._set_phase("lift")

    @classmethod
    def progress(cls, obs: dict) -> float:
        tcp = obs["state"][STATE_SLICES["tcp_pos"]]
        cube = obs["privileged"]["cube"][:3]
        reach = 1.0 - min(float(np.linalg.norm(cube - tcp)) / 0.25, 1.0)
        lift = float(np.clip((cube[2] - cls.task.cube_half) / cls.task.lift_height, 0.0, 1.0))
        return 0.5 * reach + 0.5 * lift

    def _clean_action(self, obs: dict) -> np.ndarray:
        tcp, tcp_rot = _tcp_pose(obs)
        cube = obs["privileged"]["cube"].astype(np.float64)
        cube_pos, cube_yaw = cube[:3], quat_to_yaw(cube[3:7])
        # A cube looks the same every 90 degrees: grasp at the nearest face-aligned yaw.
        tcp_yaw = float(np.arctan2(tcp_rot[1, 0], tcp_rot[0, 0]))
        yaw = tcp_yaw + (np.mod(cube_yaw - tcp_yaw + np.pi / 4, np.pi / 2) - np.pi / 4)
        target_rot = _yaw_rotation(yaw)
        if self.phase == "lift" and self.regrasp and cube_pos[2] < self.task.cube_half + 0.01 and tcp[2] - cube_pos[2] > 0.03:
            self._set_phase("approach")  # the cube fell back (a slip, or a wrong gripper command): grasp again
        self._phase_steps += 1
        gripper = -1.0
        xy_err = np.linalg.norm(cube_pos[:2] - tcp[:2])
        grasp_z = max(cube_pos[2] - 0.003, 0.012)
        if self.phase == "approach":
            target = np.array([cube_pos[0], cube_pos[1], cube_pos[2] + self.hover])
            if xy_err < 0.006 and abs(yaw - tcp_yaw) < 0.05 and abs(tcp[2] - target[2]) < 0.03:
                self._set_phase("descend")
        if self.phase == "descend":
            target = np.array([cube_pos[0], cube_pos[1], grasp_z])
            if tcp[2] - grasp_z < 0.006:
                self._set_phase("close")
            elif xy_err > 0.02:  # the cube moved: go back up
                self._set_phase("approach")
        if self.phase == "close":
            target, gripper = np.array([tcp[0], tcp[1], grasp_z]), 1.0
            if self._phase_steps >= self.close_steps:
                self._set_phase("lift")
        if self.phase == "lift":
            target, gripper = np.array([tcp[0], tcp[1], 0.25]), 1.0
            target_rot = tcp_rot
        return _action(target - tcp, tcp_rot, target_rot, gripper, self.limits)


def insertion_progress(task, bottom: np.ndarray, hole: np.ndarray, align_within: float) -> float:
    """A peg task's progress: half for the peg's bottom over the hole (0 beyond ``align_within``
    metres off its axis), half for its depth from about where it starts to the success depth."""
    align = 1.0 - min(float(np.linalg.norm(hole[:2] - bottom[:2])) / align_within, 1.0)
    start = hole[2] + task.hole_depth + 0.03  # about where the peg starts
    goal = hole[2] + task.hole_depth - task.insertion_depth
    depth = float(np.clip((start - bottom[2]) / (start - goal), 0.0, 1.0))
    return 0.5 * align + 0.5 * depth


def insertion_unsafe(task, bottom: np.ndarray, hole: np.ndarray) -> str:
    """A peg down on the block off the hole: its bottom within ``GUARD_HEIGHT_M`` of the mouth's
    height (or below it) while ``GUARD_OFF_AXIS_M`` or more off the hole's axis, where it can only
    press on the rim or slide on the block's top (the clearance is under a millimetre). An operator
    lifts it off; the scripted expert never puts it there (it hovers 1 cm up until within 2 mm)."""
    off_axis = float(np.linalg.norm(bottom[:2] - hole[:2]))
    above_mouth = float(bottom[2] - (hole[2] + task.hole_depth))
    if above_mouth < GUARD_HEIGHT_M and off_axis >= GUARD_OFF_AXIS_M:
        return f"the peg goes down {1000 * off_axis:.1f} mm off the hole's axis, {1000 * above_mouth:.1f} mm above its mouth"
    return ""


GUARD_HEIGHT_M = 0.001  # the peg's bottom this close above the mouth's height, or lower, ...
GUARD_OFF_AXIS_M = 0.004  # ... and this far off the axis: twice what the hard expert goes down from


class PegInsertExpert(ScriptedExpert):
    """Centre the peg over the hole at a safe height, then descend while correcting."""

    approach_height = 0.015  # peg bottom above the hole's top while aligning

    @staticmethod
    def progress(obs: dict) -> float:
        task = PegInsert
        peg = obs["privileged"]["peg"].astype(np.float64)
        hole = obs["privileged"]["hole"].astype(np.float64)[:3]
        bottom = peg[:3] + quat_to_matrix(peg[3:7]) @ np.array([0.0, 0.0, -task.peg_half[2]])
        return insertion_progress(task, bottom, hole, align_within=0.04)

    def _clean_action(self, obs: dict) -> np.ndarray:
        task = PegInsert
        tcp, tcp_rot = _tcp_pose(obs)
        peg = obs["privileged"]["peg"].astype(np.float64)
        hole = obs["privileged"]["hole"].astype(np.float64)[:3]
        peg_bottom = peg[:3] + quat_to_matrix(peg[3:7]) @ np.array([0.0, 0.0, -task.peg_half[2]])
        hole_top = hole[2] + task.hole_depth
        xy_err = hole[:2] - peg_bottom[:2]
        self._phase_steps += 1
        target = tcp.copy()
        target[:2] += xy_err
        if self.phase == "approach":
            target[2] += hole_top + self.approach_height - peg_bottom[2]
            if np.linalg.norm(xy_err) < 0.002:
                self._set_phase("insert")
        if self.phase == "insert":
            target[2] -= 0.02
            if np.linalg.norm(xy_err) > 0.006 and peg_bottom[2] > hole_top:
                self._set_phase("approach")
        return _action(target - tcp, tcp_rot, HOME_ROTATION, 1.0, self.limits)


class PegInsertHardExpert(ScriptedExpert):
    """Turn the peg upright and to the hole's yaw (the nearest of its four), centre it over the
    hole, and push it down once it is over the hole's axis; else hover 1 cm above the mouth.

    What it does is a function of the scene alone (no phase of its own): the simulated human who
    takes over mid-episode then gives the same action in the same scene as the demonstrations
    did. An expert with a phase (align, then insert) did not: taking over in the align phase over a
    peg a millimetre off the axis at the mouth, it lifted where the demonstrations, inserting,
    pushed down, and a base cloned on both hovered at the mouth (docs/CALIBRATION.md)."""

    hover_height = 0.01  # peg bottom above the hole's top while aligning
    aligned_m = 0.002  # the peg goes down once its axis is this close to the hole's ...
    aligned_rad = 0.05  # ... and it is this close to upright at the hole's yaw
    careful_within_m = 0.01  # a person slows down within this of the hole's mouth ...
    careful_noise = 0.1  # ... and is ten times as steady there

    def _noise_scale(self, obs: dict) -> float:
        bottom, _, hole, _ = self._peg_and_hole(obs)
        mouth = hole + np.array([0.0, 0.0, PegInsertHard.hole_depth])
        near = np.linalg.norm(bottom[:2] - mouth[:2]) < self.careful_within_m and bottom[2] - mouth[2] < 0.02
        return self.careful_noise if near else 1.0

    @staticmethod
    def _peg_and_hole(obs: dict):
        peg = obs["privileged"]["peg"].astype(np.float64)
        hole = obs["privileged"]["hole"].astype(np.float64)
        peg_rot = quat_to_matrix(peg[3:7])
        bottom = peg[:3] + peg_rot @ np.array([0.0, 0.0, -PegInsertHard.peg_half[2]])
        return bottom, peg_rot, hole[:3], quat_to_yaw(hole[3:7])

    @staticmethod
    def progress(obs: dict) -> float:
        bottom, _, hole, _ = PegInsertHardExpert._peg_and_hole(obs)
        return insertion_progress(PegInsertHard, bottom, hole, align_within=0.07)

    def unsafe(self, obs: dict) -> str:
        bottom, _, hole, _ = self._peg_and_hole(obs)
        return insertion_unsafe(PegInsertHard, bottom, hole)

    def _clean_action(self, obs: dict) -> np.ndarray:
        task = PegInsertHard
        tcp, tcp_rot = _tcp_pose(obs)
        bottom, peg_rot, hole, hole_yaw = self._peg_and_hole(obs)
        # the peg upright at the hole's yaw; a square peg fits every 90 degrees: the nearest
        peg_yaw = float(np.arctan2(peg_rot[1, 0], peg_rot[0, 0]))
        yaw = peg_yaw + (np.mod(hole_yaw - peg_yaw + np.pi / 4, np.pi / 2) - np.pi / 4)
        turn = _yaw_rotation(yaw) @ HOME_ROTATION.T @ peg_rot.T  # the peg's rotation to that pose
        target_rot = turn @ tcp_rot
        rotation_error = float(np.linalg.norm(matrix_to_rotvec(turn)))
        hole_top = hole[2] + task.hole_depth
        xy_err = hole[:2] - bottom[:2]
        target = tcp.copy()
        target[:2] += xy_err
        if np.linalg.norm(xy_err) < self.aligned_m and rotation_error < self.aligned_rad:
            target[2] -= 0.01  # down, centring as it goes
        else:
            target[2] += hole_top + self.hover_height - bottom[2]
        return _action(target - tcp, tcp_rot, target_rot, 1.0, self.limits)


class PushCubeExpert(ScriptedExpert):
    """Come down behind the cube on the line from the mark through it, then push along that
    line, steering back onto it as the cube turns; rise and go round when the cube gets away.
    Like PegInsertHard's, a function of the scene alone (no phase of its own)."""

    push_height = 0.02  # the closed fingers at the cube's middle
    travel_height = 0.07  # over the cube
    standoff = 0.045  # the TCP's distance behind the cube's centre when it starts a push

    @staticmethod
    def progress(obs: dict) -> float:
        tcp = obs["state"][STATE_SLICES["tcp_pos"]]
        cube = obs["privileged"]["cube"][:3]
        target = obs["privileged"]["target"][:3]
        reach = 1.0 - min(float(np.linalg.norm(cube[:2] - tcp[:2])) / 0.25, 1.0)
        push = 1.0 - min(float(np.linalg.norm(target[:2] - cube[:2])) / max(PushCube.push_distance), 1.0)
        return 0.2 * reach + 0.8 * push

    def _clean_action(self, obs: dict) -> np.ndarray:
        tcp, tcp_rot = _tcp_pose(obs)
        cube = obs["privileged"]["cube"].astype(np.float64)[:2]
        mark = obs["privileged"]["target"].astype(np.float64)[:2]
        to_mark = mark - cube
        distance = float(np.linalg.norm(to_mark))
        heading = to_mark / max(distance, 1e-9)
        normal = np.array([-heading[1], heading[0]])
        along = float((tcp[:2] - cube) @ heading)  # < 0: behind the cube
        lateral = float((tcp[:2] - cube) @ normal)
        behind = cube - self.standoff * heading
        low = tcp[2] < self.travel_height - 0.02
        if low and abs(lateral) < 0.009 and along < -0.02:  # behind the cube, on its line: push
            advance = float(np.clip(distance, 0.004, 0.015))
            target_xy = tcp[:2] + advance * heading - 0.8 * lateral * normal
            target = np.array([target_xy[0], target_xy[1], self.push_height])
        elif low:  # beside or past the cube: up, clear of it
            target = np.array([tcp[0], tcp[1], self.travel_height])
        elif np.linalg.norm(behind - tcp[:2]) > 0.008:  # over to the point behind it
            target = np.array([behind[0], behind[1], self.travel_height])
        else:  # and down there
            target = np.array([behind[0], behind[1], self.push_height])
        return _action(target - tcp, tcp_rot, HOME_ROTATION, 1.0, self.limits)


class PickCubeSO101Expert(ScriptedExpert):
    """Over the cube with the jaws square to its faces, down, close, lift: the contract's actions
    from the privileged cube pose (100 of 100 picks, about 15 steps each). The cube sits between
    the jaws ``so101_description.CUBE_IN_TCP`` from the TCP (the moving jaw swings toward the
    fixed one), so the TCP aims that far off the cube."""

    hover = 0.05
    close_steps = 5
    # a fraction of the way to its aim each step: the SO-101's displacements add up into its target
    # while its servos are still on the way, and a full step against a lagging TCP overshoots
    # (measured on the twin with the observation 60 ms into the period: 23 of 30 picks at 1.0,
    # 30 of 30 at 0.6)
    gain = 0.6

    @staticmethod
    def progress(obs: dict) -> float:
        task = PickCubeSO101
        tcp = obs["state"][STATE_SLICES["tcp_pos"]].astype(np.float64)
        cube = obs["privileged"]["cube"][:3].astype(np.float64)
        reach = 1.0 - min(float(np.linalg.norm(cube - tcp)) / 0.15, 1.0)
        lift = float(np.clip((cube[2] - task.cube_half) / task.lift_height, 0.0, 1.0))
        return 0.5 * reach + 0.5 * lift

    def _clean_action(self, obs: dict) -> np.ndarray:
        from robot_rl.sim import so101_kinematics as kinematics
        from robot_rl.sim.so101_description import CUBE_IN_TCP

        state = obs["state"]
        tcp = state[STATE_SLICES["tcp_pos"]].astype(np.float64)
        rot = quat_to_matrix(state[STATE_SLICES["tcp_quat"]].astype(np.float64)) @ kinematics.TCP_TO_CONTRACT.T
        cube = obs["privileged"]["cube"].astype(np.float64)
        tcp_yaw = kinematics.tcp_yaw(rot)
        # a cube looks the same every 90 degrees: the nearest face-aligned yaw
        yaw = tcp_yaw + (np.mod(quat_to_yaw(cube[3:7]) - tcp_yaw + np.pi / 4, np.pi / 2) - np.pi / 4)
        aim = cube[:3] - kinematics.down_rotation(yaw) @ np.asarray(CUBE_IN_TCP)  # the cube between the jaws
        gripper = -1.0
        self._phase_steps += 1
        if self.phase == "approach":
            target = aim + [0.0, 0.0, self.hover]
            if np.linalg.norm(target - tcp) < 0.006 and abs(yaw - tcp_yaw) < 0.05:
                self._set_phase("descend")
        if self.phase == "descend":
            target = aim
            if np.linalg.norm(target - tcp) < 0.004:
                self._set_phase("close")
        if self.phase == "close":
            target, gripper = aim, 1.0
            if self._phase_steps >= self.close_steps:
                self._set_phase("lift")
        if self.phase == "lift":
            target, gripper = aim + [0.0, 0.0, 0.12], 1.0
        action = np.zeros(7)
        action[:3] = np.clip(self.gain * (target - tcp) / self.limits.max_translation_m, -1.0, 1.0)
        action[5] = np.clip((yaw - tcp_yaw) / self.limits.max_rotation_rad, -1.0, 1.0)
        action[6] = gripper
        return action


class PickCubeHardExpert(PickCubeExpert):
    """PickCube's expert on the red cube among the others (it never touches them: they lie at
    least 9 cm away)."""

    task = PickCubeHard
    regrasp = True


EXPERTS = {PickCube.name: PickCubeExpert, PickCubeHard.name: PickCubeHardExpert, PegInsert.name: PegInsertExpert,
           PegInsertHard.name: PegInsertHardExpert, PushCube.name: PushCubeExpert, PickCubeSO101.name: PickCubeSO101Expert}
GUARDED_TASKS = tuple(name for name, expert in EXPERTS.items()  # the tasks whose experts judge moves (``unsafe``)
                      if expert.unsafe is not ScriptedExpert.unsafe)


class NoExpertError(UserFacingError):
    """A task without a scripted expert where one is needed (demonstrations, a simulated human)."""


def check_expert(task: str, needed_by: str) -> None:
    """Refuse a task (a sim task's or a cell's task file's name) without a scripted expert,
    naming ``needed_by`` (who needs one) and the tasks that have one."""
    if task not in EXPERTS:
        raise NoExpertError(f"{needed_by} needs a scripted expert, and task {task!r} has none; the tasks with one: "
                            f"{', '.join(sorted(EXPERTS))}")


def check_guard(task: str) -> None:
    """Refuse a simulated human's guard on a task whose expert judges no move unsafe."""
    if task not in GUARDED_TASKS:
        raise NoExpertError(f"the simulated human's guard (--human-guards) stops moves that task's expert judges "
                            f"unsafe, and {task!r}'s judges none; the tasks it guards: {', '.join(GUARDED_TASKS)}")


def make_expert(task: str, noise: float = 0.0, seed: int | None = None, limits: ControlLimits = ControlLimits()):
    from robot_rl.sim.tasks import get_task

    get_task(task)  # raises a clear error listing the tasks
    check_expert(task, "a scripted run")
    return EXPERTS[task](noise=noise, seed=seed, limits=limits)


def run_episode(env, expert, seed: int | None = None, frames: list | None = None) -> dict:
    """Roll out one episode; returns steps, success, return. Appends rendered frames if asked."""
    obs, info = env.reset(seed=seed)
    expert.reset()
    total, steps, success = 0.0, 0, False
    while True:
        if frames is not None:
            frames.append(obs)
        obs, reward, terminated, truncated, info = env.step(expert(obs))
        total += reward
        steps += 1
        success = success or info["success"]
        if terminated or truncated:
            break
    if frames is not None:
        frames.append(obs)
    return {"steps": steps, "success": success, "return": total}
