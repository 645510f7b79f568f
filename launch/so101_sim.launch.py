"""`ros2 launch robot_rl so101_sim.launch.py [arg:=value ...]`: the so101_sim stack of stacks.yaml
(an SO-101 cell's processes on its twin: a simulated SO-101 on a serial pty; `robot-rl launch
so101_sim` starts the same nodes without the ros2 CLI)."""

from robot_rl.drivers.launch_description import generate


def generate_launch_description():
    return generate("so101_sim")
