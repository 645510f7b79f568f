#!/usr/bin/env bash
# Creates the environment if needed, then runs the whole test suite (arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
ROBOT_RL_BROWSER=1 bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
