#!/usr/bin/env bash
# The main job on the sim twin: record 10 scripted demonstrations into a Zarr episode store,
# train PickCube from it (state observations, SAC/RLPD with the learner in its own process),
# then evaluate the final checkpoint over 50 episodes.
# STEPS (default 20000) sets the env-step budget; extra arguments go to `robot-rl train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
RUN="runs/main-pickcube-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
# seed 10000 and noise 0.1 are the takes `--demos 10` would collect in memory (same expert, same seeds)
.venv/bin/robot-rl record --task PickCube --episodes 10 --noise 0.1 --seed 10000 --successful-only --out "$RUN/demos.zarr"
.venv/bin/robot-rl data info "$RUN/demos.zarr"
.venv/bin/robot-rl train --task PickCube --obs state --demos "$RUN/demos.zarr" --steps "${STEPS:-20000}" --run-dir "$RUN" "$@"
.venv/bin/robot-rl eval --checkpoint "$RUN" --episodes 50
echo "run folder: $RUN (demos.zarr, config.json, summary.json, learning_curve.png, tensorboard/, checkpoints/)"
