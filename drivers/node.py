"""What every robot_rl node shares: parameters declared from a config dataclass, and a main
that spins until Ctrl-C / SIGTERM and shuts down cleanly."""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from pathlib import Path

from robot_rl.errors import InputError


def declare_config(node, config_cls):
    """Declare one ROS parameter per dataclass field, with the field's help as its description,
    and build the config from their values: the node takes the same config as the Python API
    (``robot_rl.config``; names stay flat: ``task``, ``utd``, ...). Tuples are typed arrays
    (``-p cameras:=[front,wrist]``; ``[]`` is the empty tuple); ``None`` defaults are ``""``; a
    field of settings (``agent``) is a string array of KEY=VALUE, as the CLI's ``--agent``
    (``-p agent:=[critic_actor_ratio=2]``; empty: the defaults). A value outside a field's
    ``choices`` is one line naming the parameter."""
    from rcl_interfaces.msg import ParameterDescriptor

    from robot_rl.config_values import check_values, field_default, parse_key_values

    hints = typing.get_type_hints(config_cls)
    values = {}
    for f in dataclasses.fields(config_cls):
        default = field_default(f)
        descriptor = ParameterDescriptor(description=f.metadata.get("help", ""))
        if dataclasses.is_dataclass(default):  # KEY=VALUE strings, as the CLI's --agent
            items = _declare_array(node, f.name, [], str, descriptor)
            value = check_values(type(default), parse_key_values(items, f"parameter {f.name}"), f"parameter {f.name}")
        elif isinstance(default, tuple):
            value = tuple(_declare_array(node, f.name, list(default), typing.get_args(hints[f.name])[0], descriptor))
        elif isinstance(default, float):  # a launch file's "0" arrives as an integer: take it as 0.0
            descriptor.dynamic_typing = True
            value = node.declare_parameter(f.name, default, descriptor).value
            if isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            elif not isinstance(value, float):
                raise InputError(f"parameter {f.name} is a number, got {value!r}")
        else:
            value = node.declare_parameter(f.name, "" if default is None else default, descriptor).value
            if default is None and value == "":
                value = None
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise InputError(f"parameter {f.name} must be one of {', '.join(map(str, choices))}; got {value!r}")
        values[f.name] = value
    return config_cls(**values)


def _declare_array(node, name: str, default: list, element: type, descriptor) -> list:
    """An array parameter of ``element``s. An empty default is declared by its type (from ``[]``
    rclpy would infer a byte array), then set to an empty array of that type unless given."""
    from rclpy.parameter import Parameter

    kind = {str: Parameter.Type.STRING_ARRAY, int: Parameter.Type.INTEGER_ARRAY,
            float: Parameter.Type.DOUBLE_ARRAY}[element]
    value = node.declare_parameter(name, default or kind, descriptor).value
    if value is None:
        node.set_parameters([Parameter(name, kind, [])])
        value = []
    return list(value)


def apply_task_file(cfg):
    """``(cfg, task)``: a node's task (``robot_rl.cell.resolve_task``: its ``task_file`` when one
    is given, else the sim task ``task`` names) and its config with what the task file sets, for
    the fields the config has: ``task`` (the file's name), ``control_hz``, ``image_size`` (what the
    file's cameras publish; every camera in ``cameras`` must be in the file) and
    ``reward_classifier`` (the file's classifier, when none is given). Without a task file the
    config is returned as it is."""
    from robot_rl.cell import TaskFileError, resolve_task

    task = resolve_task(cfg.task, cfg.task_file)
    if not cfg.task_file:
        return cfg, task
    fields = {f.name for f in dataclasses.fields(cfg)}
    changes = {"task": task.name}
    if "control_hz" in fields:
        changes["control_hz"] = task.control_hz
    if "cameras" in fields:
        for name in cfg.cameras:
            task.camera(name)
        changes["image_size"] = task.image_size
    if "reward_classifier" in fields and not cfg.reward_classifier and task.classifier:
        if not Path(task.classifier).exists():
            raise TaskFileError(f"{task.path}: classifier: no folder {task.classifier} (robot-rl classifier train "
                                "... --out DIR makes one)")
        changes["reward_classifier"] = task.classifier
    return dataclasses.replace(cfg, **changes), task


