"""``--env``: a Gymnasium env of someone else's (tests/helpers/foreign_envs.py) through a map, in
this process and in a worker process (``--env-python``, here the project's own interpreter)."""

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robot_rl.errors import InputError
from robot_rl.foreign import worker
from robot_rl.foreign.client import EnvWorkerError, LocalEnv, WorkerEnv, open_env
from robot_rl.foreign.env import MappedEnv
from robot_rl.foreign.mapping import EnvMap, EnvMapError, Gripper, read_env_map
from tests.helpers.common import one_line_error

HELPERS = Path(__file__).parent / "helpers"
REACH = "foreign_envs:robot_rl_test/Reach-v0"
EXPERT = "foreign_envs:scripted_reach"
EXPERT_WITH_PROGRESS = "foreign_envs:scripted_reach_with_progress"  # also says its progress(obs)
MAP = """\
state: [agent, goal]
differences: [[goal, "agent[0:2]"]]
cameras: {top: camera}
action: {motion: [0, 1], fixed: {2: 0.0}}
gripper: {index: 3, close: 1.0, stay: 0.0, open: -1.0, open_state: {key: agent, index: 2, below: 0.5}}
"""


@pytest.fixture(autouse=True)
def env_module_on_path(monkeypatch):
    """The test envs import as a package would, in process and in a worker."""
    monkeypatch.syspath_prepend(str(HELPERS))
    monkeypatch.setenv("PYTHONPATH", str(HELPERS))


@pytest.fixture
def env_map(tmp_path) -> Path:
    path = tmp_path / "reach.yaml"
    path.write_text(MAP)
    return path


def run_cli(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "PYTHONPATH": str(HELPERS)}
    return subprocess.run([sys.executable, "-m", "robot_rl.commands.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def episode(env: MappedEnv, seed: int, actions) -> list:
    out = []
    obs, _ = env.reset(seed=seed)
    out.append(obs)
    for a in actions:
        step = env.step(a)
        out.append(step)
        if step[2] or step[3]:
            break
    return out


# ------------------------------------------------------------------ frames
def test_frames_carry_arrays_and_refuse_objects():
    buf = io.BytesIO()
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([True, False]),
              "c": np.zeros((0, 4), np.int64)}
    worker.write_frame(buf, {"op": "x", "n": 1}, arrays)
    buf.seek(0)
    header, back = worker.read_frame(buf)
    assert header == {"op": "x", "n": 1}
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)
    with pytest.raises(worker.FrameError, match="numbers and booleans only"):
        worker.write_frame(io.BytesIO(), {}, {"o": np.array([object()])})
    truncated = io.BytesIO(buf.getvalue()[:-3])
    with pytest.raises(EOFError):
        worker.read_frame(truncated)


def test_a_frame_naming_an_object_dtype_is_refused():
    head = json.dumps({"arrays": [["x", "|O", [1], 0, 8]]}).encode()
    stream = io.BytesIO(worker.LENGTHS.pack(len(head), 8) + head + b"\0" * 8)
    with pytest.raises(worker.FrameError, match="do not fit"):
        worker.read_frame(stream)


# ------------------------------------------------------------------ the map
def test_map_applies_scale_fixed_dims_and_the_gripper(env_map):
    env = MappedEnv(LocalEnv(REACH, {}), read_env_map(env_map), REACH, ("top",), (8, 8))
    m = env.map
    assert env.action_space.shape == (3,) and env.observation_space["state"].shape == (8,)
    assert env.task.uses_gripper and env.task.gripper_open_index == 7
    assert np.allclose(m.to_env_action(np.array([0.5, -1.0, 1.0])), [0.5, -1.0, 0.0, 1.0])
    assert m.to_env_action(np.array([0, 0, 0.2]))[3] == 0.0 and m.to_env_action(np.array([0, 0, -0.9]))[3] == -1.0
    assert np.allclose(m.to_policy_action(np.array([0.25, 3.0, 0.7, 0.9])), [0.25, 1.0, 1.0])
    obs, _ = env.reset(seed=1)
    assert obs["images"]["top"].shape == (8, 8, 3) and obs["images"]["top"].dtype == np.uint8
    agent, goal = obs["state"][:3], obs["state"][3:5]
    assert np.allclose(obs["state"][5:7], goal - agent[:2]) and obs["state"][-1] == 1.0  # the goal relative; open
    env.close()


def test_default_map_takes_every_box_key_and_every_dimension():
    env = MappedEnv(LocalEnv(REACH, {}), EnvMap(), REACH)
    assert env.map.state == ["agent", "goal"] and env.map.cameras == {"camera": "camera"}
    assert env.map.motion == [0, 1, 2, 3] and env.map.gripper is None and not env.task.uses_gripper
    env.close()


