#!/usr/bin/env bash
# The main job on the sim twin, the whole pipeline a lab runs on its robot:
#   1. record 10 demonstrations (state) and the success classifier's data (cameras): 20
#      successful takes, each then carrying the cube about and up through the workspace (half
#      of them letting go of it), and 20 failed takes, each then moving the arm about and up
#      without it; front, wrist and side cameras (the side camera looks level at the lift height);
#   2. train the success classifier, calibrated for 1% false positives on held-out episodes,
#      the reward firing on 2 positive frames in a row;
#   3. train PickCube (state policy, SAC/RLPD, learner in its own process) with the
#      classifier's reward, never the sim's ground truth;
#   4. grade it by ground truth (50 episodes), record the trained policy's rollouts and measure
#      the classifier on them, and write <run>/report.md (curves, classifier metrics).
# STEPS (default 20000) sets the env-step budget, CLASSIFIER_STEPS (default 4000) the classifier's
# training steps; extra arguments go to `robot-rl train`. STACK=ros trains through the ROS 2
# stack instead (`robot-rl launch sim_train`; extra arguments go to it, e.g. learner.utd:=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
R=.venv/bin/robot-rl
RUN="runs/main-pickcube-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
# seed 10000 and noise 0.1 are the takes `--demos 10` would collect in memory (same expert, same seeds)
$R record --task PickCube --episodes 10 --noise 0.1 --seed 10000 --successful-only --out "$RUN/demos.zarr"
$R record --task PickCube --episodes 20 --noise 0.1 --seed 100 --successful-only --images --image-size 64 \
    --cameras front wrist side --hold-after-success 30 --hold-motion 0.4 --hold-rise 0.3 --hold-release 0.5 \
    --out "$RUN/classifier_successes.zarr"
$R record --task PickCube --episodes 20 --noise 0.5 --seed 200 --failed-only --images --image-size 64 \
    --cameras front wrist side --hold-after-failure 20 --hold-motion 0.4 --hold-rise 0.3 --out "$RUN/classifier_failures.zarr"
$R classifier train --data "$RUN/classifier_successes.zarr" --data "$RUN/classifier_failures.zarr" \
    --steps "${CLASSIFIER_STEPS:-4000}" --consecutive 2 --out "$RUN/classifier"
if [ "${STACK:-}" = ros ]; then
  # the same training through the ROS 2 stack: arm, cameras, actor, learner and recorder as
  # separate nodes over DDS (loopback), in real time at 10 Hz
  ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}" $R launch sim_train \
      demo_store:="$RUN/demos.zarr" reward_classifier:="$RUN/classifier" env_steps:="${STEPS:-20000}" \
      run_dir:="$RUN" "$@"
else
  $R train --task PickCube --obs state --demos "$RUN/demos.zarr" --reward-classifier "$RUN/classifier" \
      --steps "${STEPS:-20000}" --run-dir "$RUN" "$@"
fi
$R eval --checkpoint "$RUN" --episodes 50 | tee "$RUN/eval.json"
$R record --task PickCube --policy "$RUN" --episodes 20 --seed 400 --images --image-size 64 \
    --cameras front wrist side --continue-after-success 100 --out "$RUN/policy_rollouts.zarr"
$R classifier eval --classifier "$RUN/classifier" --data "$RUN/policy_rollouts.zarr" \
    | tail -n 1 > "$RUN/classifier_on_the_trained_policy.json"
$R report "$RUN"
echo "run folder: $RUN (report.md, classifier/, demos.zarr, checkpoints/, and summary.json + learning_curve.png + tensorboard/ or, with STACK=ros, actor_summary.json + online.zarr)"
