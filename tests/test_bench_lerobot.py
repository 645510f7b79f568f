"""``bench learner``'s comparison with LeRobot's SAC update (robot_rl/bench/lerobot_sac_worker.py,
run by the Python of a LeRobot venv, ``ROBOT_RL_LEROBOT_PYTHON``): the figures parsed and the
ratios computed from what the worker prints, and the unset, missing and unusable cases as one line
in ``lerobot_notes`` with the figures null. The real worker only where that venv is named."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap

import pytest
import torch

from robot_rl.bench import learner as learner_bench

TINY = {"budget_s": 0.01, "warmup": 1, "min_calls": 1}
OURS = {"updates_per_s_state_e2": 120.0, "updates_per_s_pixels_e2": 6.0, "parameters_state_e2": 306449,
        "parameters_pixels_e2": 530513}
THEIRS = {"torch": "2.11.0", "lerobot": "0.6.1", "python": "3.12.1", "torch_threads": 1, "device": "cpu",
          "updates_per_s_state_e2": 40.0, "updates_per_s_pixels_e2": 0.5, "prepare_share_state_e2": 0.05,
          "prepare_share_pixels_e2": 0.2, "parameters_state_e2": 546321, "parameters_pixels_e2": 1251569,
          "image_encoder_parameters_pixels_e2": 48864, "encoder_out_dim_pixels_e2": 768}


def _figures(device: str = "cpu") -> dict:
    return learner_bench.lerobot_figures(OURS, TINY, device, log=lambda msg: None)


def _not_measured(figures: dict, *said: str) -> None:
    for key in learner_bench.LEROBOT_KEYS:
        assert figures[key] is None, key
    note = figures["lerobot_notes"]
    assert note.startswith("LeRobot's SAC not measured") and "\n" not in note, note
    for text in said:
        assert text in note, (text, note)


def _fake_worker(tmp_path, monkeypatch, body: str) -> None:
    """A stand-in for the worker script, run by this interpreter as the LeRobot Python."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    monkeypatch.setattr(learner_bench, "LEROBOT_WORKER", script)
    monkeypatch.setenv(learner_bench.LEROBOT_PYTHON_ENV, sys.executable)


def test_unset_gives_null_figures_and_says_how_to_set_it(monkeypatch):
    monkeypatch.delenv(learner_bench.LEROBOT_PYTHON_ENV, raising=False)
    _not_measured(_figures(), "ROBOT_RL_LEROBOT_PYTHON is unset", "lerobot[dataset]==0.6.1")


def test_a_path_that_is_no_file_is_one_line(monkeypatch, tmp_path):
    missing = tmp_path / "no-venv" / "bin" / "python"
    monkeypatch.setenv(learner_bench.LEROBOT_PYTHON_ENV, str(missing))
    _not_measured(_figures(), f"ROBOT_RL_LEROBOT_PYTHON={missing} is not an executable file")


def test_a_python_without_lerobot_is_one_line(monkeypatch):
    """This environment's own Python runs the real worker, which stops at ``import lerobot``."""
    if importlib.util.find_spec("lerobot") is not None:
        pytest.skip("lerobot is importable here (it never should be: LeRobot lives in its own venv)")
    monkeypatch.setenv(learner_bench.LEROBOT_PYTHON_ENV, sys.executable)
    _not_measured(_figures(), f"{sys.executable} cannot import LeRobot", "ModuleNotFoundError")


def test_a_device_other_than_cpu_or_cuda_is_skipped_with_a_note(monkeypatch):
    monkeypatch.setenv(learner_bench.LEROBOT_PYTHON_ENV, sys.executable)
    _not_measured(_figures("mps"), "device mps")


def test_the_workers_figures_are_read_and_our_rates_divided_by_its(monkeypatch, tmp_path):
    _fake_worker(tmp_path, monkeypatch, f"""
        import json
        print("a line of logging first")
        print(json.dumps({THEIRS!r}))
    """)
    figures = _figures()
    assert figures["lerobot_updates_per_s_state_e2"] == 40.0 and figures["lerobot_updates_per_s_pixels_e2"] == 0.5
    assert figures["over_lerobot_state_e2"] == pytest.approx(120.0 / 40.0)
    assert figures["over_lerobot_pixels_e2"] == pytest.approx(6.0 / 0.5)
    note = figures["lerobot_notes"]
    assert "LeRobot 0.6.1" in note and "\n" not in note
    for count in ("306k", "546k", "531k", "1252k"):  # both sides' parameters, state and pixels
        assert count in note, (count, note)


