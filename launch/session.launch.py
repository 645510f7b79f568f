"""`ros2 launch robot_rl session.launch.py [arg:=value ...]`: the session stack of stacks.yaml
(`robot-rl session` / `robot-rl launch session` start the same nodes without the ros2 CLI)."""

from robot_rl.drivers.launch_description import generate


def generate_launch_description():
    return generate("session")