def test_explicit_scale_and_success_from_the_reward(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("state: agent\naction: {motion: [1, 0], scale: [0.5, 0.25]}\nsuccess_reward: 1.0\n")
    env = MappedEnv(LocalEnv(REACH, {}), read_env_map(path), REACH)
    assert np.allclose(env.map.to_env_action(np.array([1.0, 1.0])), [0.25, 0.5, 0, 0])
    assert env.map.success_of({}, 1.0) == (True, "reward >= 1")
    assert env.map.success_of({"is_success": False}, 1.0) == (True, "reward >= 1")  # no key named: a reward rule
    env.close()
    assert EnvMap().resolve(LocalEnv(REACH, {}).observation_space, LocalEnv(REACH, {}).action_space,
                            REACH).success_of({"is_success": True, "success": False}, 0.0) == (True, "info['is_success']")


@pytest.mark.parametrize("text, needle", [
    ("state: [agent, velocity]\n", "state key 'velocity' is not in the observation"),
    ("cameras: {top: goal}\n", "camera 'top' reads 'goal', which is <f4 (2,), not H x W x 3 uint8"),
    ("gripper: {index: 4}\n", "gripper index 4 is out of range: the action has 4 dimensions"),
    ("action: {motion: [0, 0]}\n", "repeats a dimension"),
    ("differences: [[goal, agent]]\n", "'goal' has 2 numbers, 'agent' 3"),
    ("state: ['agent[5:9]']\n", "selects nothing of 'agent'"),
    ("state: ['agent[x]']\n", "is not key[i] or key[a:b]"),
    ("action: {motion: [0, 1], scale: [1, 2, 3]}\n", "3 numbers for 2 motion dimensions"),
    ("gripper: {index: 3, open_state: {key: agent, index: 9, below: 0.5}}\n", "open_state index 9 is out of range"),
    # a goal (hindsight relabelling, tests/test_goal_relabel.py) must lie in the state
    ("goal: {desired: 'goal[0:1]', achieved: 'agent[0:1]', within: 0.1, reward: {success: 1, failure: 0}}\n",
     "goal.desired 'goal[0:1]' must be one of the state refs"),
    ("goal: {desired: goal, achieved: agent, within: 0.1, reward: {success: 1, failure: 0}}\n",
     "goal.desired 'goal' has 2 numbers, goal.achieved 'agent' 3"),
    ("state: [goal]\ngoal: {desired: goal, achieved: 'agent[0:2]', within: 0.1, reward: {success: 1, failure: 0}}\n",
     "goal.achieved 'agent[0:2]' is not in the state"),
])
def test_map_errors_name_the_file_and_the_key(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    inner = LocalEnv(REACH, {})
    with pytest.raises(EnvMapError) as err:
        MappedEnv(inner, read_env_map(path), REACH)
    assert needle in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)
    inner.close()


def test_an_image_key_that_is_not_uint8_is_refused(tmp_path):
    inner = LocalEnv(REACH, {"bad_camera": True})
    with pytest.raises(EnvMapError, match="camera 'camera' reads 'camera', which is <f4 .16, 16, 3., not H x W x 3 uint8"):
        MappedEnv(inner, EnvMap(cameras={"camera": "camera"}), REACH)
    inner.close()


@pytest.mark.parametrize("text, needle", [
    ("state: [agent\n", "not valid YAML"),
    ("- a\n", "a mapping of"),
    ("stat: [agent]\n", "unknown key 'stat'"),
    ("gripper: {close: 1}\n", "gripper needs an index"),
])
def test_map_file_errors(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=needle):
        read_env_map(path)


def test_a_discrete_action_space_is_refused():
    inner = LocalEnv("foreign_envs:robot_rl_test/Discrete-v0", {})
    with pytest.raises(EnvMapError, match="has a Discrete action space"):
        MappedEnv(inner, EnvMap(), "Discrete-v0")
    inner.close()


# ------------------------------------------------------------------ in process and in a worker
def test_a_worker_gives_the_same_episode_as_in_process(env_map):
    actions = np.random.default_rng(0).uniform(-1, 1, (25, 3))
    local = MappedEnv(open_env(REACH, {}), read_env_map(env_map), REACH, ("top",), (16, 16))
    remote = MappedEnv(open_env(REACH, {}, sys.executable), read_env_map(env_map), REACH, ("top",), (16, 16))
    try:
        assert local.observation_space == remote.observation_space and local.max_episode_steps == 40
        assert remote.limits.control_hz == 20.0
        a, b = episode(local, 7, actions), episode(remote, 7, actions)
        assert len(a) == len(b)
        assert np.array_equal(a[0]["state"], b[0]["state"])
        for x, y in zip(a[1:], b[1:]):
            assert np.array_equal(x[0]["state"], y[0]["state"]) and x[0]["state"].dtype == y[0]["state"].dtype
            assert np.array_equal(x[0]["images"]["top"], y[0]["images"]["top"])
            assert x[1:4] == y[1:4] and x[4] == y[4]
    finally:
        local.close()
        remote.close()
    assert remote.inner.proc.wait(timeout=30) == 0  # closed cleanly


FRESH = "foreign_envs:robot_rl_test/FreshEntropyReach-v0"  # its unseeded reset draws fresh entropy (panda-gym 3)


def goals_after(env, seed: int, episodes: int = 4) -> list:
    """The goal of a seeded first episode and of the unseeded ones after it (the raw env's
    ``goal``; the mapped state's numbers 3 and 4)."""
    def goal(obs) -> list:
        return (obs["state"][3:5] if "state" in obs else obs["goal"]).tolist()

    return [goal(env.reset(seed=seed)[0])] + [goal(env.reset()[0]) for _ in range(episodes - 1)]


@pytest.mark.parametrize("python", [None, sys.executable], ids=["in process", "in a worker"])
def test_one_seed_gives_the_same_episodes_where_the_env_draws_fresh_entropy(env_map, python):
    raw = [open_env(FRESH, {}, python) for _ in range(2)]
    try:  # the env alone: seeded once, it goes on differently
        assert goals_after(raw[0], 3)[0] == goals_after(raw[1], 3)[0]
        assert goals_after(raw[0], 3)[1:] != goals_after(raw[1], 3)[1:]
    finally:
        for env in raw:
            env.close()
    mapped = [MappedEnv(open_env(FRESH, {}, python), read_env_map(env_map), FRESH) for _ in range(2)]
    try:  # mapped: every later episode seeded from the first's seed
        first, second = (goals_after(env, 3) for env in mapped)
        assert first == second and len({tuple(g) for g in first}) == 4
        assert goals_after(mapped[0], 4) != first  # another seed, other episodes
    finally:
        for env in mapped:
            env.close()


@pytest.mark.integration
def test_one_seed_gives_one_run_on_an_env_that_draws_fresh_entropy(tmp_path, env_map):
    from robot_rl.commands.train import train
    from robot_rl.config import TrainConfig

    runs = []
    for name in ("a", "b"):
        cfg = TrainConfig(env=FRESH, env_map=str(env_map), env_expert=EXPERT_WITH_PROGRESS, demos=2,
                          human_eagerness=1.0, human_takeover_steps=5, env_steps=200, eval_every=200, eval_episodes=2,
                          final_eval_episodes=2, pretrain_steps=10, critic_warmup_steps=10, batch_size=32,
                          agent={"hidden": [32, 32]}, learner="inline", run_dir=str(tmp_path / name), progress=False)
        runs.append(train(cfg, log=lambda m: None))
    a, b = runs
    assert a["episodes"] > 3 and a["interventions"] > 0
    for key in ("episodes", "episode_interventions", "intervention_steps", "evals", "updates"):
        assert a[key] == b[key], key


def test_the_scripted_policy_runs_in_the_worker(env_map):
    env = MappedEnv(open_env(REACH, {}, sys.executable, EXPERT), read_env_map(env_map), REACH)
    try:
        wins = 0
        for seed in range(5):
            env.reset(seed=seed)
            while True:
                _, _, terminated, truncated, info = env.step(env.expert_action())
                if terminated or truncated:
                    break
            wins += info["success"]
        assert wins == 5 and env.success_source == "info['is_success']"
    finally:
        env.close()


def test_a_worker_dying_mid_run_is_one_error_naming_the_env_and_its_stderr():
    env = MappedEnv(open_env(REACH, {"die_at_step": 3}, sys.executable), EnvMap(), REACH)
    env.reset(seed=0)
    env.step(np.zeros(4))
    env.step(np.zeros(4))
    with pytest.raises(EnvWorkerError) as err:
        env.step(np.zeros(4))
    text = str(err.value)
    assert REACH in text and "exit code 3" in text and "simulated crash at step 3" in text and "\n" not in text
    with pytest.raises(EnvWorkerError, match="died"):  # and stays dead, without a hang
        env.step(np.zeros(4))
    env.close()


def test_an_env_error_in_the_worker_is_reported_not_fatal():
    env = MappedEnv(open_env(REACH, {}, sys.executable), EnvMap(), REACH)
    env.reset(seed=0)
    with pytest.raises(EnvWorkerError, match="failed step in its worker"):
        env.inner.step(np.zeros(9, np.uint8).reshape(3, 3).T[:0])  # an empty action the env cannot index
    env.step(np.zeros(4))  # the worker goes on
    env.close()


def test_worker_start_errors(tmp_path):
    with pytest.raises(InputError, match="not an executable file"):
        WorkerEnv(str(tmp_path / "python"), REACH, {})
    with pytest.raises(InputError, match="unknown Gymnasium env id"):
        WorkerEnv(sys.executable, "NoSuchEnv-v9", {})
    with pytest.raises(InputError, match="--env-expert foreign_envs:nothing: AttributeError"):
        WorkerEnv(sys.executable, REACH, {}, "foreign_envs:nothing")
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    with pytest.raises(InputError, match="lacks (numpy|gymnasium)"):
        WorkerEnv(str(bare / "bin" / "python"), REACH, {})


def test_a_scripted_policys_progress_is_the_same_in_process_and_in_a_worker(env_map):
    """A scripted policy with ``progress(obs)`` says it through either; one without says it has none."""
    seen = []
    for python in (None, sys.executable):
        env = MappedEnv(open_env(REACH, {}, python, EXPERT_WITH_PROGRESS), read_env_map(env_map), REACH)
        try:
            assert env.has_expert_progress
            env.reset(seed=4)
            values = [env.expert_progress()]
            for _ in range(4):
                env.step(env.expert_action())
                values.append(env.expert_progress())
            seen.append(values)
        finally:
            env.close()
    assert seen[0] == pytest.approx(seen[1]) and seen[0][-1] > seen[0][0]  # the scripted reach comes closer
    for python in (None, sys.executable):
        plain = MappedEnv(open_env(REACH, {}, python, EXPERT), read_env_map(env_map), REACH)
        try:
            assert not plain.has_expert_progress
        finally:
            plain.close()


def test_a_progress_that_is_not_a_number_is_one_error_naming_it(env_map):
    """In a worker: one EnvWorkerError naming the env and the value; in process the same words."""
    for python, error in ((sys.executable, EnvWorkerError), (None, ValueError)):
        env = MappedEnv(open_env(REACH, {}, python, "foreign_envs:scripted_reach_lost"), read_env_map(env_map), REACH)
        try:
            env.reset(seed=0)
            with pytest.raises(error, match=r"the scripted policy's progress\(obs\) is nan, not a finite number"):
                env.expert_progress()
        finally:
            env.close()


# ------------------------------------------------------------------ the commands
@pytest.mark.parametrize("args, needles", [
    (["--env", "NoSuchEnv-v9"], ("--env NoSuchEnv-v9: unknown Gymnasium env id",)),
    (["--env", REACH, "--env-map", "MAP"], ("state key 'velocity' is not in the observation",)),
    (["--env", "foreign_envs:robot_rl_test/Discrete-v0"], ("Discrete action space",)),
    (["--env", REACH, "--env-python", "/nonexistent/python"], ("--env-python /nonexistent/python: not an executable",)),
    (["--env", REACH, "--demos", "3"], ("needs --env-expert",)),
    (["--env", REACH, "--simulated-human", "0.5", "--demos", "0"], ("--simulated-human on --env", "--env-expert")),
    (["--env-python", sys.executable], ("give --env ID too",)),
    (["--env", REACH, "--env-expert", EXPERT, "--simulated-human", "0.5", "--human-watches", "progress"],
     ("--human-watches progress: the scripted policy foreign_envs:scripted_reach has no progress(obs)",)),
    (["--task", "PickCube", "--simulated-human", "0.5", "--human-watches", "clock"],
     ("--human-watches clock is for a Gymnasium env (--env)",)),
    (["--env", REACH, "--collision-reflex"], (f"--collision-reflex is the Panda twin's; --env {REACH} ends its own",)),
    (["--task", "PickCubeSO101", "--collision-reflex"], ("the collision reflex is the Panda twin's",
                                                          "task PickCubeSO101 is the so101's")),
    (["--env", REACH, "--arm-max-force", "20"], (f"--arm-max-force is the Panda twin's controller's; --env {REACH}",)),
    (["--task", "PickCubeSO101", "--arm-max-force", "20"], ("the arm's force bound is the Panda twin's",
                                                             "task PickCubeSO101 is the so101's")),
    (["--task", "PegInsertHard", "--arm-max-force", "0"], ("--arm-max-force must be > 0 (N per axis), got 0",)),
    (["--task", "PegInsertHard", "--reflex-penalty", "1"], ("--reflex-penalty prices the twin's collision reflex",
                                                            "give --collision-reflex too")),
    (["--task", "PegInsertHard", "--collision-reflex", "--reflex-penalty", "-1"],
     ("--reflex-penalty is what a reflex costs, >= 0; got -1",)),
    (["--task", "PegInsertHard", "--human-guards"], ("--human-guards is the simulated human's",
                                                     "give --simulated-human EAGERNESS too")),
    (["--env", REACH, "--env-expert", EXPERT, "--simulated-human", "0.5", "--human-guards"],
     (f"--human-guards judges the twin's scenes; --env {REACH}'s scripted policy judges none",)),
    (["--task", "PickCube", "--simulated-human", "0.5", "--human-guards"],
     ("the simulated human's guard (--human-guards)", "'PickCube''s judges none", "the tasks it guards: PegInsertHard")),
])
def test_train_bad_env_input_is_one_line_exit_2(tmp_path, capsys, args, needles):
    from robot_rl.commands.cli import main

    bad_map = tmp_path / "m.yaml"
    bad_map.write_text("state: [agent, velocity]\n")
    args = [str(bad_map) if a == "MAP" else a for a in args]
    assert main(["train", "--demos", "0", *args, "--steps", "10", "--run-dir", str(tmp_path / "run")]) == 2
    one_line_error(capsys.readouterr().err, *needles)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, needles", [
    (["--env", REACH, "--env-expert", EXPERT, "--collision-reflex"],
     (f"--collision-reflex is the Panda twin's; --env {REACH} ends its own",)),
    (["--task", "PickCubeSO101", "--arm-max-force", "20"], ("the arm's force bound is the Panda twin's",
                                                             "task PickCubeSO101 is the so101's")),
    (["--task", "PegInsertHard", "--arm-max-force", "-1"], ("--arm-max-force must be > 0 (N per axis), got -1",)),
])
def test_record_bad_contact_input_is_one_line_exit_2(tmp_path, capsys, args, needles):
    from robot_rl.commands.cli import main

    assert main(["record", *args, "--episodes", "1", "--out", str(tmp_path / "takes.zarr")]) == 2
    one_line_error(capsys.readouterr().err, *needles)
    assert not (tmp_path / "takes.zarr").exists()


