"""`ros2 launch robot_rl franka_sim.launch.py [arg:=value ...]`: the franka_sim stack of stacks.yaml
(a Franka cell's processes against franky-sim's libfranka protocol server; `robot-rl launch
franka_sim` starts the same nodes without the ros2 CLI)."""

from robot_rl.drivers.launch_description import generate


def generate_launch_description():
    return generate("franka_sim")
