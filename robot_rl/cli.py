"""The ``robot-rl`` command."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_sim_tasks(args) -> int:
    from robot_rl.sim import BACKENDS, TASKS

    for name, cls in TASKS.items():
        print(f"{name:10s} {cls.__doc__.strip().splitlines()[0]}")
    print(f"backends: {', '.join(BACKENDS)}")
    return 0


def _cmd_sim_run(args) -> int:
    from robot_rl.expert_run import ExpertRunConfig, run
    from robot_rl.sim import BACKENDS, UnknownBackendError, get_task

    for task in args.task:
        get_task(task)  # fail before any work, with the list of tasks
    for backend in args.backend:
        if backend not in BACKENDS:
            raise UnknownBackendError(f"unknown backend {backend!r}; available backends: {', '.join(BACKENDS)}")
    if args.episodes < 1:
        raise ValueError("--episodes must be at least 1")
    cfg = ExpertRunConfig(
        tasks=tuple(args.task), backends=tuple(args.backend), episodes=args.episodes, noise=args.noise,
        seed=args.seed, gif=not args.no_gif, image_size=args.image_size, out=args.out,
    )
    run(cfg)
    return 0


def _cmd_bench(args) -> int:
    from robot_rl.bench import run_benchmark

    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    figures = run_benchmark(args.name, quick=args.quick, log=log)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="robot-rl", description="Human-in-the-loop RL for robot arms, with a sim twin.")
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("sim", help="the simulated twin").add_subparsers(dest="sim_command", required=True)
    tasks = sim.add_parser("tasks", help="list tasks and backends")
    tasks.set_defaults(func=_cmd_sim_tasks)
    run = sim.add_parser("run", help="the scripted expert solves tasks; writes a success table and GIFs to a run folder")
    run.add_argument("--task", nargs="+", default=["PickCube", "PegInsert"])
    run.add_argument("--backend", nargs="+", default=["mujoco"])
    run.add_argument("--episodes", type=int, default=20)
    run.add_argument("--noise", type=float, default=0.0, help="expert action noise (0 clean, ~0.3 diverse, >=1 failing)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--image-size", type=int, default=128)
    run.add_argument("--no-gif", action="store_true")
    run.add_argument("--out", default="runs", help="parent folder of the run folder")
    run.set_defaults(func=_cmd_sim_run)

    bench = sub.add_parser("bench", help="run a benchmark; with --json the last line is a JSON object of figures")
    bench.add_argument("name")
    bench.add_argument("--quick", action="store_true", help="fewer samples, same figures (a minute or two)")
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(func=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (KeyError, ValueError) as exc:  # user errors: unknown task/backend/benchmark, bad values
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"robot-rl: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