@pytest.mark.integration
def test_train_record_and_eval_on_a_foreign_env_in_a_worker(tmp_path, env_map):
    """A short run in a worker, its checkpoint evaluated and recorded from; the scripted policy's
    episodes recorded into a store, which a second run takes as its demonstrations."""
    common = ["--env", REACH, "--env-map", str(env_map), "--env-python", sys.executable]
    demos = tmp_path / "demos.zarr"
    out = run_cli("record", *common, "--env-expert", EXPERT, "--episodes", "3", "--images", "--image-size", "16",
                  "--cameras", "top", "--out", str(demos))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 3 and summary["successes"] == 3 and summary["success_source"] == "info['is_success']"
    run = tmp_path / "run"
    out = run_cli("train", *common, "--demos", str(demos), "--steps", "60", "--eval-every", "60", "--eval-episodes", "3",
                  "--final-eval-episodes", "3", "--pretrain-steps", "20", "--critic-warmup-steps", "20",
                  "--run-dir", str(run), "--no-progress")
    assert out.returncode == 0, out.stderr
    result = json.loads((run / "summary.json").read_text())
    assert result["env"] == REACH and result["env_steps"] == 60 and result["demo_episodes" if False else "demos"] == 3
    assert result["final"]["graded_by"] == "the env's info['is_success'], deterministic policy"
    out = run_cli("eval", "--checkpoint", str(run), "--episodes", "3")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["task"] == REACH
    out = run_cli("record", *common, "--policy", str(run), "--episodes", "2", "--out", str(tmp_path / "rollouts.zarr"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["episodes"] == 2


@pytest.mark.integration
def test_training_stops_with_one_line_when_the_worker_dies(tmp_path):
    out = run_cli("train", "--env", REACH, "--env-python", sys.executable, "--env-kwargs", "die_at_step=25",
                  "--demos", "0", "--random-steps", "10", "--steps", "200", "--eval-episodes", "1",
                  "--run-dir", str(tmp_path / "run"), "--no-progress")
    assert out.returncode == 2, out.stderr
    line = one_line_error(out.stderr.strip().splitlines()[-1] + "\n", REACH, "died", "simulated crash at step 25")
    assert "exit code 3" in line


def test_record_with_a_teleop_device_drives_the_env(tmp_path, env_map):
    """A device (here a scripted stand-in with the teleop devices' read()) drives the mapped env:
    its translation fills the motion dimensions, its gripper the gripper; an operator's reset
    event drops the take, success ends it as a success."""
    from robot_rl.commands.record import record_env_rollouts
    from robot_rl.config import RecordConfig
    from robot_rl.teleop.devices import TeleopInput

    class Operator:
        def __init__(self):
            self.reads = 0

        def read(self):
            self.reads += 1
            if self.reads == 2:
                return TeleopInput(np.zeros(7, np.float32), False, ("reset",))
            if self.reads % 4 == 0:
                return TeleopInput(np.zeros(7, np.float32), False, ("success",))
            return TeleopInput(np.array([0.5, -0.5, 0.9, 0, 0, 0, 1.0], np.float32), True)

    cfg = RecordConfig(env=REACH, env_map=str(env_map), teleop=None, env_expert=None, episodes=2, policy=None)
    with pytest.raises(InputError, match="needs an actor"):
        cfg.validate()
    cfg.teleop = "keyboard"
    summary = record_env_rollouts(tmp_path / "t.zarr", cfg, device=Operator(), clock=lambda: 0.0)
    assert summary["episodes"] == 2 and summary["successes"] == 2 and summary["tries"] == 3
    from robot_rl.data.store import EpisodeStore

    store = EpisodeStore.open(tmp_path / "t.zarr")
    ep = store.get_episode(0)
    assert np.allclose(ep["action"][0], [0.5, -0.5, 1.0]) and ep["is_intervention"][0]


@pytest.mark.learning
def test_learns_a_foreign_env_in_a_worker(tmp_path, env_map):
    """The default recipe on someone else's env, stepped in a worker process: ten scripted
    demonstrations and 2,000 online steps reach a high success rate by the env's own
    ``info["is_success"]``, over 50 evaluation episodes, above the behaviour-cloned start
    (0.72 at step 0; 0.98 at 2,000 when measured)."""
    from robot_rl.commands.train import train
    from robot_rl.config import TrainConfig

    cfg = TrainConfig(env=REACH, env_map=str(env_map), env_python=sys.executable, env_expert=EXPERT, demos=10,
                      env_steps=2000, eval_every=2000, eval_episodes=50, final_eval_episodes=50, learner="inline",
                      run_dir=str(tmp_path / "run"), progress=False)
    summary = train(cfg, log=lambda m: None)
    evals = [e["success_rate"] for e in summary["evals"]]
    assert summary["final_eval_episodes"] == 50 and summary["success_source"] == "info['is_success']"
    assert summary["final_success_rate"] >= 0.9, evals
    assert summary["final_success_rate"] > evals[0], evals
    assert summary["demo_source"] == f"10 demonstrations by the scripted policy {EXPERT}, recorded at the start"


def test_the_scripted_operator_takes_over_when_an_episode_runs_long(env_map):
    """--simulated-human on an env of your own: after patience steps without an end, the scripted
    policy drives for takeover_steps, at most max_takeovers times an episode."""
    from robot_rl.teleop.simulated_human import ScriptedOperator, SimulatedHumanConfig

    env = MappedEnv(open_env(REACH, {}, None, EXPERT), read_env_map(env_map), REACH)
    human = ScriptedOperator(env.expert_action, env.max_episode_steps,
                             SimulatedHumanConfig(eagerness=0.5, takeover_steps=3, max_takeovers=2))
    assert human.patience == 10  # 40 steps / 8 / 0.5
    env.reset(seed=0)
    human.reset()
    driven = [human({}) is not None for _ in range(40)]
    assert driven[:10] == [False] * 10 and driven[10:13] == [True] * 3
    assert driven[13:23] == [False] * 10 and driven[23:26] == [True] * 3 and not any(driven[26:])
    assert human.takeovers == 2 and human.reason == "no success after 23 steps"
    env.close()


def scripted_episode(env, seed: int, act=None) -> list:
    """(terminated, truncated, success, driven by ``act``'s caller) per step of one episode by ``act``
    (default: the scripted policy) until the env ends it."""
    env.reset(seed=seed)
    out = []
    while True:
        action = env.expert_action() if act is None else act()
        _, _, terminated, truncated, info = env.step(np.zeros(3) if action is None else action)
        out.append((terminated, truncated, info["success"], action is not None))
        if terminated or truncated:
            return out


@pytest.mark.parametrize("line, ends", [("", False), ("end_on_success: false\n", False),
                                        ("end_on_success: true\n", True)])
def test_end_on_success_ends_an_env_that_runs_to_its_time_limit(tmp_path, line, ends):
    """An env that reports success and runs on to its time limit (Reach's run_to_limit, as
    gymnasium-robotics' Fetch tasks): with end_on_success the first successful step ends the episode,
    terminated; without it (the default) the episode runs its 40 steps, truncated."""
    path = tmp_path / "m.yaml"
    path.write_text(MAP + line)
    env = MappedEnv(open_env(REACH, {"run_to_limit": True}, None, EXPERT), read_env_map(path), REACH)
    try:
        for seed in range(3):
            steps = scripted_episode(env, seed)
            first = next(i for i, (_, _, success, _) in enumerate(steps) if success)
            assert first < 39 and env.succeeded
            if ends:
                assert len(steps) == first + 1 and steps[-1][:3] == (True, False, True)
            else:
                assert len(steps) == 40 and steps[-1][:2] == (False, True) and not any(t for t, *_ in steps)
                assert all(success for _, _, success, _ in steps[first:])  # it stays solved, and runs on
            env.reset(seed=seed)
            assert not env.succeeded  # a new episode
    finally:
        env.close()


def test_evaluation_and_training_end_at_success_with_end_on_success(tmp_path):
    """The run's envs (``make_foreign_env``, which training, its evaluation, eval and record all
    build) honour the key: ``evaluate``'s episodes and the actor loop's end at success."""
    import types

    from robot_rl.actor import ActorLoop
    from robot_rl.envs import FlatObservation
    from robot_rl.foreign.env import make_foreign_env
    from robot_rl.rollout import evaluate

    path = tmp_path / "m.yaml"
    cfg = types.SimpleNamespace(env=REACH, env_map=str(path), env_kwargs=("run_to_limit=true",), env_python=None,
                                env_expert=EXPERT)
    lengths = {}
    for ends in (False, True):
        path.write_text(MAP + f"end_on_success: {str(ends).lower()}\n")
        cell = make_foreign_env(cfg)
        mapped = cell.unwrapped
        try:
            result = evaluate(lambda obs: mapped.expert_action(), FlatObservation(cell, "state"), episodes=3, seed=0)
            assert result["success_rate"] == 1.0
            lengths[ends] = result["episode_length"]
            loop = ActorLoop(cell, observe=lambda raw: raw, act=lambda raw, obs: mapped.expert_action(),
                             log=lambda m: None)
            loop.start(seed=0)
            while (step := loop.step()).episode is None:
                pass
            assert step.episode["success"]
            assert (step.episode["episode_steps"] < 40) == ends and step.info["success"]
        finally:
            cell.close()
    assert lengths[False] == 40 and lengths[True] < 40


@pytest.mark.parametrize("value", ["yes please", "1", "[true]", "{on: 1}"])
def test_end_on_success_of_the_wrong_type_is_one_line_naming_the_file_and_field(tmp_path, capsys, value):
    from robot_rl.commands.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(MAP + f"end_on_success: {value}\n")
    with pytest.raises(EnvMapError) as err:
        read_env_map(path)
    text = str(err.value)
    assert text.startswith(f"env map {path}: end_on_success is true or false, got ") and "\n" not in text
    assert main(["train", "--env", REACH, "--env-map", str(path), "--demos", "0", "--steps", "10",
                 "--run-dir", str(tmp_path / "run")]) == 2
    one_line_error(capsys.readouterr().err, str(path), "end_on_success")
    assert not (tmp_path / "run").exists()


def test_the_scripted_operator_stands_by_once_the_episode_has_succeeded(env_map):
    """On an env that runs on after success, the operator (built as training builds it) drives the
    scripted policy to success in its takeover, then hands back and stays off for the rest of the
    episode; one that does not watch success drives its whole takeover and takes over again."""
    from robot_rl.commands.learning_aids import make_human
    from robot_rl.config import TrainConfig
    from robot_rl.teleop.simulated_human import ScriptedOperator, SimulatedHumanConfig

    env = MappedEnv(open_env(REACH, {"run_to_limit": True}, None, EXPERT), read_env_map(env_map), REACH)
    try:
        cfg = TrainConfig(env=REACH, env_expert=EXPERT, human_eagerness=1.0, human_takeover_steps=25,
                          human_max_takeovers=3)
        human = make_human(cfg, env)
        blind = ScriptedOperator(env.expert_action, env.max_episode_steps, SimulatedHumanConfig(
            eagerness=1.0, takeover_steps=25, max_takeovers=3))
        assert human.patience == blind.patience == 5  # 40 steps / 8 / 1.0
        for operator in (human, blind):
            operator.reset()
            steps = scripted_episode(env, 0, lambda: operator({}))  # the policy holds still (zeros)
            first = next(i for i, (_, _, success, _) in enumerate(steps) if success)
            driven = [by_human for *_, by_human in steps]
            assert len(steps) == 40 and all(success for _, _, success, _ in steps[first:])
            assert driven[:5] == [False] * 5 and all(driven[5:first + 1])  # the takeover brought success
            if operator is human:
                assert not any(driven[first + 1:]) and operator.takeovers == 1 and not operator.intervening
            else:
                assert any(driven[first + 1:]) and operator.takeovers > 1
    finally:
        env.close()


@pytest.mark.parametrize("expert, watches, judged", [(EXPERT_WITH_PROGRESS, "auto", "progress"),
                                                     (EXPERT, "auto", "clock"),
                                                     (EXPERT_WITH_PROGRESS, "clock", "clock")])
def test_the_simulated_human_judges_the_scripted_policys_progress_where_it_has_one(env_map, expert, watches, judged):
    """Judging progress, the human takes over once the policy has stalled for its patience (at
    eagerness 1, 6 steps without progress) and drives the scripted policy to success, standing by
    after it on an env that runs on; judging the clock it waits 40 / 8 steps whatever happens."""
    from robot_rl.commands.learning_aids import human_watches, make_human
    from robot_rl.config import TrainConfig
    from robot_rl.teleop.simulated_human import ScriptedOperator, SimulatedHuman

    env = MappedEnv(open_env(REACH, {"run_to_limit": True}, None, expert), read_env_map(env_map), REACH)
    try:
        cfg = TrainConfig(env=REACH, env_expert=expert, human_eagerness=1.0, human_takeover_steps=25,
                          human_max_takeovers=3, human_watches=watches)
        human = make_human(cfg, env)
        assert human_watches(cfg, env) == judged
        assert isinstance(human, SimulatedHuman if judged == "progress" else ScriptedOperator)
        human.reset()
        steps = scripted_episode(env, 0, lambda: human({}))  # the policy holds still (zeros)
        driven = [by_human for *_, by_human in steps]
        first = next(i for i, (_, _, success, _) in enumerate(steps) if success)
        wait = 6 if judged == "progress" else 5  # the stall it waits: base patience 6 / 1.0; the clock 40 / 8
        assert driven[:wait] == [False] * wait and driven[wait] and driven[first]  # the human brought success
        assert not any(driven[first + 1:])  # the task done, it stands by
        # judging progress its first takeover is a correction, handed back once the finger is nearer than the
        # policy had it; the policy stalls again and the second drives through; the clock's one drives through
        assert human.takeovers == (2 if judged == "progress" else 1)
    finally:
        env.close()


@pytest.mark.integration
@pytest.mark.parametrize("expert, judged", [(EXPERT, "clock"), (EXPERT_WITH_PROGRESS, "progress")])
def test_train_with_the_scripted_operator_flags_its_steps(tmp_path, env_map, expert, judged):
    from robot_rl.commands.train import train
    from robot_rl.config import TrainConfig

    cfg = TrainConfig(env=REACH, env_map=str(env_map), env_expert=expert, demos=2, human_eagerness=1.0,
                      human_takeover_steps=5, env_steps=120, eval_every=120, eval_episodes=2, final_eval_episodes=2,
                      pretrain_steps=10, critic_warmup_steps=10, learner="inline", run_dir=str(tmp_path / "run"),
                      progress=False)
    summary = train(cfg, log=lambda m: None)
    assert summary["interventions"] > 0 and summary["intervention_steps"] >= summary["interventions"]
    assert summary["human_watches"] == judged


@pytest.mark.integration
def test_a_success_classifier_on_the_maps_cameras_rewards_a_foreign_run(tmp_path, capsys):
    """record --env with the map's camera, classifier train on that store, then train --env with
    --reward-classifier: the classifier scores the map's camera; the env's own success grades."""
    from robot_rl.commands.cli import main

    env_map = tmp_path / "reach.yaml"
    env_map.write_text(MAP)
    common = ["--env", REACH, "--env-map", str(env_map), "--env-expert", EXPERT]
    store, clf = tmp_path / "takes.zarr", tmp_path / "clf"
    assert main(["record", *common, "--episodes", "6", "--images", "--image-size", "32", "--cameras", "top",
                 "--out", str(store)]) == 0
    assert main(["classifier", "train", "--data", str(store), "--out", str(clf), "--steps", "20"]) == 0
    capsys.readouterr()
    run = tmp_path / "run"
    assert main(["train", *common, "--demos", "2", "--reward-classifier", str(clf), "--steps", "40", "--eval-every", "40",
                 "--eval-episodes", "2", "--final-eval-episodes", "2", "--pretrain-steps", "10",
                 "--critic-warmup-steps", "10", "--run-dir", str(run), "--no-progress"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["reward"] == "classifier" and summary["success_source"] == "info['is_success']"
    assert sum(summary["classifier_episodes"].values()) == summary["episodes"]


def test_the_critics_targets_are_bounded_by_one_only_where_the_reward_is_the_success(tmp_path, env_map):
    """``max_return`` 1 (the human-in-the-loop recipe's) bounds the critics' targets where the
    reward is our contract's (1 on the success that ends the episode: the twin's, the
    classifier's, on a mapped env too); a mapped env's own reward may be anything, so there the
    setting is refused in one line. Left out, no run clips."""
    from robot_rl.agent_setup import agent_config_for
    from robot_rl.agents.settings import HUMAN_IN_THE_LOOP_EXPLORATION
    from robot_rl.commands.train import TrainConfig
    from robot_rl.node_config import ActorNodeConfig, LearnerNodeConfig
    from robot_rl.config_values import ConfigError
    from robot_rl.envs import spec_env

    assert HUMAN_IN_THE_LOOP_EXPLORATION["max_return"] == 1.0
    recipe = dict(HUMAN_IN_THE_LOOP_EXPLORATION)
    twin = spec_env("PickCube", "state")
    for make in (TrainConfig, ActorNodeConfig, LearnerNodeConfig):
        assert agent_config_for(make(), twin).max_return is None
        assert agent_config_for(make(agent=recipe), twin).max_return == 1.0
    env = MappedEnv(LocalEnv(REACH, {}), read_env_map(env_map), REACH)
    try:
        assert agent_config_for(TrainConfig(env=REACH, env_map=str(env_map)), env).max_return is None
        with pytest.raises(ConfigError, match=r"^agent: max_return=1 bounds the returns of the success reward .*"
                                              r"this mapped env rewards with its own reward"):
            agent_config_for(TrainConfig(env=REACH, env_map=str(env_map), agent=recipe), env)
        classifier = tmp_path / "clf"
        classifier.mkdir()
        rewarded = TrainConfig(env=REACH, env_map=str(env_map), reward_classifier=str(classifier), agent=recipe)
        assert agent_config_for(rewarded, env).max_return == 1.0
    finally:
        env.close()
