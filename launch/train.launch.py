"""`ros2 launch robot_rl train.launch.py [arg:=value ...]`: the train stack of stacks.yaml
(`robot-rl launch train` starts the same nodes without the ros2 CLI)."""

from robot_rl.drivers.launch_description import generate


def generate_launch_description():
    return generate("train")
