#!/usr/bin/env bash
# The main job on the sim twin: set up .venv/, then `robot-rl main`, every stage of a lab's pipeline
# (robot_rl/commands/main_job.py, read top to bottom as the stage table; docs/training.md).
# Environment variables choose its options: TASK (--task, default PegInsertHard), STEPS (--steps,
# default the task's), OBS (--obs pixels|state), HUMAN (--human, the simulated human's eagerness
# in [0, 1]; 0: none), STACK=ros (--stack ros: through the ROS 2 stack; a simulated human there
# only for an SO-101 task, whose stack is so101_sim),
# CLASSIFIER_STEPS, ENCODER_STEPS and DEMO_LAYOUTS (seeds|spread); extra arguments go to robot-rl train (with STACK=ros, stack
# arguments NAME:=VALUE). A bad value is one line on stderr and exit status 2, before any stage.
# A job cut off goes on with `.venv/bin/robot-rl main --resume RUN`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
STAGE_NAME="set-up"
echo "== set-up: .venv/ with robot_rl and its dependencies (expected about 2 min the first time, seconds after) =="
quiet_guard bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
options=()
for pair in TASK:--task STEPS:--steps OBS:--obs HUMAN:--human STACK:--stack CLASSIFIER_STEPS:--classifier-steps \
    ENCODER_STEPS:--encoder-steps DEMO_LAYOUTS:--demo-layouts; do
  variable=${pair%%:*}
  if [ -n "${!variable:-}" ]; then options+=("${pair#*:}" "${!variable}"); fi
done
if [ "${1:-}" = "--" ]; then shift; fi  # `main.sh -- ARGS` as well as `main.sh ARGS`
exec .venv/bin/robot-rl main ${options[@]+"${options[@]}"} -- "$@"
