"""Benchmarks: ``robot-rl bench NAME [--quick] [--json] [--device DEVICE]``; each returns a dict of figures."""

from __future__ import annotations

import importlib
import inspect
import os
from typing import NamedTuple

from robot_rl.errors import UserFacingError


class Benchmark(NamedTuple):
    """A registry entry: the module with a ``run(quick: bool, log) -> dict`` function (and
    ``device`` where it takes one), and the one line ``robot-rl bench --help`` shows for it."""

    module: str
    summary: str


# name -> Benchmark: the one place a benchmark is named, found and described
BENCHMARKS: dict[str, Benchmark] = {
    "base": Benchmark("robot_rl.bench.base",
                      "a frozen base policy's cost per query and control step, in process and through a worker"),
    "classifier": Benchmark("robot_rl.bench.classifier",
                            "the success classifier as the reward: false positives, recall, steps to 90%"),
    "console": Benchmark("robot_rl.bench.console",
                         "the operator console beside 100 idle sockets: poll latency p50/p99, 503s, sockets closed"),
    "data": Benchmark("robot_rl.bench.data", "episode store write/read speed, size per codec, demo loading time"),
    "faults": Benchmark("robot_rl.bench.faults", "what a crash or a corrupt file costs: kill loops, corruptions"),
    "hil": Benchmark("robot_rl.bench.hil",
                     "what a human in the loop buys on pixels: steps to 90% with/without, console latency"),
    "learner": Benchmark("robot_rl.bench.learner", "SAC/RLPD updates/s, acting latency, replay bytes per transition"),
    "learning": Benchmark("robot_rl.bench.learning", "sample efficiency: env steps to 90-95% success per task (hours)"),
    "ros": Benchmark("robot_rl.bench.ros", "the ROS 2 control loop and learner link: latency, jitter, rates"),
    "sim": Benchmark("robot_rl.bench.sim", "sim twin env steps/s per backend and task, expert success rate"),
}


class UnknownBenchmarkError(UserFacingError, KeyError):
    def __str__(self) -> str:
        return self.args[0]


class BenchmarkDeviceError(UserFacingError):
    """``--device`` for a benchmark that does not take one."""


def private_domain(base: int, span: int) -> int:
    """The ROS 2 domain of a benchmark's own nodes: ``base`` plus this process's id modulo ``span``,
    away from a cell's domain and from another benchmark running on this machine. The one place
    a benchmark picks it (the tests put each pytest-xdist worker's benchmarks on its own domain)."""
    return base + os.getpid() % span


def listing() -> str:
    """One line per benchmark, name then what it measures (``robot-rl bench --help``)."""
    width = max(map(len, BENCHMARKS))
    return "\n".join(f"  {name:<{width}}  {entry.summary}" for name, entry in sorted(BENCHMARKS.items()))


def takes_device(run) -> bool:
    return "device" in inspect.signature(run).parameters


def run_benchmark(name: str, quick: bool = False, log=print, device: str | None = None) -> dict:
    """The figures of benchmark ``name``; ``device`` (auto, cpu, cuda, cuda:N, mps; resolved first)
    goes to a benchmark whose ``run`` takes one, and is an error for any other (None: its default)."""
    if name not in BENCHMARKS:
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}; available: {', '.join(sorted(BENCHMARKS))} "
                                    "(`robot-rl bench --help` says what each measures)")
    run = importlib.import_module(BENCHMARKS[name].module).run
    if device is None:
        return run(quick=quick, log=log)
    if not takes_device(run):
        raise BenchmarkDeviceError(f"bench {name} takes no --device (it measures the CPU); leave --device out "
                                   "(bench learner, learning and classifier take one)")
    from robot_rl.runtime.device import resolve_device

    return run(quick=quick, log=log, device=resolve_device(device))
