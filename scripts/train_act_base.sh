#!/usr/bin/env bash
# Train a LeRobot ACT policy on the twin's demonstrations, as a base policy for
# `robot-rl train --base-policy` (issue 46): record a deliberately small demo set, export it with
# `robot-rl data export --format lerobot`, train ACT with LeRobot's own training script on the
# CPU, and print the folder to give --base-policy (with --base-python "$LEROBOT_PYTHON").
#
#   bash scripts/train_act_base.sh LEROBOT_PYTHON OUT [DEMOS] [STEPS] [TASK]
#
# LEROBOT_PYTHON: the Python of a LeRobot venv (e.g. .venv-lerobot/bin/python); DEMOS: successful
# scripted demonstrations (default 10); STEPS: LeRobot training steps (default 1000); TASK:
# the twin's task (default PickCube).
#
# LeRobot lives in a venv of its own (Python >= 3.12, torch < 2.12; docs/setup.md says how to
# make one; its training extra: pip install "lerobot[training]==0.6.1"). Nothing is downloaded:
# the ResNet-18 backbone starts from random weights (--policy.pretrained_backbone_weights=null).
# The ACT is small for a CPU (dim 256, 2 encoder layers, 1 decoder layer) and predicts chunks of
# 10 actions (1 s at the twin's 10 Hz); 1,000 steps of batch 8 take about 15 minutes on 2 cores.
set -euo pipefail
USAGE="usage: scripts/train_act_base.sh LEROBOT_PYTHON OUT [DEMOS] [STEPS] [TASK]"
LEROBOT_PYTHON=${1:?$USAGE}
OUT=${2:?$USAGE}
DEMOS=${3:-10}
STEPS=${4:-1000}
TASK=${5:-PickCube}
R=.venv/bin/robot-rl
LEROBOT_TRAIN="$(dirname "$LEROBOT_PYTHON")/lerobot-train"

mkdir -p "$OUT"
"$R" record --task "$TASK" --episodes "$DEMOS" --keep successes --images --image-size 64 --cameras front wrist \
    --out "$OUT/demos.zarr"
"$R" data export --format lerobot --out "$OUT/lerobot" "$OUT/demos.zarr"
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$LEROBOT_TRAIN" --dataset.repo_id="local/$TASK" \
    --dataset.root="$OUT/lerobot" --policy.type=act --policy.device=cpu --policy.push_to_hub=false \
    --policy.pretrained_backbone_weights=null --policy.chunk_size=10 --policy.n_action_steps=10 \
    --policy.dim_model=256 --policy.dim_feedforward=1024 --policy.n_encoder_layers=2 --policy.n_decoder_layers=1 \
    --batch_size=8 --steps="$STEPS" --save_freq="$STEPS" --log_freq=100 --num_workers=0 --wandb.enable=false \
    --env_eval_freq=0 --seed=0 --output_dir="$OUT/train"
POLICY="$OUT/train/checkpoints/last/pretrained_model"
echo "the ACT base: $POLICY"
echo "  $R train --task $TASK --obs pixels --cameras front wrist --base-policy $POLICY --base-python $LEROBOT_PYTHON"
