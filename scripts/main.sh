#!/usr/bin/env bash
# The main job on the sim twin, the whole pipeline a lab runs on its robot, on what a real cell
# sees (front + wrist cameras + the arm's own state; the sim's object poses only grade it):
#   1. record 20 demonstrations with images, and the success classifier's data: 20 successful
#      takes, each then carrying the cube about and up through the workspace (half of them
#      letting go of it), and 20 failed takes, each then moving the arm about and up without it;
#      front, wrist and side cameras at 64x64 (the side camera looks level at the lift height);
#   2. train the success classifier, calibrated for 1% false positives on held-out episodes,
#      the reward firing on 2 positive frames in a row;
#   3. pretrain the frozen image encoder on the demonstrations: behaviour cloning, a spatial
#      autoencoder and the classifier's own trunks are measured by a held-out probe, the best kept;
#   4. train PickCube from pixels (SAC/RLPD, features of the frozen backbone cached in the replay,
#      learner in its own process) with the classifier's reward, never the sim's ground truth:
#      round 1 for 3/4 of the steps, then the classifier is measured on the policy's own rollouts
#      and, above its target false-positive rate, retrained with those hard negatives; round 2
#      goes on to the end with the classifier of that moment;
#   5. grade it by ground truth (50 episodes), measure the classifier on the final policy's
#      rollouts, and write <run>/report.md (curves, both rounds' classifier figures).
# STEPS (default 10000) sets the env-step budget, CLASSIFIER_STEPS (default 4000) the classifier's
# training steps, OBS=state trains the sim-only state policy (privileged object poses) instead;
# extra arguments go to `robot-rl train`. STACK=ros trains through the ROS 2 stack instead
# (`robot-rl launch sim_train`, one round; extra arguments go to it, e.g. learner.utd:=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MUJOCO_GL="${MUJOCO_GL:-egl}"
R=.venv/bin/robot-rl
RUN="runs/main-pickcube-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
STEPS="${STEPS:-10000}"
ROUND1=$(( STEPS * 3 / 4 ))
CAMS="--images --image-size 64 --cameras front wrist side"
# seed 10000 and noise 0.1 are the takes `--demos 20` would collect in memory (same expert, same seeds)
$R record --task PickCube --episodes 20 --noise 0.1 --seed 10000 --successful-only --images --image-size 64 \
    --cameras front wrist --out "$RUN/demos.zarr"
$R record --task PickCube --episodes 20 --noise 0.1 --seed 100 --successful-only $CAMS \
    --hold-after-success 30 --hold-motion 0.4 --hold-rise 0.3 --hold-release 0.5 --out "$RUN/classifier_successes.zarr"
$R record --task PickCube --episodes 20 --noise 0.5 --seed 200 --failed-only $CAMS \
    --hold-after-failure 20 --hold-motion 0.4 --hold-rise 0.3 --out "$RUN/classifier_failures.zarr"
$R classifier train --data "$RUN/classifier_successes.zarr" --data "$RUN/classifier_failures.zarr" \
    --steps "${CLASSIFIER_STEPS:-4000}" --consecutive 2 --out "$RUN/classifier"
if [ "${OBS:-pixels}" = state ]; then
  OBSERVATION=(--obs state)  # sim only: the policy reads the sim's object poses
else
  $R encoder pretrain --data "$RUN/demos.zarr" --classifier "$RUN/classifier" --steps "${ENCODER_STEPS:-1000}" --probe-steps 500 \
      --out "$RUN/encoder"
  OBSERVATION=(--obs pixels --frozen-encoder "$RUN/encoder")
fi
rollouts() {  # the policy's own rollouts, scored by a classifier: $1 = store, $2 = classifier, $3 = result file
  $R record --task PickCube --policy "$RUN" --episodes 20 --seed "$4" $CAMS --continue-after-success 100 --out "$1"
  $R classifier eval --classifier "$2" --data "$1" | tail -n 1 > "$3"
}
if [ "${STACK:-}" = ros ]; then
  # the same training through the ROS 2 stack: arm, cameras, actor, learner and recorder as
  # separate nodes over DDS (loopback), in real time at 10 Hz
  ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}" $R launch sim_train \
      demo_store:="$RUN/demos.zarr" reward_classifier:="$RUN/classifier" env_steps:="$STEPS" \
      run_dir:="$RUN" "$@"
else
  # round 1, then the classifier checked against the policy it pays
  $R train --task PickCube "${OBSERVATION[@]}" --demos "$RUN/demos.zarr" --reward-classifier "$RUN/classifier" \
      --steps "$ROUND1" --eval-episodes 20 --final-eval-episodes 20 --run-dir "$RUN" "$@"
  rollouts "$RUN/policy_rollouts_round1.zarr" "$RUN/classifier" "$RUN/classifier_round1_on_the_trained_policy.json" 300
  CLASSIFIER="$RUN/classifier"
  # the classifier was calibrated for 1% false positives (classifier train's --target-fpr default)
  if .venv/bin/python -c "import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))['fpr'] > 0.01 else 1)" \
      "$RUN/classifier_round1_on_the_trained_policy.json"; then
    echo "the classifier's false-positive rate on the policy's rollouts is above its target: retraining with them"
    $R classifier hard-negatives --classifier "$RUN/classifier" --rollouts "$RUN/policy_rollouts_round1.zarr" \
        --out "$RUN/hard_negatives.zarr" --retrain "$RUN/classifier_round2" | tail -n 1 > "$RUN/classifier_round2_validation.json"
    [ -f "$RUN/classifier_round2/classifier.safetensors" ] && CLASSIFIER="$RUN/classifier_round2"
  fi
  # round 2 to the end, with the classifier of that moment
  $R train --resume "$RUN" --steps "$STEPS" --reward-classifier "$CLASSIFIER"
fi
$R eval --checkpoint "$RUN" --episodes 50 | tee "$RUN/eval.json"
rollouts "$RUN/policy_rollouts.zarr" "${CLASSIFIER:-$RUN/classifier}" "$RUN/classifier_on_the_trained_policy.json" 400
$R report "$RUN"
echo "run folder: $RUN (report.md, classifier/, encoder/, demos.zarr, checkpoints/, and summary.json + learning_curve.png + tensorboard/ or, with STACK=ros, actor_summary.json + online.zarr)"
