"""Benchmarks: ``robot-rl bench NAME [--quick] [--json] [--device DEVICE]``; each returns a dict of figures."""

from __future__ import annotations

import importlib
import inspect

from robot_rl.errors import UserFacingError

# name -> module with a ``run(quick: bool, log) -> dict`` function (and ``device`` where it takes one)
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


class BenchmarkDeviceError(UserFacingError):
    """``--device`` for a benchmark that does not take one."""


def takes_device(run) -> bool:
    return "device" in inspect.signature(run).parameters


def run_benchmark(name: str, quick: bool = False, log=print, device: str | None = None) -> dict:
    """The figures of benchmark ``name``; ``device`` (auto, cpu, cuda, cuda:N, mps; resolved first)
    goes to a benchmark whose ``run`` takes one, and is an error for any other (None: its default)."""
    if name not in BENCHMARKS:
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}; available: {', '.join(sorted(BENCHMARKS))}")
    run = importlib.import_module(BENCHMARKS[name]).run
    if device is None:
        return run(quick=quick, log=log)
    if not takes_device(run):
        raise BenchmarkDeviceError(f"bench {name} takes no --device (it measures the CPU); leave --device out "
                                   "(bench learner, learning and classifier take one)")
    from robot_rl.runtime.device import resolve_device

    return run(quick=quick, log=log, device=resolve_device(device))
