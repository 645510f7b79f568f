"""examples/twin/lab_policy.py, the worked ``module:Class`` base of a lab's own learned policy
(docs/training.md, issue 46): trained by behaviour cloning on a demo store it fits the demonstrated
chunks, and a run takes it as ``--base-policy FILE:Class`` with its weights named by
``LAB_POLICY_WEIGHTS``, answering chunks of ``CHUNK`` actions; without the weights, one line."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from robot_rl.base_policy import make_base_env
from robot_rl.commands.cli import main
from robot_rl.envs import make_cell_env
from robot_rl.errors import InputError

SOURCE = "examples/twin/lab_policy.py:LabPolicy"
CAMERAS = ("front", "wrist")


@pytest.fixture(scope="module")
def lab_policy():
    spec = importlib.util.spec_from_file_location("lab_policy", "examples/twin/lab_policy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("lab_policy") / "demos.zarr"
    assert main(["record", "--task", "PickCube", "--episodes", "2", "--keep", "successes", "--images",
                 "--image-size", "64", "--cameras", *CAMERAS, "--out", str(out)]) == 0
    return out


def chunk_error(policy, images, states, targets) -> float:
    with torch.no_grad():
        predicted = policy.net(torch.from_numpy(images), torch.from_numpy(states)).numpy()
    return float(np.mean((predicted - targets) ** 2))


def test_behaviour_cloning_fits_the_demonstrated_chunks(lab_policy, demos, tmp_path):
    images, states, targets = lab_policy.load_demos(str(demos))
    assert images.shape[1:] == (6, 64, 64) and images.dtype == np.uint8
    assert targets.shape == (len(images), lab_policy.CHUNK, 7)
    # past an episode's end a chunk repeats its last action
    np.testing.assert_array_equal(lab_policy.chunk_targets(np.arange(3.0)[:, None], 3)[-1], [[2.0], [2.0], [2.0]])
    untrained, trained = tmp_path / "untrained.safetensors", tmp_path / "trained.safetensors"
    lab_policy.train(str(demos), str(untrained), steps=1)
    lab_policy.train(str(demos), str(trained), steps=300)
    before = chunk_error(lab_policy.LabPolicy(str(untrained)), images, states, targets)
    after = chunk_error(lab_policy.LabPolicy(str(trained)), images, states, targets)
    assert after < 0.3 * before, (before, after)


def test_a_run_takes_it_as_a_chunked_base_and_without_its_weights_refuses_in_one_line(
        lab_policy, demos, tmp_path, monkeypatch):
    weights = tmp_path / "weights.safetensors"
    lab_policy.train(str(demos), str(weights), steps=1)
    monkeypatch.delenv("LAB_POLICY_WEIGHTS", raising=False)
    with pytest.raises(InputError) as refused:
        make_base_env(make_cell_env("PickCube", obs="pixels", cameras=CAMERAS), "pixels", CAMERAS, SOURCE)
    assert "LAB_POLICY_WEIGHTS" in str(refused.value) and "\n" not in str(refused.value)

    monkeypatch.setenv("LAB_POLICY_WEIGHTS", str(weights))
    env = make_base_env(make_cell_env("PickCube", obs="pixels", cameras=CAMERAS), "pixels", CAMERAS, SOURCE)
    try:
        obs, _ = env.reset(seed=1)
        for _ in range(6):
            assert obs["base_action"].shape == (7,) and np.abs(obs["base_action"]).max() <= 1.0
            obs, *_ = env.step(np.zeros(7, np.float32))
        latency = env.latency()
        assert latency["base_horizon"] == lab_policy.CHUNK and latency["base_every"] == lab_policy.CHUNK
        # the check's reset before any work, then this episode: at its reset and 5 steps later
        assert latency["base_queries"] == 3 and latency["base_steps"] == 8, latency
    finally:
        env.close()
