"""CPU priorities on a one-PC cell: the control path (arm, cameras, actor) above everything, the
learner below it. Each process's entry point sets its own (``drivers/node.py`` ``run`` for the
control-path nodes, the learner node as it starts), never a library call, so a test that builds
a node inside its own process keeps its priority.

- The control path, ``priority`` ``realtime`` (the arm, camera and actor nodes' default): every
  thread of the process under ``SCHED_FIFO`` at ``REALTIME_PRIORITY``, threads started later
  inheriting it, as libfranka's own control thread runs. It needs the right to: root, or a
  real-time limit (``ulimit -r``; a Franka PC's ``@realtime - rtprio 99`` in
  /etc/security/limits.conf). Without it the node says so in one warning and runs at normal
  priority. ``bench ros`` measures what it buys (``..._with_learner_idle`` against
  ``..._control_normal``).
- The learner, ``priority`` ``idle`` (its default; ``SCHED_IDLE``: only the time the control
  path leaves), ``low`` (niceness 10) or ``normal``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from robot_rl.node_config import CONTROL_PRIORITIES, LEARNER_PRIORITIES
from robot_rl.errors import InputError
REALTIME_PRIORITY = 50  # SCHED_FIFO 1-99: above the kernel's threaded interrupts' default (50 shares it), below watchdogs


def _threads() -> list[int]:
    """This process's thread ids (Linux's /proc/self/task; elsewhere the calling thread alone)."""
    try:
        return sorted(int(tid) for tid in os.listdir("/proc/self/task"))
    except OSError:
        return [0]


def _set_every_thread(policy: int, priority: int) -> None:
    """Every thread of this process under ``policy`` (threads it starts later inherit it)."""
    param = os.sched_param(priority)
    for tid in _threads():
        try:
            os.sched_setscheduler(tid, policy, param)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def realtime_limit() -> str:
    """What ``ulimit -r`` says for this process (the highest SCHED_FIFO priority it may ask for)."""
    try:
        for line in Path("/proc/self/limits").read_text().splitlines():
            if line.startswith("Max realtime priority"):
                return line.split()[3]
    except OSError:
        pass
    return "unknown"


def set_control_priority(priority: str, warn: Callable[[str], None] = print) -> bool:
    """Put this process's threads at the control path's ``priority``; True when it runs real-time.
    ``realtime`` that the system refuses is one warning through ``warn`` and normal priority."""
    if priority not in CONTROL_PRIORITIES:
        raise InputError(f"priority must be one of {list(CONTROL_PRIORITIES)}, got {priority!r}")
    if priority == "normal":
        return False
    if not (hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_FIFO")):
        warn("priority realtime: this system has no SCHED_FIFO; running at normal priority")
        return False
    # no SCHED_RESET_ON_FORK: the kernel would reset the threads a node starts later (a renderer's
    # pool) as well as child processes, and the control-path nodes start no child processes
    try:
        _set_every_thread(os.SCHED_FIFO, REALTIME_PRIORITY)
    except PermissionError:
        warn(f"priority realtime: this user may not use real-time scheduling (ulimit -r is {realtime_limit()}; "
             f"allow it with a real-time limit of at least {REALTIME_PRIORITY}, e.g. '@realtime - rtprio 99' in "
             "/etc/security/limits.conf, as a Franka PC has), so the arm, cameras and actor run at normal priority "
             "and may miss their slots while a learner trains on this PC; priority:=normal silences this")
        return False
    return True


def lower_priority(priority: str) -> None:
    """This process's CPU priority as a learner beside a control path on one PC (``priority`` of
    ``LearnerNodeConfig``): ``idle`` (Linux's SCHED_IDLE: it runs on the time the arm, cameras and
    actor leave; niceness 19 where there is no such policy), ``low`` (niceness 10) or ``normal``."""
    if priority not in LEARNER_PRIORITIES:
        raise InputError(f"priority must be one of {list(LEARNER_PRIORITIES)}, got {priority!r}")
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        # started by a real-time process (a bench's actor), it would have inherited SCHED_FIFO
        _set_every_thread(os.SCHED_IDLE if priority == "idle" else os.SCHED_OTHER, 0)
    elif priority == "idle":
        os.nice(19)
    if priority == "low":
        os.nice(10)


def normal_priority() -> None:
    """Every thread of this process back at normal priority (a bench that acted as the control path)."""
    if hasattr(os, "sched_setscheduler"):
        _set_every_thread(os.SCHED_OTHER, 0)
