"""``robot-rl task check FILE | show [NAME]``: a real cell's task file checked and summarised, or
a shipped example printed (to start your own from)."""

from __future__ import annotations

from pathlib import Path


def summary(task) -> str:
    """A ``robot_rl.cell.CellTask`` in a few readable lines."""
    def nums(values) -> str:
        return "[" + ", ".join(f"{v:g}" for v in values) + "]"

    box, start = task.workspace, task.start
    lines = [
        f"{task.path}: task {task.name} on a {task.robot} arm, OK",
        f"  policy        {task.control_hz:g} Hz, episodes of {task.max_episode_steps} steps "
        f"({task.max_episode_steps / task.control_hz:g} s), gripper {'used' if task.uses_gripper else 'not used'}",
        f"  workspace     low {nums(box.low)} m, high {nums(box.high)} m, rotation within "
        f"{nums(box.max_rotation_rad)} rad",
        f"  home joints   {nums(task.home_joints)} rad",
        f"  start         {nums(start.position)} m +- {nums(start.randomise_m)} m, quat (w, x, y, z) "
        f"{nums(start.quat_wxyz)}, yaw +- {start.randomise_yaw_rad:g} rad",
    ]
    for cam in task.cameras:
        crop = "no crop" if cam.crop is None else "crop top, left, height, width " + nums(cam.crop)
        device = f"source {cam.source} (OpenCV)" if cam.source else f"serial {cam.serial or '(the first found)'}"
        lines.append(f"  camera {cam.name:<6s} {device}, {crop}, published {cam.resize[0]}x{cam.resize[1]}")
    if task.classifier is None:
        lines.append("  classifier    none: give the train stack reward_classifier:=DIR")
    else:
        found = "" if Path(task.classifier).exists() else " (not there yet: robot-rl classifier train ... --out DIR)"
        lines.append(f"  classifier    {task.classifier}{found}")
    return "\n".join(lines)


def run(args) -> int:
    from robot_rl.cell import TaskFileError, example_task_files, load_task_file

    if args.task_command == "check":
        print(summary(load_task_file(args.file)))
        return 0
    examples = example_task_files()
    if not args.name:
        for name, path in examples.items():
            print(f"{name:10s} {path}")
        return 0
    if args.name not in examples:
        raise TaskFileError(f"no example task {args.name!r}; examples: {', '.join(examples)}")
    print(examples[args.name].read_text(), end="")
    return 0


def add_task(sub) -> None:
    task = sub.add_parser("task", help="a real cell's task file (workspace, start, rate, cameras, classifier): check "
                                       "one, or print a shipped example").add_subparsers(dest="task_command",
                                                                                         required=True)
    check = task.add_parser("check", help="check a task file and summarise it (exit 2 with the first problem)")
    check.add_argument("file", help="the task file (YAML)")
    check.set_defaults(func=run)
    show = task.add_parser("show", help="print a shipped example task file (no NAME: list them)")
    show.add_argument("name", nargs="?", help="PickCube or PegInsert")
    show.set_defaults(func=run)
