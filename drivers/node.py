"""What every robot_rl node shares: parameters declared from a config dataclass, and a main
that spins until Ctrl-C / SIGTERM and shuts down cleanly."""

from __future__ import annotations

import dataclasses
import json
import sys


def declare_config(node, config_cls):
    """Declare one ROS parameter per dataclass field and build the config from their values:
    the node takes the same config as the Python API. Tuples are typed arrays (``-p
    cameras:=[front,wrist]``; ``[]`` is the empty tuple); ``None`` defaults are ``""``."""
    from rcl_interfaces.msg import ParameterDescriptor, ParameterType

    values = {}
    for f in dataclasses.fields(config_cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        descriptor = ParameterDescriptor()
        if isinstance(default, tuple):
            kind = type(default[0]) if default else str
            descriptor.type = {str: ParameterType.PARAMETER_STRING_ARRAY, int: ParameterType.PARAMETER_INTEGER_ARRAY,
                               float: ParameterType.PARAMETER_DOUBLE_ARRAY}[kind]
            value = node.declare_parameter(f.name, list(default), descriptor).value
            value = tuple(value) if value is not None else ()
        elif isinstance(default, float):  # a launch file's "0" arrives as an integer: take it as 0.0
            value = node.declare_parameter(f.name, default, ParameterDescriptor(dynamic_typing=True)).value
            if isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            elif not isinstance(value, float):
                raise ValueError(f"parameter {f.name} is a number, got {value!r}")
        else:
            value = node.declare_parameter(f.name, "" if default is None else default).value
            if default is None and value == "":
                value = None
        values[f.name] = value
    return config_cls(**values)


def status_json(**fields) -> str:
    return json.dumps(fields, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))


def run(node_factory, args=None) -> None:
    """rclpy.init, build the node, spin; SIGTERM and Ctrl-C end it cleanly (``close()`` if any)."""
    import rclpy
    from rclpy.executors import ExternalShutdownException

    rclpy.init(args=args if args is not None else sys.argv)  # installs SIGINT and SIGTERM handlers
    node = None
    try:
        node = node_factory()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():  # a callback cut off by the shutdown is not an error
            raise
    finally:
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
    spin in the background; SIGTERM / Ctrl-C end the loop; ``node.close()`` runs at the end."""
    import threading

    import rclpy

    rclpy.init(args=args if args is not None else sys.argv)
    node = node_factory()
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