def test_the_worker_gets_our_budget_device_and_threads(monkeypatch, tmp_path):
    record = tmp_path / "seen.json"
    _fake_worker(tmp_path, monkeypatch, f"""
        import json, os, sys
        open({str(record)!r}, "w").write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}))
        print(json.dumps({THEIRS!r}))
    """)
    _figures()
    seen = json.loads(record.read_text())
    args = dict(zip(seen["argv"][::2], seen["argv"][1::2]))
    threads = str(torch.get_num_threads())
    assert args == {"--budget": "0.01", "--warmup": "1", "--min-calls": "1", "--threads": threads, "--device": "cpu"}
    assert seen["env"]["OMP_NUM_THREADS"] == threads and seen["env"]["HF_HUB_OFFLINE"] == "1"


def test_a_worker_that_fails_is_one_line_with_its_last_words(monkeypatch, tmp_path):
    _fake_worker(tmp_path, monkeypatch, """
        import sys
        print("Traceback (most recent call last):\\n  ...\\nRuntimeError: out of memory", file=sys.stderr)
        sys.exit(1)
    """)
    _not_measured(_figures(), "exited 1 without figures: RuntimeError: out of memory")


def test_a_worker_that_says_why_it_cannot_measure_is_that_line(monkeypatch, tmp_path):
    _fake_worker(tmp_path, monkeypatch, """
        import json, sys
        print(json.dumps({"error": "device cuda: LeRobot's torch has no CUDA here"}))
        sys.exit(3)
    """)
    _not_measured(_figures("cuda"), "device cuda: LeRobot's torch has no CUDA here")


def test_a_worker_past_its_time_is_one_line(monkeypatch, tmp_path):
    _fake_worker(tmp_path, monkeypatch, "import time\ntime.sleep(30)\n")
    monkeypatch.setattr(learner_bench, "lerobot_timeout_s", lambda s: 0.5)
    _not_measured(_figures(), "ran past 0.5 s")


LEROBOT = os.environ.get("ROBOT_RL_LEROBOT_PYTHON")
needs_lerobot = pytest.mark.skipif(not LEROBOT, reason="needs LeRobot's own venv (ROBOT_RL_LEROBOT_PYTHON=/path/"
                                   "to/its/python; scripts/make_lerobot_fixture.py says how to make one)")


@pytest.mark.integration
@needs_lerobot
def test_lerobots_own_update_measured_on_our_shapes():
    """The real worker in LeRobot's venv, a tiny budget: both rates, the ratios from them, and the
    networks it built have the sizes the notes compare (LeRobot's defaults on our shapes)."""
    figures = _figures()
    for kind in ("state_e2", "pixels_e2"):
        theirs = figures[f"lerobot_updates_per_s_{kind}"]
        assert theirs > 0, figures["lerobot_notes"]
        assert figures[f"over_lerobot_{kind}"] == pytest.approx(OURS[f"updates_per_s_{kind}"] / theirs, rel=1e-2)
    assert "LeRobot 0.6.1" in figures["lerobot_notes"]


@pytest.mark.integration
@needs_lerobot
def test_the_real_worker_prints_one_json_line_of_figures(tmp_path):
    import subprocess

    done = subprocess.run([LEROBOT, str(learner_bench.LEROBOT_WORKER), "--budget", "0", "--warmup", "1",
                           "--min-calls", "1", "--configs", "state_e2"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["lerobot"] == "0.6.1" and figures["torch_threads"] == 1 and figures["batch_size"] == 256
    assert figures["updates_per_s_state_e2"] > 0 and figures["updates_state_e2"] >= 1
    assert 0 <= figures["prepare_share_state_e2"] < 1
    # 2 critics and a discrete gripper critic, (256, 256) each, over its state encoder (30 -> 256)
    assert figures["encoder_out_dim_state_e2"] == 256 and figures["encoder_parameters_state_e2"] == 30 * 256 + 256 * 3
    assert figures["parameters_state_e2"] == figures["trainable_parameters_state_e2"] > 300_000
    probe = subprocess.run([LEROBOT, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True,
                           text=True, timeout=120)
    if probe.stdout.strip() == "False":  # LeRobot's torch without CUDA here: --device cuda is refused in one line
        refused = subprocess.run([LEROBOT, str(learner_bench.LEROBOT_WORKER), "--device", "cuda", "--configs",
                                  "state_e2"], capture_output=True, text=True, timeout=300)
        assert refused.returncode == 3 and "has no CUDA" in json.loads(refused.stdout.strip())["error"]
