"""Training runs against envs that misbehave (issue 44, items 5-7): an env that hangs ends the run
in one line at its time limit (``--env-timeout-s``) with lines while it waits; a stop (SIGTERM,
Ctrl-C to the process group) while it hangs, or during any ``--env-python`` run, checkpoints and
exits 143 / 130; a run that stops after its first update keeps a resumable checkpoint; a NaN
observation is named as the env's, with its key and step; a resume to fewer steps than were done
is refused, and a round that did nothing leaves summary.json as it was.

The runs are tiny (tests/helpers/troubled_envs.py's Reach, state only, no demos, the learner
inline, one evaluation episode). Hangs are waits on an Event nothing sets, ended by a limit of
about a second; signals come from the env itself at a set step, so nothing waits on the clock."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robot_rl.commands.cli import main
from robot_rl.commands.train import TrainConfig, TrainingInterrupted, train
from robot_rl.envs import NonFiniteObservation
from robot_rl.foreign.client import EnvTimeout, LocalEnv, WorkerEnv
from robot_rl.runtime import progress
from robot_rl.runtime.checkpoint import latest_checkpoint, read_state
from tests.helpers.common import one_line_error

HELPERS = Path(__file__).parent / "helpers"
TROUBLED = "troubled_envs:robot_rl_test/Troubled-v0"
QUICK = dict(env=TROUBLED, obs="state", demos=0, random_steps=10, learner="inline", eval_every=100_000,
             eval_episodes=1, final_eval_episodes=1, batch_size=16, checkpoint_every=100_000, progress=False,
             agent={"hidden": [32, 32]})


@pytest.fixture(autouse=True)
def env_module_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))
    monkeypatch.setenv("PYTHONPATH", str(HELPERS))


def one_line(text: str) -> str:
    assert "\n" not in text.strip() and "Traceback" not in text, text
    return text


# ---------------------------------------------------------------- 5. a hung env
def test_a_hung_reset_in_process_is_one_line_at_the_limit_with_lines_while_it_waits():
    env = LocalEnv(TROUBLED, {"hang_at_reset": 1}, timeout_s=0.6)
    previous = signal.getsignal(signal.SIGALRM)
    waits = []
    env.on_wait = lambda what, waited: waits.append((what, waited))
    with pytest.raises(EnvTimeout) as err:
        env.reset(seed=0)
    message = one_line(str(err.value))
    assert TROUBLED in message and "reset did not return within 0.6 s" in message and "--env-timeout-s" in message
    assert waits and all(what == "reset" and waited < 0.6 for what, waited in waits)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) == previous
    env.close()


def test_the_env_worker_ignores_sigint_its_parent_decides():
    env = WorkerEnv(sys.executable, TROUBLED, {})
    try:
        env.reset(seed=0)
        os.kill(env.proc.pid, signal.SIGINT)  # as Ctrl-C reaches the whole process group
        env.step(np.zeros(4))  # (before: the worker died, "exit code -2")
        env.step(np.zeros(4))
        assert env.proc.poll() is None
    finally:
        env.close()


def test_a_hung_worker_ends_the_run_in_one_line_and_keeps_a_resumable_checkpoint(tmp_path, monkeypatch):
    """The env's second reset (after the first episode, 40 steps) hangs; updates began at step 10."""
    monkeypatch.setattr(progress, "EVERY_S", 0.2)  # the lines while waiting, at a pace the test sees
    run, said = tmp_path / "run", []
    cfg = TrainConfig(**QUICK, env_python=sys.executable, env_kwargs=("hang_at_reset=2",), env_timeout_s=1.0,
                      env_steps=1000, run_dir=str(run))
    with pytest.raises(EnvTimeout) as err:
        train(cfg, log=said.append)
    message = one_line(str(err.value))
    assert TROUBLED in message and "reset did not return within 1 s" in message and "worker process" in message
    waiting = [m for m in said if m.startswith("train: waiting")]
    assert waiting and f"env {TROUBLED}'s reset at env step 40 (limit 1 s)" in waiting[0], said
    assert read_state(latest_checkpoint(run))["env_steps"] == 40
    assert any(f"--resume {run}" in m for m in said)
    summary = train(None, resume=str(run), overrides={"env_steps": 45}, log=lambda m: None)
    assert summary["env_steps"] == 45 and summary["updates"] > 0


def test_lines_while_waiting_keep_the_every_15_s_promise_counting_the_loops_own_last_line():
    now, said = [0.0], []
    lines = progress.WaitLines("train", log=said.append, every_s=15, clock=lambda: now[0], last_line=lambda: 10.0)
    for t, waited, line in ((20, 5, False), (25, 10, True), (35, 20, False), (40, 25, True)):
        now[0] = t
        assert lines.tick("env X's reset at env step 7", waited, 60) == line
    assert said == ["train: waiting 10 s for env X's reset at env step 7 (limit 60 s)",
                    "train: waiting 25 s for env X's reset at env step 7 (limit 60 s)"]


