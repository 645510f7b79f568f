"""``robot-rl session``: the session stack on the twin with the simulated human as the operator."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def test_session_with_a_simulated_human_records_its_interventions(tmp_path):
    """The policy holds still (policy teleop); the simulated human (eagerness 1) steps in after
    6 steps without progress. The session stack records everything: the human's steps are
    flagged in the store, and the console served the whole time."""
    pytest.importorskip("rclpy")
    from robot_rl.data.store import EpisodeStore
    from tests.helpers.ros import free_domain_id, ros_environment

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    cmd = [str(Path(sys.executable).with_name("robot-rl")), "session", "--task", "PickCube", "--policy", "teleop",
           "--simulated-human", "1.0", "--devices", "--steps", "80", "--console-port", str(port), "--run-dir", str(run)]
    result = subprocess.run(cmd, env=ros_environment(free_domain_id()), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"console on http://127.0.0.1:{port}/" in result.stdout
    store = EpisodeStore.open(run / "session.zarr")
    assert len(store) >= 1
    episodes = [store.get_episode(i, ["is_intervention", "success", "has_action"]) for i in range(len(store))]
    first = episodes[0]["is_intervention"][episodes[0]["has_action"]]
    assert first.any() and not first[:6].any()  # patient for 6 steps, then the human drives
    assert episodes[0]["success"][-1]  # a policy that holds still, and the human got the cube up
    summary = json.loads((run / "actor_summary.json").read_text())
    flagged = sum(int(e["is_intervention"][e["has_action"]].sum()) for e in episodes)
    assert summary["policy"] == "teleop" and summary["intervention_steps"] == flagged
    assert summary["interventions"] >= 1


def test_session_refuses_a_bad_eagerness():
    from robot_rl.cli import main

    assert main(["session", "--simulated-human", "3"]) == 2
