"""ament_python entry point for `colcon build`; pip uses pyproject.toml (the metadata lives there).
The data files put the launch files, the stack description, package.xml and the ament index
marker where ROS 2 tools find them."""

from glob import glob

from setuptools import setup

setup(
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/robot_rl"]),
        ("share/robot_rl", ["package.xml"]),
        ("share/robot_rl/launch", sorted(glob("launch/*.launch.py")) + ["launch/stacks.yaml"]),
    ],
)
