#!/usr/bin/env bash
# Creates the environment if needed, then runs the whole test suite (arguments go to pytest).
# Progress: the stages announce themselves, set-up prints a line at least every 20 s, and the
# test run a line every 20 s (tests done, failures, the test running and for how long) besides
# pytest's own; the 15 slowest tests are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
STAGES=2
stage "set-up: .venv/ with robot_rl, its dependencies and the browser test's chromium" \
    "about 2 min the first time, seconds after"
ROBOT_RL_BROWSER=1 quiet_guard bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
stage "the test suite (pytest)" "about 25 min on 2 CPU cores, a minute or two with -k or a single file"
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
