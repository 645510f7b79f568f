#!/usr/bin/env bash
# Optional: the peer twin gym_hil in its own venv (.venv-gym-hil), so `robot-rl bench sim`
# can measure it in the same run. It pins mujoco < 3.9, which cannot live beside our mujoco 4.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv-gym-hil/bin/python ] || "${PYTHON:-python3}" -m venv .venv-gym-hil
.venv-gym-hil/bin/python -m pip install -q "gym-hil==0.1.14"
echo "gym_hil ready in .venv-gym-hil"
