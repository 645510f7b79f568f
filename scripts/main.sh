#!/usr/bin/env bash
# The main job on the sim twin: train PickCube (state observations, 10 scripted demos, SAC/RLPD
# with the learner in its own process), then evaluate the final checkpoint over 50 episodes.
# STEPS (default 20000) sets the env-step budget; extra arguments go to `robot-rl train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
RUN="runs/main-pickcube-$(date +%Y%m%d-%H%M%S)"
.venv/bin/robot-rl train --task PickCube --obs state --demos 10 --steps "${STEPS:-20000}" --run-dir "$RUN" "$@"
.venv/bin/robot-rl eval --checkpoint "$RUN" --episodes 50
echo "run folder: $RUN (config.json, summary.json, learning_curve.png, tensorboard/, checkpoints/)"
