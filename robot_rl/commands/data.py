"""``robot-rl data``: episode stores from the command line: info, check (and repair), view,
export-video, merge, split, and export / import to and from LeRobotDataset v3.0 and rosbag2. The work is ``robot_rl.data``'s; this is its command line."""

from __future__ import annotations

import json
import sys

from robot_rl.errors import is_disk_full


def add_data(sub) -> None:
    data = sub.add_parser("data", help="episode stores: info, check, view, merge, split, export-video, "
                                                 "export and import (LeRobotDataset)").add_subparsers(
        dest="data_command", required=True)
    d_info = data.add_parser("info", help="what a store holds: episodes, lengths, success rate, intervention share, "
                                          "metadata and a table of every array")
    d_info.add_argument("store")
    d_info.add_argument("--json", action="store_true", help="print it as one JSON object (the last line) instead")
    d_info.set_defaults(func=_cmd_data)
    d_check = data.add_parser("check", help="verify every chunk of every committed episode (exit 1 if damaged)")
    d_check.add_argument("store")
    d_check.add_argument("--repair", action="store_true",
                         help="drop frames no episode commits, rebuild a damaged index from the has_action flags "
                              "and restore complete episodes the index does not list (never drops a committed "
                              "episode)")
    d_check.add_argument("--discard-unlisted", action="store_true",
                         help="with --repair: drop the complete episodes the index does not list (e.g. an older "
                              "meta/ copied over newer data) instead of restoring them")
    d_check.set_defaults(func=_cmd_data)
    d_view = data.add_parser("view", help="a GIF of chosen episodes with reward/intervention overlay")
    d_view.add_argument("store")
    d_view.add_argument("--episodes", help="e.g. 0,3,5-9 (default: all)")
    d_view.add_argument("--out", help="default: <store>.view.gif")
    d_view.set_defaults(func=_cmd_data)
    d_video = data.add_parser("export-video", help="an MP4 (or GIF) of chosen episodes with the overlay")
    d_video.add_argument("store")
    d_video.add_argument("--out", required=True, help="file ending in .mp4 or .gif")
    d_video.add_argument("--episodes", help="e.g. 0,3,5-9 (default: all)")
    d_video.add_argument("--fps", type=float, help="default: the store's control rate")
    d_video.set_defaults(func=_cmd_data)
    d_merge = data.add_parser("merge", help="episodes of several stores into a new one")
    d_merge.add_argument("inputs", nargs="+")
    d_merge.add_argument("--out", required=True)
    d_merge.set_defaults(func=_cmd_data)
    d_export = data.add_parser("export", help="a store in a format other tools read: LeRobotDataset v3.0 (parquet + "
                                              "mp4, what LeRobot loads) or rosbag2 with MCAP storage (Foxglove, "
                                              "ros2 bag play)")
    d_export.add_argument("store")
    d_export.add_argument("--format", required=True, choices=["lerobot", "rosbag2"])
    d_export.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder")
    d_export.add_argument("--video", default="lossless", choices=["lossless", "h264", "av1"],
                          help="--format lerobot: lossless: H.264 in RGB, frames come back equal (default); h264: "
                               "yuv420p, crf 18, plays anywhere; av1: LeRobot's own default (both lossy)")
    d_export.set_defaults(func=_cmd_data)
    d_import = data.add_parser("import", help="a LeRobotDataset v3.0 folder or a rosbag2 into a new store")
    d_import.add_argument("source", metavar="DIR")
    d_import.add_argument("--format", required=True, choices=["lerobot", "rosbag2"])
    d_import.add_argument("--map", metavar="FILE.yaml", help="lerobot: which features are the state, the cameras and "
                                                             "the action, and how the action maps onto ours; rosbag2: "
                                                             "which topics are the cameras, the TCP's pose, wrench and "
                                                             "gripper, the rate and the episodes (docs/datasets.md); "
                                                             "not needed for what robot-rl data export wrote")
    d_import.add_argument("--out", required=True, metavar="STORE", help="the new store")
    d_import.set_defaults(func=_cmd_data)
    d_split = data.add_parser("split", help="chosen episodes into a new store")
    d_split.add_argument("store")
    d_split.add_argument("--episodes", required=True, help="e.g. 0,3,5-9")
    d_split.add_argument("--out", required=True)
    d_split.set_defaults(func=_cmd_data)


def _cmd_data(args) -> int:
    from robot_rl.data import tools

    command = args.data_command
    if command == "check":
        return _data_check(args.store, args.repair, args.discard_unlisted)
    if command == "info":
        return _data_info(args.store, args.json)
    out = (args.out or f"{str(args.store).rstrip('/')}.view.gif") if command == "view" else args.out
    try:
        if command in ("view", "export-video"):
            result = tools.export_video(args.store, out, args.episodes, getattr(args, "fps", None))
        elif command == "merge":
            result = tools.merge(out, args.inputs)
        elif command == "export" and args.format == "lerobot":
            from robot_rl.data.lerobot import export_lerobot

            result = export_lerobot(args.store, out, args.video)
        elif command == "export":
            from robot_rl.data.rosbag import export_rosbag

            result = export_rosbag(args.store, out)
        elif command == "import" and args.format == "lerobot":
            from robot_rl.data.lerobot import import_lerobot

            result = import_lerobot(args.source, out, args.map)
        elif command == "import":
            from robot_rl.data.rosbag import import_rosbag

            result = import_rosbag(args.source, out, args.map)
        else:
            result = tools.split(args.store, out, args.episodes)
    except OSError as e:
        if not is_disk_full(e):
            raise
        # every output is written under a temporary name and renamed when whole: the partial one is gone
        print(f"robot-rl: disk full: {out} was not written ({e.strerror}; nothing partial is left, the inputs are "
              "untouched); free space and run it again", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def _data_info(store: str, as_json: bool) -> int:
    """The store's summary and a table of its arrays; with ``as_json`` one JSON object of the same."""
    from robot_rl.data.info import info, info_text

    summary = info(store)
    print(json.dumps(summary) if as_json else info_text(summary))
    return 0


def _data_check(store: str, repair: bool, discard_unlisted: bool = False) -> int:
    """A line per episode (ok or what is damaged), what is wrong beyond episodes, the way out,
    then the report as JSON. Exit status 0 for a sound store, 1 for a damaged one."""
    from robot_rl.data.check import check_store

    report = check_store(store, repair=repair, discard_unlisted=discard_unlisted)
    if report["repaired"]:
        print(f"repaired: {report['repaired']}")
    for i in range(report["episodes"]):
        problems = report["episode_problems"].get(str(i))
        unlisted = report["unlisted_episodes"].get(str(i))
        print(f"episode {i}: " + ("DAMAGED: " + "; ".join(problems) if problems else "ok")
              + (f" ({unlisted})" if unlisted else ""))
    for problem in report["problems"]:
        print(f"store: {problem}")
    if not report["integrity"]:
        print("note: an older store without checksums: a garbled chunk shows only where it fails to decode, "
              "and a missing chunk reads as zeros")
    if report["fix"]:
        print(f"to repair (robot-rl data check --repair {store}): {report['fix']}")
        if report["unlisted_episodes"]:
            print(f"or, to drop the episodes the index does not list instead: robot-rl data check --repair "
                  f"--discard-unlisted {store}")
    if report["hint"]:
        print(f"way out: {report['hint']}")
    print(json.dumps(report))
    return 0 if report["ok"] else 1
