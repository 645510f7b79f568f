"""What every robot_rl node shares: parameters declared from a config dataclass, and a main
that spins until Ctrl-C / SIGTERM and shuts down cleanly."""

from __future__ import annotations

import dataclasses
import json
import sys


def declare_config(node, config_cls):
    """Declare one ROS parameter per dataclass field (tuples as lists) and build the config
    from their values: the node takes the same config as the Python API."""
    values = {}
    for f in dataclasses.fields(config_cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, tuple):
            default = list(default)
        if default is None:
            default = ""
        value = node.declare_parameter(f.name, default).value
        if isinstance(f.default, tuple):
            value = tuple(value)
        if f.default is None and value == "":
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
