import os

os.environ.setdefault("MUJOCO_GL", "egl")

# a progress line every 20 s on the real standard output (--progress-every SECONDS; 0: never)
pytest_plugins = ["tests.helpers.progress"]
