#!/usr/bin/env bash
# Creates the environment if needed, then runs the whole test suite (arguments go to pytest).
# --fast (first argument): the unit layer alone, the tests without the layer marks of
# pyproject.toml (ROS stacks, the browser, fault loops, learning runs, other end-to-end runs):
# a few minutes on 2 cores, for a developer's edit-test loop. CI runs the whole suite.
# Progress: the stages announce themselves, set-up prints a line at least every 20 s, and the
# test run a line every 20 s (tests done, failures, the test running and for how long) besides
# pytest's own; the 15 slowest tests are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
FAST_LAYER='not (ros or browser or faults or learning or integration)'
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
STAGES=2
stage "set-up: .venv/ with robot_rl, its dependencies and the browser test's chromium" \
    "about 2 min the first time, seconds after"
ROBOT_RL_BROWSER=1 quiet_guard bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
if [ "$fast" = 1 ]; then
  stage "the unit layer (pytest -m '$FAST_LAYER')" "about 2 min on 2 CPU cores"
  exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 -m "$FAST_LAYER" "$@"
fi
stage "the test suite (pytest)" "about 25 min on 2 CPU cores, a minute or two with -k or a single file"
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
