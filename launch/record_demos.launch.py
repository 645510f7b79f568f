"""`ros2 launch robot_rl record_demos.launch.py [arg:=value ...]`: the record_demos stack of stacks.yaml
(`robot-rl launch record_demos` starts the same nodes without the ros2 CLI)."""

from robot_rl.drivers.launch_description import generate


def generate_launch_description():
    return generate("record_demos")
