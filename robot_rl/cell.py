"""A task on a real cell, from a YAML task file: no simulator behind it.

The file says what the arm may do (the workspace box, the home joints, where each episode
starts and how that start is randomised), how fast the policy runs and for how long, which
cameras it sees (RealSense serial, crop, published size) and which success classifier gives
the reward. ``load_task_file`` checks it whole: every problem is one ``TaskFileError`` line
naming the file and the field (the first problem found). ``from_sim_task`` describes a sim
twin task the same way, so the nodes take either (``resolve_task``: the file when one is
given, else the sim task named). Examples ship with the package (``example_task_files``).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robot_rl.contract import ControlLimits, SafetyBox
from robot_rl.errors import UserFacingError

ROBOTS = ("franka", "so101")  # arms with a driver that reads task files
ROBOT_JOINTS = {"franka": 7, "so101": 6}  # how many home_joints each has (the SO-101's: five and its gripper)
DOWN_WXYZ = (0.0, 1.0, 0.0, 0.0)  # the gripper pointing down (the sim's home rotation)
EXAMPLES_DIR = Path(__file__).resolve().parent / "tasks"


class TaskFileError(UserFacingError):
    """A task file that cannot be read or does not describe a task; names the file and the field."""


class UnknownCellTask(UserFacingError):
    """A task name that is neither given by a task file nor a sim twin task."""


@dataclass(frozen=True)
class CameraSpec:
    name: str  # "front", "wrist", ...: topics cameras/<name>/...
    serial: str = ""  # RealSense serial number ("" = the first camera found)
    source: str = ""  # or an OpenCV camera (camera_node backend opencv): "/dev/video0", a device index, a URL
    crop: tuple[int, int, int, int] | None = None  # top, left, height, width of the sensor image
    resize: tuple[int, int] = (64, 64)  # (height, width) published


@dataclass(frozen=True)
class StartPose:
    position: tuple[float, float, float]  # TCP, metres, base frame
    quat_wxyz: tuple[float, float, float, float] = DOWN_WXYZ
    randomise_m: tuple[float, float, float] = (0.0, 0.0, 0.0)  # uniform +- per axis
    randomise_yaw_rad: float = 0.0  # uniform +- about the base z axis


@dataclass(frozen=True)
class CellTask:
    name: str
    robot: str  # "franka" or "so101"
    workspace: SafetyBox
    home_joints: tuple[float, ...]  # joint angles, radians: a Franka's 7, an SO-101's 6
    start: StartPose
    control_hz: float
    max_episode_steps: int
    cameras: tuple[CameraSpec, ...]
    classifier: str | None  # a success classifier folder (absolute), or None
    uses_gripper: bool
    path: str | None = None  # the task file it came from (None: a sim task)

    @property
    def source(self) -> str:
        return self.path or f"sim task {self.name}"

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)

    @property
    def image_size(self) -> tuple[int, int]:
        """The size every camera publishes (the file is refused when they differ)."""
        return self.cameras[0].resize if self.cameras else (64, 64)

    def camera(self, name: str) -> CameraSpec:
        for cam in self.cameras:
            if cam.name == name:
                return cam
        raise TaskFileError(f"{self.source}: cameras: no camera {name!r}; it has {list(self.camera_names)}")

    def control_limits(self) -> ControlLimits:
        return ControlLimits(control_hz=self.control_hz)

    def sample_start(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One episode's start: (TCP position, quaternion w, x, y, z) with the randomisation
        applied, the position clipped into the workspace box."""
        start = self.start
        offset = rng.uniform(-1.0, 1.0, 3) * np.asarray(start.randomise_m)
        position = self.workspace.clip_position(np.asarray(start.position) + offset)
        yaw = rng.uniform(-start.randomise_yaw_rad, start.randomise_yaw_rad) if start.randomise_yaw_rad else 0.0
        quat = _quat_mul(np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]), np.asarray(start.quat_wxyz))
        return position, quat if quat[0] >= 0 else -quat

    def privileged_sizes(self) -> dict[str, int]:
        """The sim's object poses (sizes by name): only a sim twin task has them."""
        from robot_rl.sim.tasks import TASKS

        if self.name not in TASKS:
            raise UnknownCellTask(f"{self.source}: task {self.name!r} has no sim twin, so no object poses "
                                  f"(privileged observations); use obs pixels (sim tasks: {', '.join(TASKS)})")
        return TASKS[self.name]().privileged_sizes()


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw])


