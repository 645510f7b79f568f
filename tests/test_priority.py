"""CPU priorities on a one-PC cell (robot_rl/runtime/priority.py): the control path real-time
(SCHED_FIFO for every thread, later threads included), the learner below it, and what a system
that refuses real-time scheduling gets (one warning, normal priority). Each case runs in a child
process: a test never changes its own worker's priority."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from robot_rl.errors import InputError
from robot_rl.runtime import priority
from tests.helpers.common import realtime_allowed

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_FIFO") or not os.path.isdir("/proc/self/task"),
                                reason="Linux scheduling policies")


def run_child(code: str) -> list[str]:
    """THREAD_POLICIES, then ``code``, in a fresh interpreter; the words it printed."""
    source = textwrap.dedent(THREAD_POLICIES) + textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


THREAD_POLICIES = """
    import os, threading
    from robot_rl.runtime.priority import lower_priority, set_control_priority
    def policies():
        return sorted({os.sched_getscheduler(int(t)) for t in os.listdir("/proc/self/task")})
    started = threading.Event(); release = threading.Event()
    def wait():
        started.set(); release.wait()
    early = threading.Thread(target=wait); early.start(); started.wait()  # a thread of before (DDS's)
"""


@pytest.mark.skipif(not realtime_allowed(), reason="this user may not use real-time scheduling")
def test_realtime_puts_every_thread_of_the_process_under_sched_fifo_and_later_threads_inherit_it():
    lines = run_child("""
    print(set_control_priority("realtime"))
    print(*policies(), sep=",")
    later = []
    t = threading.Thread(target=lambda: later.append(os.sched_getscheduler(0))); t.start(); t.join()
    print(later[0], os.sched_getparam(0).sched_priority)
    release.set(); early.join()
    """)
    assert lines[0] == "True"
    assert lines[1] == str(os.SCHED_FIFO)  # the thread that was already running too
    assert lines[2:] == [str(os.SCHED_FIFO), str(priority.REALTIME_PRIORITY)]


@pytest.mark.skipif(not realtime_allowed(), reason="this user may not use real-time scheduling")
def test_a_learner_started_by_a_realtime_process_drops_every_thread_to_its_own_priority():
    """A child inherits SCHED_FIFO: the learner's ``lower_priority`` sets idle or normal explicitly."""
    for learner, expected in (("idle", os.SCHED_IDLE), ("normal", os.SCHED_OTHER), ("low", os.SCHED_OTHER)):
        lines = run_child(f"""
        set_control_priority("realtime")
        lower_priority({learner!r})
        print(*policies(), sep=",", end=" ")
        print(os.nice(0))
        release.set(); early.join()
        """)
        assert lines[0] == str(expected), learner
        assert lines[1] == ("10" if learner == "low" else "0")


def test_normal_changes_nothing_and_a_refusing_system_is_one_warning_and_normal_priority(monkeypatch):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    said = []
    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert priority.set_control_priority("normal", warn=said.append) is False and said == []
    assert priority.set_control_priority("realtime", warn=said.append) is False
    (line,) = said
    assert line.startswith("priority realtime: this user may not use real-time scheduling (ulimit -r is ")
    assert "rtprio" in line and "priority:=normal" in line


def test_an_unknown_priority_names_the_choices():
    with pytest.raises(InputError, match=r"priority must be one of \['realtime', 'normal'\], got 'urgent'"):
        priority.set_control_priority("urgent")
    with pytest.raises(InputError, match=r"priority must be one of \['idle', 'low', 'normal'\], got 'realtime'"):
        priority.lower_priority("realtime")


def test_the_limit_is_read_from_the_process_s_own_limits():
    assert priority.realtime_limit() == ("unlimited" if _rtprio() == "unlimited" else _rtprio())


def _rtprio() -> str:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
