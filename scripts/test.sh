#!/usr/bin/env bash
# Creates the environment if needed, then runs the whole test suite (arguments go to pytest).
# --fast (first argument): the unit layer alone, the tests without the layer marks of
# pyproject.toml (ROS stacks, the browser, fault loops, learning runs, other end-to-end runs):
# a few minutes on 2 cores, for a developer's edit-test loop. CI runs the whole suite.
# Both run on ROBOT_RL_TEST_WORKERS pytest-xdist worker processes (default 2, for CI's 2 cores:
# many tests wait on real-time ROS 2 stacks, subprocesses and sockets, so two workers keep both
# cores busy; 0: one process, serially), one test at a time to whichever worker is free, the
# longest first (LONGEST_FIRST in tests/conftest.py); each worker has its own temporary folder,
# ROS 2 domain and, with two or more, one OpenMP thread (tests/conftest.py).
# Progress: the stages announce themselves, set-up prints a line at least every 20 s, and the
# test run a line every 20 s (tests done, failures, the tests running and for how long) besides
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
WORKERS="${ROBOT_RL_TEST_WORKERS:-2}"
case "$WORKERS" in
  ''|*[!0-9]*) echo "test.sh: ROBOT_RL_TEST_WORKERS is a number of workers (0: serially), got '$WORKERS'" >&2
               exit 2 ;;
esac
STAGES=2
stage "set-up: .venv/ with robot_rl, its dependencies and the browser test's chromium" \
    "about 2 min the first time, seconds after"
ROBOT_RL_BROWSER=1 quiet_guard bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 -n "$WORKERS" --dist load --maxschedchunk 1)
if [ "$fast" = 1 ]; then
  stage "the unit layer (pytest -m '$FAST_LAYER', $WORKERS workers)" "about 3 min on 2 CPU cores"
  exec "${PYTEST[@]}" -m "$FAST_LAYER" "$@"
fi
stage "the test suite (pytest, $WORKERS workers)" "about 20 min on 2 Xeon cores, 32 on 2 AMD EPYC cores, a minute or two with -k or one file"
exec "${PYTEST[@]}" "$@"