# ------------------------------------------------------------------ reading a file
class _Reader:
    """Checks values of one file; every problem is a TaskFileError naming the file and the field."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, problem: str):
        raise TaskFileError(f"{self.path}: {where}: {problem}" if where else f"{self.path}: {problem}")

    def mapping(self, value, where: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected a mapping of {', '.join(required + optional)}, got {_shown(value)}")
        allowed = required + optional
        for key in value:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                self.fail(_join(where, str(key)), f"unknown key ({hint}allowed: {', '.join(allowed)})")
        for key in required:
            if key not in value:
                self.fail(_join(where, key), "missing (required)")
        return value

    def number(self, value, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"expected a number, got {_shown(value)}")
        if not math.isfinite(value):
            self.fail(where, f"expected a finite number, got {value}")
        return float(value)

    def numbers(self, value, where: str, n: int) -> tuple[float, ...]:
        if not isinstance(value, (list, tuple)):
            self.fail(where, f"expected {n} numbers, got {_shown(value)}")
        if len(value) != n:
            self.fail(where, f"expected {n} numbers, got {len(value)}")
        return tuple(self.number(v, f"{where}[{i}]") for i, v in enumerate(value))

    def integers(self, value, where: str, n: int, what: str) -> tuple[int, ...]:
        if not isinstance(value, (list, tuple)) or len(value) != n or any(
                isinstance(v, bool) or not isinstance(v, int) for v in value):
            self.fail(where, f"expected {n} whole numbers ({what}), got {_shown(value)}")
        return tuple(value)

    def positive_int(self, value, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.fail(where, f"expected a positive whole number, got {_shown(value)}")
        return value

    def string(self, value, where: str, allow_empty: bool = False) -> str:
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            self.fail(where, f"expected {'a' if allow_empty else 'a non-empty'} string, got {_shown(value)}")
        return value

    def boolean(self, value, where: str) -> bool:
        if not isinstance(value, bool):
            self.fail(where, f"expected true or false, got {_shown(value)}")
        return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _shown(value) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


TOP_REQUIRED = ("name", "robot", "control_hz", "max_episode_steps", "uses_gripper", "workspace", "home_joints",
                "start", "cameras")
TOP_OPTIONAL = ("classifier",)


def load_task_file(path) -> CellTask:
    """The task a YAML task file describes, checked whole (see the module's doc)."""
    from robot_rl.config_values import read_yaml_file

    path = Path(path)
    r = _Reader(path)
    data = read_yaml_file(path, TaskFileError, "task file")
    if data is None:
        r.fail("", f"empty; a task file sets {', '.join(TOP_REQUIRED)}")
    r.mapping(data, "", TOP_REQUIRED, TOP_OPTIONAL)

    name = r.string(data["name"], "name")
    robot = r.string(data["robot"], "robot")
    if robot not in ROBOTS:
        r.fail("robot", f"{robot!r} has no driver that reads task files; the robots accepted are "
                        f"{', '.join(map(repr, ROBOTS))}")
    control_hz = r.number(data["control_hz"], "control_hz")
    if control_hz <= 0:
        r.fail("control_hz", f"must be > 0 (the policy's rate, Hz), got {data['control_hz']}")
    max_episode_steps = r.positive_int(data["max_episode_steps"], "max_episode_steps")
    uses_gripper = r.boolean(data["uses_gripper"], "uses_gripper")
    workspace = _workspace(r, data["workspace"])
    home = r.numbers(data["home_joints"], "home_joints", ROBOT_JOINTS[robot])
    start = _start(r, data["start"], workspace)
    cameras = _cameras(r, data["cameras"])
    classifier = data.get("classifier")
    if classifier is not None:
        classifier = r.string(classifier, "classifier", allow_empty=True).strip()
    classifier = str((path.parent / classifier).resolve()) if classifier else None
    return CellTask(name=name, robot=robot, workspace=workspace, home_joints=home, start=start, control_hz=control_hz,
                    max_episode_steps=max_episode_steps, cameras=cameras, classifier=classifier,
                    uses_gripper=uses_gripper, path=str(path))


def _workspace(r: _Reader, value) -> SafetyBox:
    r.mapping(value, "workspace", ("low", "high"), ("max_rotation_rad",))
    low = r.numbers(value["low"], "workspace.low", 3)
    high = r.numbers(value["high"], "workspace.high", 3)
    for axis, lo, hi in zip("xyz", low, high):
        if lo >= hi:
            r.fail("workspace", f"low must be below high on every axis; {axis}: low {lo} >= high {hi}")
    rotation = (0.5, 0.5, 1.0)
    if "max_rotation_rad" in value:
        rotation = r.numbers(value["max_rotation_rad"], "workspace.max_rotation_rad", 3)
        if min(rotation) < 0:
            r.fail("workspace.max_rotation_rad", f"bounds must be >= 0, got {list(rotation)}")
    return SafetyBox(low=low, high=high, max_rotation_rad=rotation)


def _start(r: _Reader, value, workspace: SafetyBox) -> StartPose:
    r.mapping(value, "start", ("position",), ("quat_wxyz", "randomise_m", "randomise_yaw_rad"))
    position = r.numbers(value["position"], "start.position", 3)
    if not workspace.contains(np.asarray(position)):
        r.fail("start.position", f"{list(position)} lies outside the workspace box (low {list(workspace.low)}, "
                                 f"high {list(workspace.high)})")
    quat = DOWN_WXYZ
    if "quat_wxyz" in value:
        quat = r.numbers(value["quat_wxyz"], "start.quat_wxyz", 4)
        norm = math.sqrt(sum(q * q for q in quat))
        if abs(norm - 1.0) > 1e-3:
            r.fail("start.quat_wxyz", f"not a unit quaternion (norm {norm:.4g}); the gripper pointing down is "
                                      "[0, 1, 0, 0]")
        quat = tuple(q / norm for q in quat)
    randomise = (0.0, 0.0, 0.0)
    if "randomise_m" in value:
        randomise = r.numbers(value["randomise_m"], "start.randomise_m", 3)
        if min(randomise) < 0:
            r.fail("start.randomise_m", f"ranges must be >= 0 metres, got {list(randomise)}")
    yaw = 0.0
    if "randomise_yaw_rad" in value:
        yaw = r.number(value["randomise_yaw_rad"], "start.randomise_yaw_rad")
        if not 0.0 <= yaw <= math.pi:
            r.fail("start.randomise_yaw_rad", f"must lie in [0, pi] radians, got {yaw}")
    return StartPose(position=position, quat_wxyz=quat, randomise_m=randomise, randomise_yaw_rad=yaw)


def _cameras(r: _Reader, value) -> tuple[CameraSpec, ...]:
    if not isinstance(value, list) or not value:
        r.fail("cameras", f"expected a list of cameras ({{name: front, ...}}), got {_shown(value)}")
    cameras: list[CameraSpec] = []
    for i, item in enumerate(value):
        where = f"cameras[{i}]"
        r.mapping(item, where, ("name",), ("serial", "source", "crop", "resize"))
        name = r.string(item["name"], f"{where}.name")
        if name in [c.name for c in cameras]:
            r.fail(f"{where}.name", f"camera {name!r} is named twice; camera names must be unique")
        serial = item.get("serial", "")
        if isinstance(serial, int) and not isinstance(serial, bool):
            r.fail(f"{where}.serial", f"write the serial number in quotes (serial: \"{serial}\"), YAML read a number")
        serial = r.string("" if serial is None else serial, f"{where}.serial", allow_empty=True)
        source = item.get("source", "")
        if isinstance(source, int) and not isinstance(source, bool):
            source = str(source)  # a device index
        source = r.string("" if source is None else source, f"{where}.source", allow_empty=True)
        if serial and source:
            r.fail(f"{where}.source", "give serial (a RealSense) or source (an OpenCV camera: /dev/video0, a device "
                                      "index, a stream URL), not both")
        crop = None
        if item.get("crop") is not None:
            crop = r.integers(item["crop"], f"{where}.crop", 4, "top, left, height, width of the sensor image")
            if crop[2] <= 0 or crop[3] <= 0 or min(crop[:2]) < 0:
                r.fail(f"{where}.crop", f"top and left must be >= 0 and height and width > 0, got {list(crop)}")
        resize = (64, 64)
        if "resize" in item:
            resize = r.integers(item["resize"], f"{where}.resize", 2, "height, width")
            if min(resize) < 1:
                r.fail(f"{where}.resize", f"height and width must be > 0, got {list(resize)}")
        if cameras and resize != cameras[0].resize:
            r.fail(f"{where}.resize", f"{list(resize)} differs from {cameras[0].name}'s {list(cameras[0].resize)}; "
                                      "every camera publishes one size (the policy takes one image size)")
        cameras.append(CameraSpec(name=name, serial=serial, source=source, crop=crop, resize=resize))
    return tuple(cameras)


# ------------------------------------------------------------------ sim tasks, examples, nodes
def from_sim_task(name: str) -> CellTask:
    """A sim twin task (``robot_rl.sim.tasks``) as a CellTask: its safety box, home joints and home
    TCP position (gripper down), episode length and gripper use; 10 Hz; front and wrist 64x64."""
    from robot_rl.sim.tasks import TASKS

    if name not in TASKS:
        raise UnknownCellTask(f"unknown task {name!r}; sim tasks: {', '.join(sorted(TASKS))} (a real cell's task "
                              "comes from a task file: task_file:=FILE.yaml)")
    task = TASKS[name]()
    return CellTask(name=task.name, robot=task.robot, workspace=task.safety_box, home_joints=tuple(task.home_joints),
                    start=StartPose(position=tuple(task.home_tcp_pos)), control_hz=10.0,
                    max_episode_steps=task.max_episode_steps,
                    cameras=(CameraSpec("front"), CameraSpec("wrist")), classifier=None,
                    uses_gripper=task.uses_gripper)


def example_task_files() -> dict[str, Path]:
    """The task files shipped with the package, by task name."""
    import yaml

    out = {}
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        out[yaml.safe_load(path.read_text())["name"]] = path
    return out


def resolve_task(task: str, task_file: str | None = "") -> CellTask:
    """What a node runs: the task file when one is given (its name wins over ``task``), else the
    sim task named ``task``."""
    return load_task_file(task_file) if task_file else from_sim_task(task)
