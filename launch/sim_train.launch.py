"""`ros2 launch robot_rl sim_train.launch.py [arg:=value ...]`: the sim_train stack of stacks.yaml
(`robot-rl launch sim_train` starts the same nodes without the ros2 CLI)."""

from robot_rl.drivers.launch_description import generate


def generate_launch_description():
    return generate("sim_train")