def status_json(**fields) -> str:
    return json.dumps(fields, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))


def refuse(err: Exception) -> None:
    """A configuration the node refuses (bad parameters, a bad task file): one line naming the
    program, and exit status 2 (a supervisor does not restart it: restarting would not fix it)."""
    import rclpy

    rclpy.try_shutdown()
    print(f"{Path(sys.argv[0]).stem}: error: {err}", file=sys.stderr, flush=True)
    sys.exit(2)


def take_control_priority(node) -> None:
    """A control-path node (``CONTROL_PATH``: the arm, a camera, the actor) run as its own process
    takes its ``priority`` parameter for every thread of the process (realtime: SCHED_FIFO where
    allowed, else one warning; robot_rl/runtime/priority.py). Only the entry points call this: a
    node built inside another program (a test, a bench) leaves that program's priority alone."""
    if getattr(node, "CONTROL_PATH", False):
        from robot_rl.runtime.priority import set_control_priority

        if set_control_priority(node.cfg.priority, warn=node.get_logger().warning):
            node.get_logger().info("priority realtime: SCHED_FIFO for every thread of this node's process")


def run(node_factory, args=None) -> None:
    """rclpy.init, build the node, spin; SIGTERM and Ctrl-C end it cleanly (``close()`` if any). A
    configuration the node refuses while it is built is one line and exit status 2 (``refuse``).
    The node's ``background_nodes`` (if any) are spun each by a thread of its own, so that their
    callbacks (the arm's e-stop) run while one of the node's own callbacks is still running."""
    import rclpy
    from rclpy.executors import ExternalShutdownException

    from robot_rl.errors import UserFacingError

    rclpy.init(args=args if args is not None else sys.argv)  # installs SIGINT and SIGTERM handlers
    node, spinners = None, []
    try:
        try:
            node = node_factory()
            take_control_priority(node)
        except (UserFacingError, ValueError) as err:  # a configuration it refuses: one line, exit status 2
            refuse(err)
        spinners = [spin_in_background(side) for side in getattr(node, "background_nodes", [])]
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():  # a callback cut off by the shutdown is not an error
            raise
    finally:
        for spinner in spinners:
            spinner.shutdown()
        if node is not None:
            close = getattr(node, "close", None)
            if close is not None:
                close()
            node.destroy_node()
        rclpy.try_shutdown()


class BackgroundSpinner:
    """A node's callbacks spinning on a thread; ``shutdown()`` stops the executor and joins the
    thread, so nothing of rclpy is torn down under a running spin (that aborts the process)."""

    def __init__(self, node):
        import threading

        from rclpy.executors import SingleThreadedExecutor

        self.executor = SingleThreadedExecutor(context=node.context)
        self.executor.add_node(node)
        self.thread = threading.Thread(target=self._spin, daemon=True, name=f"{node.get_name()}-executor")
        self.thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass

    def shutdown(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self.thread.join(5.0)


def spin_in_background(node) -> BackgroundSpinner:
    """Spin ``node`` on a daemon thread (the caller's thread runs a blocking loop: the actor's
    control loop, the learner's updates)."""
    return BackgroundSpinner(node)


def run_loop(node_factory, args=None) -> None:
    """For nodes whose work is a loop (``node.loop(stop)``) rather than callbacks: callbacks
    spin in the background; SIGTERM / Ctrl-C end the loop; ``node.close()`` runs at the end. A
    configuration the node refuses (bad parameters) is one line and exit status 2 (a supervisor
    does not restart it: restarting would not fix it)."""
    import threading

    import rclpy

    from robot_rl.errors import UserFacingError

    rclpy.init(args=args if args is not None else sys.argv)
    try:
        node = node_factory()
        take_control_priority(node)
    except (UserFacingError, ValueError) as err:
        refuse(err)
    if not rclpy.ok():  # stopped (SIGTERM, Ctrl-C) while it was being built: nothing to run
        close = getattr(node, "close", None)
        if close is not None:
            close()
        node.destroy_node()
        return
    executor = spin_in_background(node)
    stop = threading.Event()
    try:
        node.loop(stop)
    except KeyboardInterrupt:
        pass
    except Exception:
        if rclpy.ok():
            raise
    finally:
        stop.set()
        close = getattr(node, "close", None)
        if close is not None:
            close()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
