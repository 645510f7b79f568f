"""``robot-rl launch NAME [arg:=value ...]``: a stack of ``launch/stacks.yaml`` as supervised
processes, for machines with ROS 2 from pip wheels (no ``ros2`` CLI). ``ros2 launch`` builds the
same nodes from the same file (``robot_rl.drivers.launch_description``), so the two never drift.

Each node runs as ``python -m robot_rl.<package>.<executable> --ros-args -r __node:=<name>
--params-file <run>/<name>.params.yaml [-r from:=to ...]``, its output prefixed with its name.
A ``required`` node's exit ends the stack; a ``respawn`` node is restarted when it dies, unless
it exits with status 2 (a configuration error: restarting would not fix it), which ends the
stack with that status; Ctrl-C, SIGTERM or SIGHUP stops every node (SIGTERM, then SIGKILL after a
grace period). The operator console's token (``ROBOT_RL_CONSOLE_TOKEN``) reaches the teleop node's
environment only.

The nodes' parameter files live in a temporary folder (``robot-rl-launch-*`` in ``$TMPDIR``, by
default /tmp) that is removed when the stack stops, however it stops, short of SIGKILL; with
``ROBOT_RL_KEEP_LAUNCH_FILES`` set it is kept.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from robot_rl.errors import UserFacingError

# executable -> the module that runs it
EXECUTABLES = {name: f"robot_rl.drivers.{name}" for name in ("arm_node", "camera_node", "actor_node", "learner_node",
                                                             "recorder_node", "franka_sim_node",
                                                             "so101_sim_node")}
EXECUTABLES["teleop_node"] = "robot_rl.teleop.teleop_node"
CONSOLE_TOKEN_ENV = "ROBOT_RL_CONSOLE_TOKEN"  # robot_rl.teleop.console reads it (kept ROS-free, no import)
USER_ERROR_EXIT = 2  # what a node exits with on a configuration error (one line said why)
FOLDER_PREFIX = "robot-rl-launch-"  # the nodes' parameter files: $TMPDIR/robot-rl-launch-*
KEEP_FILES_ENV = "ROBOT_RL_KEEP_LAUNCH_FILES"  # set: keep that folder when the stack stops
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
INTERRUPTED_EXIT = 130  # stopped by Ctrl-C (SIGINT), as a shell reports it


class LaunchError(UserFacingError):
    """A stack that does not exist, an unknown argument, or a malformed stack file."""


def stacks_file() -> Path:
    """``launch/stacks.yaml`` of the source tree, or the copy installed beside the package."""
    here = Path(__file__).resolve().parent
    candidates = [here.parents[1] / "launch" / "stacks.yaml"]  # the source tree (editable installs)
    try:  # a colcon install: share/robot_rl/launch
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory("robot_rl")) / "launch" / "stacks.yaml")
    except Exception:  # no ament index, or robot_rl not in it
        pass
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise LaunchError("launch/stacks.yaml not found (looked in the source tree and the ament index)")


def load_stacks(path: Path | None = None) -> dict:
    data = yaml.safe_load(Path(path or stacks_file()).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("stacks"), dict):
        raise LaunchError(f"{path or stacks_file()}: expected a top-level 'stacks' mapping")
    return data["stacks"]


@dataclass
class NodeSpec:
    name: str
    executable: str
    parameters: dict = field(default_factory=dict)
    remappings: list = field(default_factory=list)
    required: bool = False
    respawn: bool = False


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if ":=" not in item:
            raise LaunchError(f"stack arguments are written name:=value, got {item!r}")
        key, value = item.split(":=", 1)
        out[key] = value
    return out


def _substitute(value, args: dict[str, str]):
    """``{name}`` -> the argument's text; a whole-value substitution is then read as YAML, so
    "64" is an int, "[front,wrist]" a list, "" an empty string."""
    if isinstance(value, str):
        try:
            text = value.format(**args)
        except KeyError as e:
            raise LaunchError(f"stack parameter {value!r} names an argument the stack does not declare: {e}") from e
        if "{" in value:
            parsed = yaml.safe_load(text) if text.strip() else ""
            return "" if parsed is None else parsed
        return text
    if isinstance(value, list):
        return [_substitute(v, args) for v in value]
    return value


def resolve(stack_name: str, overrides: dict[str, str] | None = None, stacks: dict | None = None) -> list[NodeSpec]:
    """The nodes of a stack with its arguments substituted (defaults, then ``overrides``)."""
    stacks = stacks if stacks is not None else load_stacks()
    if stack_name not in stacks:
        raise LaunchError(f"no stack {stack_name!r}; stacks: {', '.join(sorted(stacks))}")
    stack = stacks[stack_name]
    args = {k: "" if v is None else str(v) for k, v in (stack.get("args") or {}).items()}
    overrides = dict(overrides or {})
    # node.parameter:=value sets one node's parameter directly (robot-rl launch only)
    node_overrides = {k: overrides.pop(k) for k in list(overrides) if "." in k}
    unknown = sorted(set(overrides) - set(args))
    if unknown:
        raise LaunchError(f"stack {stack_name} has no argument {unknown[0]!r}; its arguments: {', '.join(sorted(args))} "
                          "(or node.parameter:=value)")
    args.update(overrides)
    names = [n.get("name") for n in stack.get("nodes") or []]
    for key in node_overrides:
        if key.split(".", 1)[0] not in names:
            raise LaunchError(f"stack {stack_name} has no node {key.split('.', 1)[0]!r}; its nodes: {', '.join(names)}")
    nodes = []
    for raw in stack.get("nodes") or []:
        if raw.get("executable") not in EXECUTABLES:
            raise LaunchError(f"stack {stack_name}: node {raw.get('name')!r} has executable {raw.get('executable')!r}; "
                              f"known: {', '.join(EXECUTABLES)}")
        params = {k: _substitute(v, args) for k, v in (raw.get("parameters") or {}).items()}
        for key, value in node_overrides.items():
            node_name, param = key.split(".", 1)
            if node_name == raw["name"]:
                params[param] = _substitute("{_}", {**args, "_": value})
        remaps = [(_substitute(a, args), _substitute(b, args)) for a, b in (raw.get("remappings") or {}).items()]
        nodes.append(NodeSpec(raw["name"], raw["executable"], params, remaps, bool(raw.get("required")),
                              bool(raw.get("respawn"))))
    return nodes


def node_command(node: NodeSpec, params_file: Path) -> list[str]:
    cmd = [sys.executable, "-m", EXECUTABLES[node.executable], "--ros-args", "-r", f"__node:={node.name}",
           "--params-file", str(params_file)]
    for src, dst in node.remappings:
        cmd += ["-r", f"{src}:={dst}"]
    return cmd


def node_environment(node: NodeSpec, env: dict | None) -> dict:
    """The environment a node runs in: the stack's, without the console token unless it is the
    teleop node (which serves the console)."""
    env = dict(os.environ if env is None else env)
    if node.executable != "teleop_node":
        env.pop(CONSOLE_TOKEN_ENV, None)
    return env


def write_params(node: NodeSpec, folder: Path) -> Path:
    path = folder / f"{node.name}.params.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": node.parameters}}, sort_keys=True))
    return path


class Supervisor:
    """Start, watch, respawn and stop the processes of one stack."""

    def __init__(self, nodes: list[NodeSpec], log=print, grace_s: float = 10.0, env: dict | None = None,
                 keep_files: bool | None = None):
        """``keep_files``: keep the nodes' parameter files when the stack stops (default: whether
        ROBOT_RL_KEEP_LAUNCH_FILES is set)."""
        self.nodes, self.log, self.grace_s = nodes, log, grace_s
        self.env = env
        self.keep_files = bool(os.environ.get(KEEP_FILES_ENV)) if keep_files is None else keep_files
        self.folder: Path | None = None  # the parameter files' folder, made by the first start()
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts: dict[str, int] = {n.name: 0 for n in nodes}
        self.exited: set[str] = set()  # nodes neither required nor respawned that have exited (said once)
        self.stopping = threading.Event()

    def start(self, node: NodeSpec) -> None:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        proc = subprocess.Popen(node_command(node, write_params(node, self.folder)), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1, env=node_environment(node, self.env))
        self.procs[node.name] = proc
        threading.Thread(target=self._pump, args=(node.name, proc), daemon=True).start()
        self.log(f"[launch] started {node.name} (pid {proc.pid})")

    def _pump(self, name: str, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.log(f"[{name}] {line.rstrip()}")

    def run(self) -> int:
        """Until a required node exits (its exit code is returned) or ``stop()``; then every
        node is stopped and the parameter files are removed (unless kept)."""
        try:
            for node in self.nodes:
                self.start(node)
            while not self.stopping.is_set():
                for node in self.nodes:
                    rc = self.procs[node.name].poll()
                    if rc is None:
                        continue
                    if node.required:
                        self.log(f"[launch] {node.name} exited ({rc}); stopping the stack")
                        return rc
                    if node.respawn and rc == USER_ERROR_EXIT:
                        self.log(f"[launch] {node.name} exited with a configuration error ({rc}); restarting it "
                                 "would not help: stopping the stack")
                        return rc
                    if node.respawn:
                        self.restarts[node.name] += 1
                        self.log(f"[launch] {node.name} died ({rc}); restarting (restart {self.restarts[node.name]})")
                        time.sleep(1.0)
                        self.start(node)
                    elif node.name not in self.exited:
                        self.exited.add(node.name)
                        if rc != 0:
                            self.log(f"[launch] {node.name} exited ({rc})")
                time.sleep(0.2)
        finally:
            try:
                self.stop()
            finally:  # a second Ctrl-C during stop() too
                self.remove_files()
        return 0  # stopped (stop(), SIGTERM) with every required node still running

    def stop(self) -> None:
        self.stopping.set()
        live = [p for p in self.procs.values() if p.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in live:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def remove_files(self) -> None:
        """Remove the parameter files' folder, unless they are to be kept."""
        if self.folder is not None and not self.keep_files:
            shutil.rmtree(self.folder, ignore_errors=True)


def launch(stack: str, overrides: list[str], log=print, env: dict | None = None) -> int:
    """Run a stack until its required node exits; ``env``: the nodes' environment (default: ours)."""
    nodes = resolve(stack, parse_overrides(overrides))
    supervisor = Supervisor(nodes, log=log, env=env)
    # Ctrl-C (SIGINT), SIGTERM (a service manager, `kill`) and SIGHUP (the terminal closed) stop
    # the stack: its nodes stopped, its files removed. SIGINT gets a handler of ours rather than
    # Python's KeyboardInterrupt, which a launcher started in the background (`&` in a script,
    # a CI job) never sees: such a shell starts it with SIGINT ignored. SIGKILL cannot be caught.
    received: list[int] = []

    def on_signal(signum, _frame):
        received.append(signum)
        supervisor.stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        rc = supervisor.run()
        return INTERRUPTED_EXIT if signal.SIGINT in received else rc
    except KeyboardInterrupt:  # only where the handler could not be ours yet
        return INTERRUPTED_EXIT
    finally:
        try:
            supervisor.stop()
        finally:
            supervisor.remove_files()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
