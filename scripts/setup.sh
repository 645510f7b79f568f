#!/usr/bin/env bash
# Creates .venv/ in the repository root and installs robot_rl into it (editable), with the
# Debian libraries it needs. Idempotent: a second run with nothing changed takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh

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
    STAGE_NAME="apt-get install$missing"
    quiet_guard $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive quiet_guard $SUDO apt-get install -y -qq $missing
  fi
fi

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "robot_rl needs Python >= 3.10")'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# ROS 2 (Kilted wheels from PyPI), pyrealsense2, OpenCV (headless), franky-control, Feetech's SDK, the teleop devices' libraries
# and MkDocs (the tests build docs/ with --strict) come along (ROBOT_RL_EXTRAS chooses others).
# With a system ROS 2 sourced (its rclpy on PYTHONPATH), set ROBOT_RL_SYSTEM_ROS=1 to leave the
# ROS wheels out.
extras="${ROBOT_RL_EXTRAS:-dev,docs,realsense,webcam,teleop,franka,so101,ros}"
[ "${ROBOT_RL_SYSTEM_ROS:-0}" = 1 ] && extras="$(echo ",$extras," | sed 's/,ros,/,/; s/^,//; s/,$//')"
stamp=".venv/.robot_rl-installed"
want="$( (cat pyproject.toml; echo "$extras") | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: installing robot_rl[$extras] into .venv/ (the first time: about 2 minutes, 2.7 GB with every extra)"
PIP=(.venv/bin/python -m pip install --progress-bar off --disable-pip-version-check)
STAGE_NAME="pip install"
quiet_guard "${PIP[@]}" --upgrade pip
# Torch first, pinned: an unpinned torch requirement would pull a multi-GB CUDA build.
# Users with a GPU install their own build beforehand; any torch >= 2.2 is kept.
.venv/bin/python -c "import torch" >/dev/null 2>&1 || quiet_guard "${PIP[@]}" "torch==2.13.0"
quiet_guard "${PIP[@]}" -e ".[$extras]"
echo "$want" > "$stamp"
echo "setup: .venv ready ($(.venv/bin/python --version))"
