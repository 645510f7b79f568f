"""Faults around training runs: tampered or NaN checkpoints, a kill during
a save, crashes and signals mid-run, resume with the run's own config, episodes joined across a
resume, damaged replay files, bad flags and the run folders failed runs leave.

The runs are tiny: state observations, no demos (random actions, so the learner has nothing to
update), the learner inline, one evaluation episode. Killing tests wait for a line on the
child's stdout, never on a sleep."""

import dataclasses
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from robot_rl.contract import Transition
from robot_rl.commands.cli import main
from robot_rl.replay import MixedReplay, ReplayBuffer
from robot_rl.runtime.checkpoint import (CheckpointError, latest_checkpoint, load_agent, load_replay, read_state,
                                         resolve_checkpoint, verify_checkpoint, write_manifest)
from robot_rl.commands.train import TrainConfig, TrainingError, train

pytestmark = pytest.mark.faults

QUICK = dict(task="PickCube", obs="state", demos=0, learner="inline", eval_every=100_000, eval_episodes=1,
             final_eval_episodes=1, progress=False)
QUICK_FLAGS = ["--obs", "state", "--demos", "0", "--eval-every", "100000", "--eval-episodes", "1",
               "--final-eval-episodes", "1", "--no-progress", "--learner"]  # + "inline" or "process"
SAVED = re.compile(r"checkpoint (step_\d+) saved \(env step (\d+)\)")


