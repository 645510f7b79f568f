"""A frozen base policy and its action chunks (robot_rl/base_policy.py, issue 46): a chunked base
served in this process and from a worker of another interpreter gives the same actions; receding
horizon and ACT's temporal ensembling; each bad base or setting is one error before any work."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from robot_rl.base_policy import ENSEMBLE_M, ActionChunks, CheckpointBase, FunctionBase, WorkerBase, open_base
from robot_rl.errors import InputError
from robot_rl.foreign.client import EnvWorkerError
from tests.helpers import base_policies
from tests.helpers.base_policies import ACTION_DIM, HORIZON

SPEC = "tests.helpers.base_policies:chunked"


def observations(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"state": rng.normal(size=20).astype(np.float32),
             "front": rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)} for _ in range(n)]


def actions_of(base, n: int = 12, **chunking) -> np.ndarray:
    chunks = ActionChunks(base, ACTION_DIM, **chunking)
    chunks.reset()
    return np.stack([chunks(obs) for obs in observations(n)]), chunks


@pytest.mark.parametrize("chunking", [dict(every=2), dict(every=1, mode="ensemble"), dict()])
def test_a_base_in_a_worker_of_another_interpreter_acts_as_in_this_process(chunking):
    here, _ = actions_of(FunctionBase(SPEC), **chunking)
    worker = WorkerBase(sys.executable, SPEC)
    try:
        there, chunks = actions_of(worker, **chunking)
    finally:
        worker.close()
    np.testing.assert_array_equal(here, there)
    assert worker.proc.poll() is not None  # closed: no worker left behind
    assert chunks.latency()["base_queries"] == len(chunks.query_ms) > 0


def test_receding_horizon_plays_each_chunk_from_its_query_on():
    obs = observations(12)
    for every in (1, 2, HORIZON):
        got, chunks = actions_of(FunctionBase(SPEC), every=every)
        for t in range(12):
            t0 = t - t % every  # the newest query
            np.testing.assert_allclose(got[t], base_policies.chunked(obs[t0])[t - t0], rtol=1e-6)
        assert len(chunks.query_ms) == -(-12 // every) and chunks.horizon == HORIZON
    default, chunks = actions_of(FunctionBase(SPEC))  # every: the whole chunk
    assert chunks.every == HORIZON and len(chunks.query_ms) == 3


def test_temporal_ensembling_averages_every_chunk_covering_the_step_oldest_weighted_most():
    obs = observations(8)
    got, _ = actions_of(FunctionBase(SPEC), every=1, mode="ensemble", n=8)
    for t in range(8):
        starts = [t0 for t0 in range(max(0, t - HORIZON + 1), t + 1)]  # oldest first
        predictions = np.stack([base_policies.chunked(obs[t0])[t - t0] for t0 in starts])
        weights = np.exp(-ENSEMBLE_M * np.arange(len(starts)))
        np.testing.assert_allclose(got[t], (weights[:, None] * predictions).sum(0) / weights.sum(), rtol=1e-5)


def test_reset_starts_a_new_episode_s_chunks_and_tells_the_base():
    before = base_policies.resets
    chunks = ActionChunks(FunctionBase(SPEC), ACTION_DIM, every=3)
    chunks.reset()
    first = [chunks(obs) for obs in observations(2)]
    chunks.reset()
    again = [chunks(obs) for obs in observations(2)]
    np.testing.assert_array_equal(first, again)  # the same observations from a fresh chunk
    assert base_policies.resets == before + 2


def test_a_single_action_is_a_chunk_of_one():
    got, chunks = actions_of(FunctionBase("tests.helpers.base_policies:one_action"), n=3)
    assert chunks.horizon == 1 and len(chunks.query_ms) == 3 and np.all(got == 0.5)


@pytest.mark.parametrize("source, python, says", [
    ("tests.helpers.base_policies:nowhere", None, "--base-policy tests.helpers.base_policies:nowhere: AttributeError"),
    ("tests.helpers.no_such_module:act", None, "ModuleNotFoundError: No module named 'tests.helpers.no_such_module'"),
    ("tests.helpers.no_such_module:act", sys.executable, "(in "),
    ("just-a-name", None, "--base-policy just-a-name: neither a run folder nor module:function"),
    (SPEC, "/no/such/python", "--base-python /no/such/python: not an executable file"),
])
def test_a_base_that_cannot_be_opened_is_one_line(source, python, says):
    with pytest.raises(InputError) as err:
        open_base(source, python)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_chunk_setting_the_base_cannot_meet_is_one_error_at_its_first_query():
    with pytest.raises(InputError, match=rf"--base-every {HORIZON + 1} is above the base policy's horizon: its chunks "
                                         rf"hold {HORIZON} actions"):
        actions_of(FunctionBase(SPEC), every=HORIZON + 1)
    with pytest.raises(InputError, match=f"the base policy's actions are {ACTION_DIM - 2} wide; the env's are {ACTION_DIM}"):
        actions_of(FunctionBase("tests.helpers.base_policies:too_narrow"))
    with pytest.raises(InputError, match="--base-mode must be one of"):
        ActionChunks(FunctionBase(SPEC), ACTION_DIM, mode="average")
    with pytest.raises(InputError, match="--base-every must be at least 1"):
        ActionChunks(FunctionBase(SPEC), ACTION_DIM, every=0)


def test_a_worker_that_dies_mid_run_is_one_error_naming_the_base_and_its_last_words():
    worker = WorkerBase(sys.executable, "tests.helpers.base_policies:dies_on_the_third_query")
    chunks = ActionChunks(worker, ACTION_DIM, every=1)
    chunks.reset()
    obs = observations(3)
    chunks(obs[0]), chunks(obs[1])
    with pytest.raises(EnvWorkerError) as err:
        chunks(obs[2])
    message = str(err.value)
    assert message.startswith("base policy tests.helpers.base_policies:dies_on_the_third_query: its worker process")
    assert "died during query (exit code 3)" in message and "out of memory" in message
    worker.close()


def test_a_run_folder_of_ours_is_a_base_of_one_action(tmp_path):
    import torch

    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.runtime.checkpoint import write_checkpoint

    torch.manual_seed(0)
    agent = SACAgent(SACConfig(state_dim=20, hidden=(32, 32)))
    write_checkpoint(tmp_path, "step_000000010", agent, None, {"env_steps": 10})
    base = open_base(str(tmp_path))
    assert isinstance(base, CheckpointBase)
    obs = observations(3)
    got, chunks = actions_of(base, n=3)
    np.testing.assert_allclose(got, np.stack([agent.act(o, deterministic=True) for o in obs]), rtol=1e-6)
    assert chunks.horizon == 1
    with pytest.raises(InputError, match="--base-python serves a module:function"):
        open_base(str(tmp_path), sys.executable)


def fake_lerobot_folder(tmp_path):
    folder = tmp_path / "act_policy"
    folder.mkdir()
    (folder / "config.json").write_text('{"type": "act"}')
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def test_a_lerobot_policy_folder_needs_a_python_with_lerobot(tmp_path):
    folder = fake_lerobot_folder(tmp_path)
    with pytest.raises(InputError, match=f"--base-policy {folder} is a LeRobot policy: give --base-python"):
        open_base(str(folder))
    with pytest.raises(InputError) as err:  # our own interpreter has no LeRobot
        open_base(str(folder), sys.executable)
    message = str(err.value)
    assert message.startswith(f"--base-policy {folder} (in {sys.executable}): ModuleNotFoundError")
    assert "No module named 'lerobot'" in message and "\n" not in message


LEROBOT_PYTHON = os.environ.get("ROBOT_RL_LEROBOT_PYTHON")
needs_lerobot = pytest.mark.skipif(not LEROBOT_PYTHON, reason="needs LeRobot's own venv "
                                   "(ROBOT_RL_LEROBOT_PYTHON=/path/to/its/python; docs/setup.md)")


@pytest.fixture(scope="module")
def act_policy(tmp_path_factory):
    """A tiny untrained ACT policy saved by LeRobot itself, with its processors and what LeRobot's
    own ``predict_action_chunk`` answers for one observation (tests/helpers/make_act_policy.py)."""
    folder = tmp_path_factory.mktemp("act") / "policy"
    subprocess.run([LEROBOT_PYTHON, "tests/helpers/make_act_policy.py", str(folder), "20", "32", "front", "wrist"],
                   check=True, capture_output=True, timeout=300)
    return folder


@needs_lerobot
def test_a_lerobot_act_policy_in_its_own_venv_answers_as_lerobot_does(act_policy):
    expected = np.load(act_policy / "expected.npz")
    base = open_base(str(act_policy), LEROBOT_PYTHON)
    try:
        chunks = ActionChunks(base, ACTION_DIM, every=2, mode="ensemble")
        chunks.reset()
        obs = {key: expected[key] for key in ("state", "front", "wrist")}
        np.testing.assert_allclose(base.query(obs), expected["chunk"], rtol=1e-5, atol=1e-6)
        assert chunks(obs).shape == (ACTION_DIM,) and chunks.horizon == 5
    finally:
        base.close()


@needs_lerobot
@pytest.mark.parametrize("change, says", [
    (lambda obs: {**obs, "state": obs["state"][:12]}, "the LeRobot policy reads a state of 20 numbers, the run's is 12"),
    (lambda obs: {"state": obs["state"], "front": obs["front"]}, "the LeRobot policy reads cameras ['front', 'wrist']"),
    (lambda obs: {**obs, "wrist": obs["wrist"][:16, :16]}, "the LeRobot policy reads camera 'wrist' at 32x32, the run renders 16x16"),
])
def test_a_lerobot_policy_whose_inputs_the_run_does_not_have_is_one_line(act_policy, change, says):
    expected = np.load(act_policy / "expected.npz")
    base = open_base(str(act_policy), LEROBOT_PYTHON)
    try:
        with pytest.raises(EnvWorkerError, match="failed query in its worker: ValueError: " + re.escape(says)):
            base.query(change({key: expected[key] for key in ("state", "front", "wrist")}))
    finally:
        base.close()


@needs_lerobot
def test_a_policy_folder_lerobot_cannot_load_is_one_line(act_policy, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(act_policy, broken)
    (broken / "config.json").write_text('{"type": "no_such_policy"}')
    with pytest.raises(InputError) as err:
        open_base(str(broken), LEROBOT_PYTHON)
    assert str(err.value).startswith(f"--base-policy {broken} (in {LEROBOT_PYTHON}): ") and "\n" not in str(err.value)


@pytest.mark.parametrize("text, says", [
    (None, "no such file"),
    ("cameras: [front\n", "not valid YAML"),
    ("- front\n", "a mapping of cameras, state, action, action_scale, action_offset, resize, task expected"),
    ("camera: {front: observation.images.top}\n",
     "unknown key 'camera' (known: cameras, state, action, action_scale, action_offset, resize, task)"),
    ("cameras: [front]\n", "cameras maps the run's camera names to the policy's image keys"),
    ("state: [0, -1]\n", "state is a list of indices (integers >= 0), got [0, -1]"),
    ("action: 3\n", "action is a list of indices (integers >= 0), got 3"),
    ("action_scale: [0.02, fast]\n", "action_scale is one number or a list of numbers, got [0.02, 'fast']"),
    ("action_offset: .nan\n", "action_offset is one number or a list of numbers, got nan"),
    ("action_scale: [1, 0]\n", "action_scale 0 maps every run action to one value of the policy's"),
    ("resize: 64\n", "resize is true or false, got 64"),
    ("task: [pick]\n", "task is the policy's language instruction (text), got ['pick']"),
])
def test_a_base_map_that_is_not_one_is_one_line_naming_the_file(tmp_path, text, says):
    from robot_rl.base_policy import read_base_map

    path = tmp_path / "base_map.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(InputError) as err:
        read_base_map(path)
    assert str(err.value).startswith(f"base map {path}: ") and says in str(err.value) and "\n" not in str(err.value)


def test_a_base_map_is_for_a_lerobot_policy_only(tmp_path):
    path = tmp_path / "base_map.yaml"
    path.write_text("state: [0, 1]\n")
    with pytest.raises(InputError, match=f"--base-map maps a LeRobot policy's inputs; {SPEC} is not a LeRobot"):
        open_base(SPEC, base_map=str(path))


@needs_lerobot
def test_a_base_map_renames_cameras_and_picks_state_and_action(act_policy, tmp_path):
    """The policy reads front and wrist and a state of 20: the run's side camera stands for its
    front, its state of 25 holds the 20 at odd places, and the run's actions are the policy's reversed."""
    expected = np.load(act_policy / "expected.npz")
    picks = list(range(24, 4, -1))  # the policy's state i is the run's state 24 - i
    state = np.zeros(25, np.float32)
    state[picks] = expected["state"]
    path = tmp_path / "base_map.yaml"
    path.write_text(f"cameras: {{side: observation.images.front}}\nstate: {picks}\naction: [6, 5, 4, 3, 2, 1, 0]\n")
    base = open_base(str(act_policy), LEROBOT_PYTHON, base_map=str(path))
    try:
        got = base.query({"state": state, "side": expected["front"], "wrist": expected["wrist"]})
        np.testing.assert_allclose(got, expected["chunk"][:, ::-1], rtol=1e-5, atol=1e-6)
    finally:
        base.close()
    path.write_text("cameras: {side: observation.images.top}\n")
    with pytest.raises(InputError, match=re.escape("the base map's camera 'side' is the policy's "
                                                   "'observation.images.top', which it does not read")):
        open_base(str(act_policy), LEROBOT_PYTHON, base_map=str(path))


@needs_lerobot
def test_a_base_map_resizes_images_and_scales_actions_into_the_contract(act_policy, tmp_path):
    """The policy reads 32x32 images and answers in its own units: the run's 64x64 images are resized
    to what it reads (what LeRobot answers for them resized, tests/helpers/make_act_policy.py), and
    its actions come back as (value - offset) / scale."""
    expected = np.load(act_policy / "expected.npz")
    big = {cam: expected[f"{cam}_big"] for cam in ("front", "wrist")}
    scale = [0.5, 1, 2, 1, 1, 1, 4]
    path = tmp_path / "base_map.yaml"
    path.write_text(f"resize: true\naction_scale: {scale}\naction_offset: 0.25\ntask: pick up the red cube\n")
    base = open_base(str(act_policy), LEROBOT_PYTHON, base_map=str(path))
    try:
        got = base.query({"state": expected["state"], **big})
        np.testing.assert_allclose(got, (expected["chunk_resized"] - 0.25) / np.array(scale), rtol=1e-5, atol=1e-6)
    finally:
        base.close()
    path.write_text("action_scale: [1, 2]\n")
    with pytest.raises(InputError, match=re.escape("the base map's action_scale has 2 numbers for the run's 7 "
                                                   "action dimensions")):
        open_base(str(act_policy), LEROBOT_PYTHON, base_map=str(path))
