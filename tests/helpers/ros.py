"""Real ROS 2 in tests: nodes as separate processes on a private DDS domain over loopback, and
an in-process probe node to publish, subscribe and call services. Everything is bounded in
time and cleaned up."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path


def ros_environment(domain_id: int) -> dict:
    env = dict(os.environ)
    env.update(ROS_DOMAIN_ID=str(domain_id), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", MUJOCO_GL="egl",
               PYTHONUNBUFFERED="1")
    env.pop("ROS_LOCALHOST_ONLY", None)
    return env


# this process as a pytest-xdist worker: (its number, the run's number of workers, the run's id);
# tests/conftest.py sets it from xdist's config.workerinput; None in a run without workers
XDIST_WORKER: tuple[int, int, str] | None = None


def free_domain_id() -> int:
    """A ROS 2 domain in 100..199 private to this test process. Each pytest-xdist worker of a run
    (XDIST_WORKER) gets its own: the run's id picks a block of as many domains as workers, the
    worker's number one domain in it, so two workers running ROS tests at once never share a
    domain. Without workers: the process id picks one."""
    if XDIST_WORKER is None or not 1 < XDIST_WORKER[1] <= 100:
        return 100 + os.getpid() % 100
    number, count, run = XDIST_WORKER
    return 100 + zlib.crc32(run.encode()) % (100 // count) * count + number % count


@contextlib.contextmanager
def node_process(module: str, params: dict | None, domain_id: int, log_dir: Path, name: str | None = None,
                 namespace: str | None = None, env: dict | None = None):
    """``python -m module --ros-args [-r __ns:=namespace] -p k:=v ...``; SIGTERM (then SIGKILL) on exit.
    ``env``: extra environment variables of the node."""
    args = [sys.executable, "-m", module, "--ros-args"] + (["-r", f"__ns:={namespace}"] if namespace else [])
    for key, value in (params or {}).items():
        if isinstance(value, bool):
            value = str(value).lower()
        args += ["-p", f"{key}:={value}"]
    log = Path(log_dir) / f"{name or module.rsplit('.', 1)[-1]}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(args, env={**ros_environment(domain_id), **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            stop(proc)


def run_stack(cmd: list[str], env: dict, timeout: float, grace_s: float = 60.0) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)`` for a
    ``robot-rl launch`` / ``robot-rl session`` process, except on timeout: subprocess.run would
    SIGKILL it and leave its nodes running (and its parameter folder behind); this stops it with
    SIGTERM, as a service manager would, so that it stops its nodes and removes its files, then
    fails with its output. The process and its nodes are a process group of their own: whatever
    way this ends (the stack's own end, the timeout, pytest-timeout's exception in the middle of a
    wait), no member is left running and no wait is unbounded."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                out, err = proc.communicate(timeout=grace_s)  # its nodes get a grace period of 10 s each
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                out, err = proc.communicate(timeout=10)
            raise AssertionError(f"{' '.join(cmd[:3])} ... still ran after {timeout} s (stopped with SIGTERM):\n"
                                 f"{out[-3000:]}{err[-3000:]}") from None
    finally:
        _kill_group(proc)  # nodes the launcher left behind, or everything if an exception came mid-wait
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to every process of the group ``proc`` leads (``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


class Probe:
    """A test-side node in its own rclpy context on the given domain."""

    def __init__(self, domain_id: int, name: str = "probe"):
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node

        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = Node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def subscribe(self, msg_type, topic: str, qos, keep: int = 10_000) -> list:
        """Received messages with their arrival time: [(time.time(), msg), ...]."""
        received: list = []

        def on_msg(msg):
            received.append((time.time(), msg))
            del received[:-keep]

        self.node.create_subscription(msg_type, topic, on_msg, qos)
        return received

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=min(0.02, max(0.0, end - time.monotonic())))

    def spin_until(self, condition, timeout: float, what: str = "condition", between=None) -> None:
        """Spin until ``condition()`` holds (``timeout``: a failsafe only). ``between``, if
        given, is called every 50 ms while waiting (e.g. to keep publishing a command)."""
        end = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > end:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            if between is None:
                self.executor.spin_once(timeout_sec=0.02)
            else:
                between()
                self.spin_for(0.05)

    def call(self, srv_type, name: str, timeout: float = 10.0):
        client = self.node.create_client(srv_type, name)
        self.spin_until(lambda: client.service_is_ready(), timeout, f"service {name}")
        future = client.call_async(srv_type.Request())
        self.spin_until(future.done, timeout, f"reply from {name}")
        return future.result()

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()