@pytest.mark.parametrize("python", [None, sys.executable], ids=["in-process", "worker"])
def test_sigterm_while_the_env_hangs_checkpoints_and_stops(python, tmp_path):
    """SIGTERM arrives while the env's second reset hangs, with the limit far off: the wait is
    abandoned, a checkpoint written, and the run stops as on Ctrl-C (the CLI exits 143)."""
    run = tmp_path / "run"
    kwargs = ("hang_at_reset=2", "signal_name=SIGTERM", "signal_at_reset=2",
              f"signal_to={'self' if python is None else 'parent'}")
    cfg = TrainConfig(**QUICK, env_python=python, env_kwargs=kwargs, env_timeout_s=600.0, env_steps=1000,
                      run_dir=str(run))
    with pytest.raises(TrainingInterrupted) as err:
        train(cfg, log=lambda m: None)
    assert err.value.signum == signal.SIGTERM
    assert f"stopped by SIGTERM at env step 40; checkpoint step_000000040 saved" in one_line(str(err.value))
    assert read_state(latest_checkpoint(run))["env_steps"] == 40


@pytest.mark.integration
def test_ctrl_c_during_an_env_python_run_checkpoints_and_exits_130(tmp_path):
    """Ctrl-C reaches the whole process group, the env's worker too (here the env sends it, at
    step 5 of the first evaluation episode): the run saves a checkpoint and exits 130."""
    run = tmp_path / "run"
    args = ["train", "--env", TROUBLED, "--env-python", sys.executable, "--env-kwargs", "signal_name=SIGINT",
            "signal_to=group", "signal_at_step=5", "--obs", "state", "--demos", "0", "--steps", "100000",
            "--eval-every", "100000", "--eval-episodes", "1", "--final-eval-episodes", "1", "--learner", "inline",
            "--no-progress", "--run-dir", str(run)]
    env = {**os.environ, "PYTHONPATH": str(HELPERS), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "robot_rl.commands.cli", *args], capture_output=True, text=True,
                          env=env, timeout=300, start_new_session=True)
    assert proc.returncode == 130, proc.stderr
    (line,) = [m for m in proc.stderr.splitlines() if m.startswith("robot-rl:")]
    assert "stopped by SIGINT at env step" in line and f"--resume {run}" in line
    assert latest_checkpoint(run) is not None


# ---------------------------------------------------------------- 6. a NaN observation
def test_a_nan_observation_is_named_as_the_envs_with_its_key_and_step(tmp_path):
    cfg = TrainConfig(**QUICK, env_kwargs=("nan_at_step=3",), env_steps=1000, run_dir=str(tmp_path / "run"))
    with pytest.raises(NonFiniteObservation) as err:
        train(cfg, log=lambda m: None)
    message = one_line(str(err.value))
    assert f"env {TROUBLED} after step 3 of the episode" in message
    assert "observation 'agent' holds NaN at index [0, 1, 2]" in message and "policy never saw it" in message


def test_a_nan_in_the_twins_observation_stops_the_actor_loop_naming_key_and_step():
    import gymnasium as gym

    from robot_rl.actor import ActorLoop
    from robot_rl.envs import FlatObservation
    from robot_rl.sim.env import PandaCellEnv

    class NanAtStep(gym.Wrapper):
        """The cube's pose turns NaN at the episode's third step."""

        def reset(self, **kwargs):
            self.t = 0
            return self.env.reset(**kwargs)

        def step(self, action):
            raw, *rest = self.env.step(action)
            self.t += 1
            if self.t == 3:
                pose = raw["privileged"]["cube"]
                raw = {**raw, "privileged": {**raw["privileged"], "cube": np.full_like(pose, np.nan)}}
            return raw, *rest

    env = NanAtStep(PandaCellEnv("PickCube", "mujoco", images=False, privileged=True, max_episode_steps=10))
    flat = FlatObservation(env, "state")
    loop = ActorLoop(env, flat.observation, lambda raw, obs: np.zeros(7, np.float32))
    loop.start(seed=0)
    with pytest.raises(NonFiniteObservation) as err:
        for _ in range(5):
            loop.step()
    message = one_line(str(err.value))
    assert "the env after step 3 of its episode (actor step 3)" in message
    assert "observation 'privileged/cube' holds NaN" in message
    env.close()


# ---------------------------------------------------------------- 7. a resume that has nothing to do
def test_a_resume_below_the_runs_steps_is_refused_and_a_round_that_did_nothing_keeps_the_summary(tmp_path, capsys):
    run = tmp_path / "run"
    train(TrainConfig(**QUICK, env_steps=30, run_dir=str(run)), log=lambda m: None)
    summary = (run / "summary.json").read_bytes()
    history = (run / "config_history.jsonl").read_text()

    assert main(["train", "--resume", str(run), "--steps", "20"]) == 2
    one_line_error(capsys.readouterr().err, "--steps 20", "at env step 30 already", "nothing to do")
    assert (run / "summary.json").read_bytes() == summary and (run / "config_history.jsonl").read_text() == history

    assert main(["train", "--resume", str(run)]) == 0  # at its own 30 steps: nothing to do, nothing rewritten
    out = capsys.readouterr().out
    assert "nothing to do" in out and json.loads(out.strip().splitlines()[-1])["env_steps"] == 30
    assert (run / "summary.json").read_bytes() == summary
