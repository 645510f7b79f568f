#!/usr/bin/env bash
# The main job on the sim twin: the scripted expert solves PickCube and PegInsert on MuJoCo and
# PyBullet; a run folder under runs/ gets GIFs (front | wrist camera) and a success table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
exec .venv/bin/robot-rl sim run --task PickCube PegInsert --backend mujoco pybullet --episodes "${EPISODES:-20}" "$@"
