"""Benchmarks: ``robot-rl bench NAME [--quick] [--json]``; each returns a dict of figures."""

from __future__ import annotations

import importlib

# name -> module with a ``run(quick: bool, log) -> dict`` function
BENCHMARKS = {
    "classifier": "robot_rl.bench.classifier",
    "data": "robot_rl.bench.data",
    "faults": "robot_rl.bench.faults",
    "hil": "robot_rl.bench.hil",
    "learner": "robot_rl.bench.learner",
    "learning": "robot_rl.bench.learning",
    "ros": "robot_rl.bench.ros",
    "sim": "robot_rl.bench.sim",
}


class UnknownBenchmarkError(KeyError):
    def __str__(self) -> str:
        return self.args[0]


def run_benchmark(name: str, quick: bool = False, log=print) -> dict:
    if name not in BENCHMARKS:
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}; available: {', '.join(sorted(BENCHMARKS))}")
    return importlib.import_module(BENCHMARKS[name]).run(quick=quick, log=log)
