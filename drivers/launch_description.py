"""ROS 2 launch descriptions built from ``launch/stacks.yaml``: the launch files are one line
each, and the nodes, parameters and remappings are exactly those ``robot-rl launch`` starts
(both go through ``robot_rl.runtime.launcher.resolve``).

Stack arguments become launch arguments (``ros2 launch robot_rl sim_train.launch.py
run_dir:=runs/x``); their values are substituted when the launch runs (an ``OpaqueFunction``).
A ``required`` node's exit shuts the launch down; ``respawn`` nodes are restarted.
"""

from __future__ import annotations

from robot_rl.runtime.launcher import load_stacks, resolve


def generate(stack_name: str):
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction, Shutdown
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    stack = load_stacks()[stack_name]
    args = {k: "" if v is None else str(v) for k, v in (stack.get("args") or {}).items()}

    def nodes(context):
        values = {k: LaunchConfiguration(k).perform(context) for k in args}
        return [Node(package="robot_rl", executable=node.executable, name=node.name, parameters=[node.parameters],
                     remappings=node.remappings, respawn=node.respawn, output="screen",
                     on_exit=Shutdown(reason=f"{node.name} exited") if node.required else None)
                for node in resolve(stack_name, values)]

    declared = [DeclareLaunchArgument(k, default_value=v) for k, v in args.items()]
    return LaunchDescription([*declared, OpaqueFunction(function=nodes)])