def step_dir(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"step_{step:09d}"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A finished 40-step run with checkpoints at env steps 20 and 40."""
    run = tmp_path_factory.mktemp("template") / "run"
    train(TrainConfig(env_steps=40, checkpoint_every=20, run_dir=str(run), **QUICK), log=lambda m: None)
    return run


@pytest.fixture
def run(template, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(template, copy)
    return copy


def overwrite_tensor(path: Path, prefix: str, value: float) -> str:
    """Overwrite the bytes of the first float32 tensor named ``prefix...`` in place (a tampered file)."""
    data = bytearray(path.read_bytes())
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    name = next(k for k in sorted(header) if k.startswith(prefix) and header[k]["dtype"] == "F32")
    start, end = header[name]["data_offsets"]
    data[8 + n + start:8 + n + end] = np.full((end - start) // 4, value, np.float32).tobytes()
    path.write_bytes(bytes(data))
    return name


def one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# ---------------------------------------------------------------- 3. tampered and NaN checkpoints
def test_tampered_weights_are_refused_and_a_run_falls_back_to_the_newest_checkpoint_that_verifies(run, capsys):
    newest, older = step_dir(run, 40), step_dir(run, 20)
    weights = newest / "agent.safetensors"
    overwrite_tensor(weights, "model.actor.", 1.0)  # tampering: actor weights set to 1.0

    with pytest.raises(CheckpointError) as err:
        verify_checkpoint(newest)
    message = one_line(str(err.value))
    assert str(weights) in message and "sha256" in message
    with pytest.raises(CheckpointError, match="sha256"):
        resolve_checkpoint(newest)  # a checkpoint named explicitly is never swapped for another

    said = []
    assert resolve_checkpoint(run, log=said.append) == older
    assert latest_checkpoint(run, log=said.append) == older
    assert any(str(weights) in m for m in said) and any(f"using {older}" in m for m in said)

    # eval on the run folder uses the older checkpoint and says so; on the tampered one: one line
    assert main(["eval", "--checkpoint", str(run), "--episodes", "1"]) == 0
    out, err_text = capsys.readouterr()
    assert json.loads(out)["checkpoint"] == str(older)
    assert str(weights) in err_text and "newest checkpoint that verifies" in err_text
    assert main(["eval", "--checkpoint", str(newest), "--episodes", "1"]) == 2
    assert str(weights) in one_line(capsys.readouterr().err)

    # a bare resume goes on from the older one, and its new step-40 checkpoint verifies again
    assert main(["train", "--resume", str(run)]) == 0
    assert f"from {older.name} at env step 20" in capsys.readouterr().out
    verify_checkpoint(newest)
    assert load_agent(weights).actor.net[0].weight.ne(1.0).any()


def test_nan_weights_are_reported_as_nan_with_the_file(run):
    newest, older = step_dir(run, 40), step_dir(run, 20)
    weights = newest / "agent.safetensors"
    name = overwrite_tensor(weights, "model.actor.", float("nan"))
    # changed after the save: both facts in one line
    with pytest.raises(CheckpointError) as err:
        verify_checkpoint(newest)
    message = one_line(str(err.value))
    assert str(weights) in message and "sha256" in message and f"NaN/inf values (tensor {name})" in message

    # saved with NaN in it (the manifest matches): still refused, as NaN, and never loaded
    write_manifest(newest)
    for attempt in (lambda: verify_checkpoint(newest), lambda: load_agent(weights)):
        with pytest.raises(CheckpointError) as err:
            attempt()
        message = one_line(str(err.value))
        assert str(weights) in message and f"NaN/inf values (tensor {name})" in message
    assert resolve_checkpoint(run, log=lambda m: None) == older


# ---------------------------------------------------------------- 5. a kill during a save
def make_leftovers(run: Path) -> list[Path]:
    """What a save killed midway leaves: a complete-looking ``<name>.tmp`` (killed between the
    manifest and the rename, the worst case) newer than every checkpoint, and ``latest.tmp``."""
    root = run / "checkpoints"
    leftover = root / "step_000000060.tmp"
    shutil.copytree(step_dir(run, 40), leftover)
    (root / "latest.tmp").write_text("step_000000060")
    return [leftover, root / "latest.tmp"]


def test_a_leftover_tmp_folder_is_ignored_by_every_lookup_and_cleaned_by_the_next_writer(run, capsys):
    leftovers = make_leftovers(run)
    newest = step_dir(run, 40)
    said = []
    assert latest_checkpoint(run, log=said.append) == newest and said == []
    assert resolve_checkpoint(run, log=said.append) == newest and said == []
    with pytest.raises(CheckpointError, match="unfinished save"):
        resolve_checkpoint(leftovers[0])

    assert main(["eval", "--checkpoint", str(run), "--episodes", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"] == str(newest)
    assert all(p.exists() for p in leftovers)  # a reader never deletes: a save may be under way

    assert main(["train", "--resume", str(run), "--steps", "60"]) == 0
    assert f"from {newest.name} at env step 40" in capsys.readouterr().out
    assert not any(p.exists() for p in leftovers)
    assert latest_checkpoint(run) == step_dir(run, 60) and read_state(step_dir(run, 60))["env_steps"] == 60


def test_the_ros_learner_starts_from_the_newest_checkpoint_that_verifies_and_cleans_leftovers(run, capfd):
    rclpy = pytest.importorskip("rclpy", reason="ROS 2 wheels (pip install robot-rl[ros])")
    from robot_rl.drivers.learner_node import LearnerNode
    from tests.helpers.ros import free_domain_id

    leftovers = make_leftovers(run)
    older = step_dir(run, 20)
    overwrite_tensor(step_dir(run, 40) / "agent.safetensors", "model.actor.", 1.0)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=free_domain_id(),
               args=["--ros-args", "-p", f"run_dir:={run}", "-p", "obs:=state", "-p", "pretrain_steps:=0",
                     "-p", "critic_warmup_steps:=0"])
    try:
        node = LearnerNode(context=context)
        try:
            want = load_file(str(older / "agent.safetensors"))
            got = node.learner.agent.state_dict()
            assert all(torch.equal(got[k[len("model."):]], v) for k, v in want.items() if k.startswith("model."))
            assert node.learner.started
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)
    assert not any(p.exists() for p in leftovers)
    log = capfd.readouterr().err
    assert "step_000000060.tmp" in log and f"using {older}" in log and "resumed the agent from" in log


# ---------------------------------------------------------------- 6. crashes and signals mid-run
class TrainProcess:
    """``robot-rl train`` in a child process; its stdout lines are read on a thread."""

    def __init__(self, args: list[str], tmp_path: Path, new_session: bool = False):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
        self.stderr_path = tmp_path / "train.stderr"
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen([sys.executable, "-m", "robot_rl.commands.cli", "train", *args], stdout=subprocess.PIPE,
                                         stderr=stderr, text=True, env=env, start_new_session=new_session)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: re.Pattern, failsafe_s: float = 300.0) -> re.Match:
        while True:
            line = self.lines.get(timeout=failsafe_s)
            assert line is not None, f"train exited before {pattern.pattern!r}: {self.seen} {self.stderr}"
            self.seen.append(line)
            match = pattern.search(line)
            if match:
                return match

    def finish(self, failsafe_s: float = 300.0) -> int:
        rc = self.proc.wait(failsafe_s)
        while (line := self.lines.get(timeout=failsafe_s)) is not None:
            self.seen.append(line)
        return rc

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.mark.parametrize("trigger", ["steps", "time"])
def test_a_run_killed_after_a_checkpoint_resumes_and_loses_at_most_checkpoint_every_steps(trigger, tmp_path, capsys):
    run = tmp_path / "run"
    every = ["--checkpoint-every", "50", "--checkpoint-every-s", "3600"] if trigger == "steps" else \
        ["--checkpoint-every", "1000000", "--checkpoint-every-s", "0.2"]
    child = TrainProcess(["--steps", "100000", *every, "--run-dir", str(run), *QUICK_FLAGS, "inline"], tmp_path)
    try:
        child.wait_for(SAVED)
        child.proc.send_signal(signal.SIGKILL)
        assert child.finish() == -signal.SIGKILL
    finally:
        child.kill()
    saved = [SAVED.search(line) for line in child.seen if SAVED.search(line)]
    last = int(saved[-1].group(2))  # the kill came at most one checkpoint interval after this one
    ckpt = latest_checkpoint(run)
    assert ckpt.name == saved[-1].group(1) and read_state(ckpt)["env_steps"] == last
    if trigger == "steps":
        assert last % 50 == 0
    total = last + 30
    assert main(["train", "--resume", str(run), "--steps", str(total)]) == 0
    out = capsys.readouterr().out
    assert f"at env step {last}" in out and json.loads(out.strip().splitlines()[-1])["env_steps"] == total
    replay = load_replay(latest_checkpoint(run))
    assert len(replay.online) == total  # the steps after the last checkpoint were redone, none twice


@pytest.mark.parametrize("signame, learner", [("SIGTERM", "inline"), ("SIGINT", "process")])
def test_sigterm_and_sigint_write_a_checkpoint_before_exiting(signame, learner, tmp_path, capsys):
    """SIGINT goes to the whole process group, as Ctrl-C in a terminal: the learner process
    must leave the shutdown to the actor."""
    run = tmp_path / "run"
    child = TrainProcess(["--steps", "100000", "--checkpoint-every", "1000000", "--checkpoint-every-s", "3600",
                          "--run-dir", str(run), *QUICK_FLAGS, learner], tmp_path, new_session=True)
    sig = getattr(signal, signame)
    try:
        child.wait_for(re.compile(r"^step 0: eval success"))  # the actor loop starts next
        if sig == signal.SIGINT:
            os.killpg(child.proc.pid, sig)
        else:
            child.proc.send_signal(sig)
        assert child.finish() == 128 + sig
    finally:
        child.kill()
    saved = [SAVED.search(line) for line in child.seen if SAVED.search(line)]
    assert len(saved) == 1
    step = int(saved[0].group(2))
    assert "Traceback" not in child.stderr
    (message,) = [line for line in child.stderr.splitlines() if line.startswith("robot-rl:")]
    assert f"stopped by {signame} at env step {step}" in message and f"--resume {run}" in message
    assert read_state(latest_checkpoint(run))["env_steps"] == step
    assert main(["train", "--resume", str(run), "--steps", str(step + 10), "--learner", "inline"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == step + 10


def test_a_learner_behind_its_actor_stops_and_checkpoints_between_messages_not_after_its_backlog(tmp_path):
    """A learner that fell behind receives hundreds of transitions at once (minutes of updates): a
    stop (the ROS learner node's SIGTERM, SIGKILL 10 s on) ends it after the message in hand and the
    node's timed checkpoint is looked at after each one; seen in a so101_sim run: the node killed in
    a backlog, its last two minutes of updates lost with no checkpoint."""
    from robot_rl.agent_setup import agent_config_for
    from robot_rl.envs import obs_spec, spec_env
    from robot_rl.runtime.learner import LATEST_ONLY, build_learner
    from robot_rl.runtime.transport import inprocess_pair
    from robot_rl.runtime.wire import Message

    env = spec_env("PickCube", "state")
    cfg = TrainConfig(agent={"hidden": (32, 32)}, batch_size=8, replay_capacity=100, demo_capacity=100)
    learner = build_learner(cfg, agent_config_for(cfg, env), obs_spec(env.observation_space),
                            inprocess_pair(latest_only=LATEST_ONLY)[1], tmp_path)

    class Backlog:  # an endpoint holding 300 transitions at once
        peer_closed = False

        def receive(self, timeout=0.0):
            return [Message("transition") for _ in range(300)]

    taken, passes = [], []
    learner.endpoint = Backlog()
    learner.take = lambda msg: taken.append(msg) or 2  # two updates each
    learner.send_status = lambda: pytest.fail("no status once stopped mid-batch")
    learner.run(keep_running=lambda: len(taken) < 3, every_pass=lambda: passes.append(len(taken)))
    assert len(taken) == 3 and passes == [1, 2, 3]


# ---------------------------------------------------------------- 7. resume keeps the run's config
def test_resume_goes_on_with_the_runs_own_config_and_keeps_its_history(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--steps", "40", "--checkpoint-every", "20", "--run-dir", str(run),
                 *QUICK_FLAGS, "inline"]) == 0
    capsys.readouterr()
    own = {"env_steps": 40, "demos": 0, "eval_episodes": 1, "checkpoint_every": 20, "learner": "inline"}

    def config() -> dict:
        return json.loads((run / "config.json").read_text())

    assert main(["train", "--resume", str(run)]) == 0  # bare: nothing changes (not the CLI defaults)
    assert "resume:" not in capsys.readouterr().out
    assert {k: config()[k] for k in own} == own

    assert main(["train", "--resume", str(run), "--steps", "60"]) == 0
    out = capsys.readouterr().out
    assert "resume: env_steps = 60 as given (the run's own: 40)" in out
    assert config()["env_steps"] == 60 and {k: config()[k] for k in own if k != "env_steps"} == \
        {k: v for k, v in own.items() if k != "env_steps"}
    assert read_state(latest_checkpoint(run))["env_steps"] == 60

    history = [json.loads(line) for line in (run / "config_history.jsonl").read_text().splitlines()]
    assert len(history) == 3 and history[0]["resumed_from"] is None
    assert history[1]["changed"] == {} and history[2]["changed"] == {"env_steps": [40, 60]}
    assert history[2]["resumed_from"] == str(step_dir(run, 40)) and history[2]["config"] == config()

    # what shapes the networks, the replay or the data cannot change on resume
    for flags, key in ((["--demos", "5"], "demos"), (["--task", "PegInsert"], "task"),
                       (["--num-critics", "4"], "agent")):
        assert main(["train", "--resume", str(run), *flags]) == 2
        assert f"trained with {key}=" in one_line(capsys.readouterr().err)
    assert config()["env_steps"] == 60 and len((run / "config_history.jsonl").read_text().splitlines()) == 3


# ---------------------------------------------------------------- 4. no episode joined across a resume
def test_a_resume_never_joins_two_episodes_in_the_online_replay(tmp_path):
    from robot_rl.envs import make_env

    run = tmp_path / "run"
    train(TrainConfig(env_steps=30, checkpoint_every=30, run_dir=str(run), **QUICK), log=lambda m: None)
    assert load_replay(step_dir(run, 30)).online.episode_open  # killed mid-episode (episodes last 100 steps)
    train(None, resume=str(run), overrides={"env_steps": 50}, log=lambda m: None)
    with np.load(step_dir(run, 50) / "replay" / "online.npz") as data:
        state, valid, truncated = data["obs__state"], data["valid"], data["truncated"]
    assert valid.sum() == 50
    # slots 0..30: the first episode (30 transitions); it ends, truncated, where the checkpoint was
    assert valid[:30].all() and truncated[29] and not truncated[:29].any()
    assert not valid[30]  # slot 30 is only that episode's last next_obs
    # the resumed episode starts at slot 31, with the observation the env was reset to
    env = make_env("PickCube", "mujoco", "state", (64, 64), ("front", "wrist"))
    raw, _ = env.env.reset(seed=0 + 30)
    np.testing.assert_array_equal(state[31], env.observation(raw)["state"])
    env.close()
    assert valid[31:51].all()


def test_a_takeover_that_ends_mid_episode_is_closed_in_the_demo_buffer():
    """Human steps go to the demo buffer too; when the human hands back mid-episode, the next
    takeover must not join on to the previous one's last observation."""
    spec = {"state": ((2,), np.float32)}
    replay = MixedReplay(ReplayBuffer(50, spec, 1, seed=0), ReplayBuffer(50, spec, 1, seed=1))
    human = {0, 1, 2, 6, 7}
    for t in range(10):
        obs, next_obs = ({"state": np.array([0, t + i], np.float32)} for i in (0, 1))
        replay.add(Transition(obs, np.zeros(1), 0.0, next_obs, False, t == 9, t in human))
    assert len(replay.demo) == 5 and not replay.demo.episode_open  # the second takeover was handed back too
    batch = replay.demo.sample(200)
    t, next_t = batch["obs"]["state"][:, 1], batch["next_obs"]["state"][:, 1]
    assert set(t.tolist()) == human
    np.testing.assert_array_equal(next_t, t + 1)
    np.testing.assert_array_equal(batch["bootstrap"] > 0, True)  # hand-backs are truncations, not terminals


# ---------------------------------------------------------------- 8. a damaged replay file
def test_a_truncated_replay_file_is_one_line_naming_it(run, capsys):
    ckpt = step_dir(run, 40)
    online = ckpt / "replay" / "online.npz"
    online.write_bytes(online.read_bytes()[:1000])
    assert main(["train", "--resume", str(ckpt), "--steps", "60"]) == 2
    assert str(online) in one_line(capsys.readouterr().err)

    write_manifest(ckpt)  # damaged before its checksum was taken: the loader must still name it
    with pytest.raises(CheckpointError) as err:
        load_replay(ckpt)
    assert str(online) in one_line(str(err.value)) and "BadZipFile" in str(err.value)
    with pytest.raises(TrainingError) as err:  # the learner process loads it: its error is one line too
        train(None, resume=str(ckpt), overrides={"env_steps": 60, "learner": "process"}, log=lambda m: None)
    assert str(online) in one_line(str(err.value))


# ---------------------------------------------------------------- 8a. another run's network
def test_an_agent_file_from_another_network_is_refused_by_eval_and_resume_in_one_line(run, tmp_path, capsys):
    other = tmp_path / "other"
    train(TrainConfig(env_steps=20, checkpoint_every=20, run_dir=str(other), **{**QUICK, "agent": {"hidden": (32, 32)}}),
          log=lambda m: None)
    newest = step_dir(run, 40)
    shutil.copy(step_dir(other, 20) / "agent.safetensors", newest / "agent.safetensors")
    write_manifest(newest)  # the manifest rewritten: the checksums verify, the network is another
    shutil.rmtree(step_dir(run, 20))  # no older checkpoint to fall back on: the swapped one is the run's newest

    assert main(["eval", "--checkpoint", str(run), "--episodes", "1"]) == 2
    message = one_line(capsys.readouterr().err)
    assert str(newest) in message and "hidden [32, 32] in agent.safetensors, [256, 256] in state.json" in message
    assert main(["train", "--resume", str(run), "--steps", "60", "--learner", "process"]) == 2
    message = one_line(capsys.readouterr().err)
    assert str(newest) in message and "hidden [32, 32] in the checkpoint, [256, 256] in the run's config" in message
    assert str(run / "config.json") in message


def test_a_resumed_learner_is_built_from_the_runs_config_as_the_actor_is(run):
    from robot_rl.runtime.checkpoint import load_agent

    ckpt = step_dir(run, 40)
    saved = load_agent(ckpt / "agent.safetensors").config
    wanted = dataclasses.replace(saved, grasp_epsilon=0.0, target_entropy=-6.0)  # settings a resume may change
    agent = load_agent(ckpt / "agent.safetensors", config=wanted)
    assert agent.config.grasp_epsilon == 0.0 and agent.config.target_entropy == -6.0
    with pytest.raises(CheckpointError, match="num_critics 2 in the checkpoint, 4 in the test's config"):
        load_agent(ckpt / "agent.safetensors", config=dataclasses.replace(saved, num_critics=4),
                   source="the test's config")


# ---------------------------------------------------------------- 8b. a learner killed from outside
def test_a_learner_process_killed_by_a_signal_is_one_line_saying_how_and_where(run, monkeypatch):
    from robot_rl.actor import LearnerClient

    start = LearnerClient.start

    def start_then_kill(*args, **kwargs):  # as the out-of-memory killer would, right after it started
        client = start(*args, **kwargs)
        os.kill(client.process.pid, signal.SIGKILL)
        client.process.join()
        return client

    monkeypatch.setattr(LearnerClient, "start", start_then_kill)
    with pytest.raises(TrainingError) as err:
        train(None, resume=str(run), overrides={"env_steps": 60, "learner": "process"}, log=lambda m: None)
    message = one_line(str(err.value))
    assert "killed by SIGKILL (signal 9)" in message and "out-of-memory" in message
    assert "no fault log" in message and f"--resume {run}" in message


def test_the_learners_death_names_its_exit_code_or_signal_and_its_fault_log(tmp_path):
    from robot_rl.runtime.learner import learner_death
    from robot_rl.runtime.learner import LEARNER_FAULT_LOG

    assert "exited with code 3" in learner_death(3, 11, tmp_path)
    assert "killed by SIGSEGV (signal 11)" in learner_death(-signal.SIGSEGV, 11, tmp_path)
    (tmp_path / LEARNER_FAULT_LOG).write_text("Fatal Python error: Segmentation fault\n")
    assert f"its fault log: {tmp_path / LEARNER_FAULT_LOG}" in learner_death(-signal.SIGSEGV, 11, tmp_path)


# ---------------------------------------------------------------- 9. bad values, failed runs
@pytest.mark.parametrize("flags, named", [
    (["--eval-episodes", "0"], "eval_episodes"), (["--final-eval-episodes", "0"], "final_eval_episodes"),
    (["--num-critics", "0"], "num_critics"), (["--num-critics", "1"], "num_critics"),
    (["--checkpoint-every", "0"], "checkpoint_every"), (["--checkpoint-every-s", "0"], "checkpoint_every_s"),
    (["--steps", "0"], "env_steps"), (["--stop-at-success", "1.5"], "stop_at_success"),
])
def test_each_bad_train_value_is_one_clear_error_and_leaves_no_run_folder(flags, named, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--steps", "20", *QUICK_FLAGS, "inline", "--run-dir", str(run), *flags]) == 2
    assert named in one_line(capsys.readouterr().err)
    assert not run.exists()


def test_a_failed_run_removes_its_folder_unless_it_holds_checkpoints(tmp_path, monkeypatch):
    from robot_rl.agents.sac import SACAgent
    from robot_rl.runtime.learner import NonFiniteLoss

    monkeypatch.setattr(SACAgent, "pretrain_actor", lambda self, batch: float("nan"))
    fresh = tmp_path / "fresh"
    with pytest.raises(NonFiniteLoss, match="non-finite bc loss"):  # fails in pre-training: nothing saved
        train(TrainConfig(**{**QUICK, "demos": 1}, env_steps=20, pretrain_steps=5, run_dir=str(fresh)),
              log=lambda m: None)
    assert not fresh.exists()

    mine = tmp_path / "mine"  # a folder that was there before is the user's: left alone
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(NonFiniteLoss):
        train(TrainConfig(**{**QUICK, "demos": 1}, env_steps=20, pretrain_steps=5, run_dir=str(mine)),
              log=lambda m: None)
    assert (mine / "notes.txt").read_text() == "mine"

    from robot_rl.commands import train as train_module

    calls = []

    def eval_that_fails_at_the_end(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise TrainingError("evaluation failed")
        return real_evaluate(*args, **kwargs)

    real_evaluate = train_module.evaluate
    monkeypatch.setattr(train_module, "evaluate", eval_that_fails_at_the_end)
    kept = tmp_path / "kept"
    with pytest.raises(TrainingError, match="evaluation failed"):  # after its step-20 checkpoint
        train(TrainConfig(env_steps=40, checkpoint_every=20, run_dir=str(kept), **QUICK), log=lambda m: None)
    assert latest_checkpoint(kept) == step_dir(kept, 20)


def test_a_checkpoint_without_its_manifest_does_not_count(run):
    """A save interrupted before its manifest, or a checkpoint from before checksums."""
    (step_dir(run, 40) / "manifest.json").unlink()
    said = []
    assert latest_checkpoint(run, log=said.append) == step_dir(run, 20)
    assert any("has no manifest.json" in m for m in said)
    (step_dir(run, 20) / "manifest.json").unlink()
    with pytest.raises(CheckpointError) as err:
        resolve_checkpoint(run)
    assert "no checkpoint in" in one_line(str(err.value)) and "older robot-rl" in str(err.value)
