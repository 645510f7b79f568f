"""``robot-rl bench faults``: what a crash or a corrupt file costs.

Kill loops (SIGKILL at random moments, each process its own):

* ``record``: the scripted expert records into a new store; after each kill every episode the
  process reported committed must read back bit-identical to an uninterrupted reference run,
  and the store must open for appending.
* ``data merge``: killed mid-way, the output is either absent or complete (never a store that
  looks finished with part of the episodes); the inputs are untouched; a rerun succeeds.
* ``train`` (PickCube, state, small): killed at a random env step, resumed with ``--resume``;
  the env steps lost are the steps done before the kill that the newest verified checkpoint
  does not hold (the actor's progress lines say where it was, to 100 steps: a lower bound by
  at most 100). The full run keeps train's default checkpoint interval.
* the ROS learner node (checkpointing every half second): killed at random moments, some of
  them during a save, then started again; a restart counts as ok when the node comes up from
  its newest verified checkpoint and publishes weights.

Injected corruptions (``corruptions.py``), each on a fresh copy: an episode store's index (one entry below its
neighbours, an emptied index chunk), a deleted image shard, garbled image and numeric chunks,
a garbled array ``zarr.json``, an image shard copied over another's place, a store attribute of
the wrong type, one camera's shard swapped with another's (read by a reader of that camera
alone), an older ``meta/`` copied over newer data; a checkpoint's weights overwritten, a NaN in
its weights, a truncated replay file, a save cut short (a leftover ``.tmp`` folder), each on a copy
of a ``train`` run the kill loop resumed to its end; a full disk
(ENOSPC injected) during an append and during a checkpoint save; an env that hangs in a worker
(``--env-timeout-s``) and Ctrl-C to a worker run's process group. Each counts as detected when
it gives an error naming the damaged file (or, for a cut-short save, is passed over for the
newest complete checkpoint; for a full disk, the error says so, nothing committed is lost and
the store appends afterwards; for the older index, ``data check`` lists the episodes it does not,
an append refuses and ``--repair`` restores them; for the env, the run stops in one line with a
checkpoint a resume goes on from: the quick run verifies it, the full run resumes).

Figures: ``kills``, ``committed_episodes_lost`` (must be 0), ``partial_outputs`` (must be 0),
``env_steps_lost_per_crash_median`` / ``_max``, ``corruptions_injected``,
``corruptions_detected`` (must equal), ``learner_restarts_ok`` (of ``learner_restarts``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from robot_rl import bench

# train: the full run keeps train's default checkpoint interval (2,000 env steps or 5 minutes)
FULL = {"record_kills": 12, "merge_kills": 8, "train_kills": 6, "learner_kills": 6, "record_episodes": 8,
        "merge_episodes": 40, "train_steps": 4000, "checkpoint_every": 2000}
QUICK = {"record_kills": 3, "merge_kills": 2, "train_kills": 2, "learner_kills": 2, "record_episodes": 4,
         "merge_episodes": 40, "train_steps": 1000, "checkpoint_every": 300}
CLI = [sys.executable, "-m", "robot_rl.commands.cli"]


# --------------------------------------------------------------------------- processes
class Child:
    """A subprocess whose output lines are collected by a thread; ``wait_for`` blocks until a
    line matches (an event, not a sleep), ``kill`` is SIGKILL."""

    def __init__(self, args: list[str], env: dict | None = None, cwd: str | None = None, group: bool = False):
        # group: its own process group, as a command started in a terminal (Ctrl-C reaches all of it)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env, cwd=cwd, start_new_session=group)
        self.lines: list[str] = []
        self._new = threading.Condition()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            with self._new:
                self.lines.append(line.rstrip("\n"))
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def wait_for(self, predicate, count: int = 1, timeout: float = 300.0) -> bool:
        """True once ``count`` lines satisfy ``predicate``; False if the process ended first."""
        deadline = time.monotonic() + timeout
        with self._new:
            while sum(1 for line in self.lines if predicate(line)) < count:
                if self.proc.poll() is not None and not self._reader.is_alive():
                    return False
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.proc.args[3:5]}: no such line after {timeout:.0f} s")
                self._new.wait(0.5)
        return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(10)

    def finish(self, timeout: float = 600.0) -> int:
        self.proc.wait(timeout)
        self._reader.join(10)
        return self.proc.returncode

    def output(self) -> str:
        return "\n".join(self.lines)


def pause(rng: random.Random, most_s: float) -> None:
    """A random moment to kill at (what the benchmark is about, so a wait on the clock)."""
    threading.Event().wait(rng.uniform(0.0, most_s))


def episodes_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- record
def record_loop(work: Path, n_kills: int, episodes: int, rng: random.Random, log) -> dict:
    from robot_rl.commands.record import record_rollouts
    from robot_rl.data.store import EpisodeStore

    reference = work / "record-reference.zarr"
    record_rollouts(reference, "PickCube", episodes, noise=0.1, seed=0)
    ref = EpisodeStore.open(reference)
    lost = reported_total = appendable = 0
    for k in range(n_kills):
        out = work / f"record-{k}.zarr"
        child = Child(CLI + ["record", "--task", "PickCube", "--episodes", str(episodes), "--seed", "0",
                             "--noise", "0.1", "--out", str(out)])
        committed = lambda line: line.startswith("record: episode")  # noqa: E731
        child.wait_for(committed, rng.randrange(0, episodes))
        pause(rng, 0.5)
        child.kill()
        reported = [int(line.split()[2]) for line in child.lines if committed(line)]
        reported_total += len(reported)
        if not out.exists():
            lost += len(reported)
            continue
        try:
            store = EpisodeStore.open(out, mode="a")  # repairs a cut-off episode, never a committed one
            appendable += 1
            lost += sum(1 for i in reported if i >= len(store) or not episodes_equal(store[i], ref[i]))
        except Exception as err:  # noqa: BLE001 - a store that does not open has lost what it held
            log(f"record kill {k}: the store does not open ({err})")
            lost += len(reported)
    return {"record_kills": n_kills, "record_episodes_reported": reported_total, "record_episodes_lost": lost,
            "record_stores_appendable": appendable}


# --------------------------------------------------------------------------- merge
def synthetic_store(path: Path, episodes: int, seed: int, image: int = 32):
    """A store of random episodes with two small cameras (fast to make, real chunks)."""
    from robot_rl.data.store import EpisodeStore

    fields = {"state": ((12,), np.float32), "action": ((7,), np.float32), "front": ((image, image, 3), np.uint8),
              "wrist": ((image, image, 3), np.uint8)}
    store = EpisodeStore.create(path, fields, task="PickCube", robot="panda", control_hz=10,
                                cameras={"front": (image, image), "wrist": (image, image)})
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        n = int(rng.integers(8, 30))
        store.add_episode({
            "state": rng.normal(size=(n, 12)).astype(np.float32),
            "action": rng.uniform(-1, 1, (n, 7)).astype(np.float32),
            "front": rng.integers(0, 256, (n, image, image, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 256, (n, image, image, 3), dtype=np.uint8),
            "reward": rng.normal(size=n).astype(np.float32), "terminated": np.arange(n) == n - 2,
            "truncated": np.zeros(n, bool), "is_intervention": rng.random(n) < 0.2, "success": rng.random(n) < 0.2,
            "has_action": np.arange(n) < n - 1, "timestamp": np.arange(n) * 0.1,
        })
    return store


def merge_loop(work: Path, n_kills: int, episodes: int, rng: random.Random, log) -> dict:
    from robot_rl.data.store import EpisodeStore

    inputs = [work / f"merge-in-{i}.zarr" for i in range(3)]
    for i, path in enumerate(inputs):
        synthetic_store(path, episodes, seed=i)
    expected = [ep for path in inputs for ep in EpisodeStore.open(path)]
    t0 = time.monotonic()
    reference = Child(CLI + ["data", "merge", *map(str, inputs), "--out", str(work / "merge-reference.zarr")])
    if reference.finish() != 0:
        raise RuntimeError(f"the reference merge failed:\n{reference.output()}")
    merge_s = time.monotonic() - t0
    partial = lost = reruns_ok = finished = 0
    for k in range(n_kills):
        out = work / f"merge-{k}.zarr"
        child = Child(CLI + ["data", "merge", *map(str, inputs), "--out", str(out)])
        pause(rng, 0.8 * merge_s)  # mostly mid-way; a merge that finished first must be whole
        child.kill()
        lost += sum(max(0, episodes - len(EpisodeStore.open(path))) for path in inputs)  # inputs: read only
        if out.exists():
            try:
                store = EpisodeStore.open(out)
                complete = len(store) == len(expected) and all(episodes_equal(store[i], ep)
                                                               for i, ep in enumerate(expected))
            except Exception:  # noqa: BLE001
                complete = False
            if complete:
                finished += 1
                reruns_ok += 1  # nothing to redo
            else:
                partial += 1
                log(f"merge kill {k}: {out} exists but is not the complete merge")
            continue
        rerun = Child(CLI + ["data", "merge", *map(str, inputs), "--out", str(out)])
        if rerun.finish() == 0 and len(EpisodeStore.open(out)) == len(expected):
            reruns_ok += 1
        else:
            log(f"merge kill {k}: the rerun failed: {rerun.output()[-300:]}")
    return {"merge_kills": n_kills, "merge_partial_outputs": partial, "merge_input_episodes_lost": lost,
            "merge_reruns_ok": reruns_ok, "merge_finished_before_the_kill": finished, "merge_s": round(merge_s, 2)}


# --------------------------------------------------------------------------- train
def train_args(run: Path, steps: int, every: int) -> list[str]:
    # what is measured is what a kill costs, not what the run learns: a warm-up far shorter than the default
    return ["train", "--task", "PickCube", "--obs", "state", "--demos", "3", "--steps", str(steps),
            "--pretrain-steps", "100", "--critic-warmup-steps", "100",
            "--utd", "0.25", "--eval-every", str(steps), "--eval-episodes", "2", "--final-eval-episodes", "2",
            "--checkpoint-every", str(every), "--learner", "inline", "--run-dir", str(run), "--seed", "0"]


def step_of(line: str) -> int | None:
    """The env step of a progress line ``train: step N/M ...``."""
    if line.startswith("train: step "):
        return int(line.split()[2].split("/")[0])
    return None


def train_loop(work: Path, n_kills: int, steps: int, every: int, rng: random.Random, log) -> dict:
    from robot_rl.runtime.checkpoint import latest_checkpoint, read_state

    lost: list[int] = []
    resumes_ok = 0
    for k in range(n_kills):
        run = work / f"train-{k}"
        child = Child(CLI + train_args(run, steps, every))
        # a random progress line past the first checkpoint: the kill lands between checkpoints
        kill_at = rng.randrange(every + 100, steps - 100, 100)
        if not child.wait_for(lambda line: (step_of(line) or 0) >= kill_at, timeout=1200):
            raise RuntimeError(f"train ended before step {kill_at}:\n{child.output()[-2000:]}")
        pause(rng, 0.2)
        child.kill()
        done = max(s for s in map(step_of, child.lines) if s is not None)
        ckpt = latest_checkpoint(run)
        kept = read_state(ckpt)["env_steps"] if ckpt is not None else 0
        lost.append(done - kept)
        resume = Child(CLI + ["train", "--resume", str(run), "--no-progress"])
        if resume.finish(1800) == 0:
            summary = json.loads(resume.lines[-1])
            resumes_ok += summary["env_steps"] == steps
        else:
            log(f"train kill {k}: the resume failed:\n{resume.output()[-1000:]}")
    return {"train_kills": n_kills, "train_resumes_ok": resumes_ok, "train_env_steps_lost": lost,
            "env_steps_lost_per_crash_median": float(np.median(lost)) if lost else 0.0,
            "env_steps_lost_per_crash_max": int(max(lost, default=0))}


def finished_run(work: Path, steps: int) -> Path | None:
    """A run of the train loop that its resume took to the end (its newest checkpoint at ``steps``)."""
    from robot_rl.runtime.checkpoint import latest_checkpoint, read_state

    for run in sorted(work.glob("train-*")):
        ckpt = latest_checkpoint(run, log=lambda msg: None)
        if ckpt is not None and read_state(ckpt)["env_steps"] == steps:
            return run
    return None


# --------------------------------------------------------------------------- an env in a worker
# Someone else's env, run by train in a worker (--env-python): a point finger reaching a goal in
# 40-step episodes; ``hang_at_reset=N``: its N-th reset never returns (a simulator that stopped).
WORKER_ENV = """import threading

import gymnasium as gym
import numpy as np


class Reach(gym.Env):
    def __init__(self, hang_at_reset=0):
        self.hang_at_reset, self.resets = hang_at_reset, 0
        self.observation_space = gym.spaces.Dict({"agent": gym.spaces.Box(-1, 1, (3,), np.float32),
                                                  "goal": gym.spaces.Box(-1, 1, (2,), np.float32)})
        self.action_space = gym.spaces.Box(-1, 1, (4,), np.float32)

    def _obs(self):
        return {"agent": np.array([*self.pos, self.grip], np.float32), "goal": self.goal.astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        if self.resets == self.hang_at_reset:
            threading.Event().wait()
        self.pos, self.goal = self.np_random.uniform(-0.5, 0.5, 2), self.np_random.uniform(-0.5, 0.5, 2)
        self.grip = 0.0
        return self._obs(), {}

    def step(self, action):
        action = np.clip(np.asarray(action, np.float64), -1, 1)
        self.pos = np.clip(self.pos + 0.05 * action[:2], -1, 1)
        self.grip = float(np.clip(self.grip + action[3], 0, 1))
        success = bool(self.grip > 0.5 and np.linalg.norm(self.pos - self.goal) < 0.1)
        return self._obs(), float(success), success, False, {"is_success": success}


gym.register("bench_faults/Reach-v0", entry_point=Reach, max_episode_steps=40)
"""
WORKER_ENV_ID = "bench_faults_env:bench_faults/Reach-v0"


def worker_train_args(run: Path, steps: int, *extra: str) -> list[str]:
    return ["train", "--env", WORKER_ENV_ID, "--env-python", sys.executable, "--obs", "state", "--demos", "0",
            "--random-steps", "10", "--steps", str(steps), "--eval-every", "100000", "--eval-episodes", "1",
            "--final-eval-episodes", "1", "--checkpoint-every", "100000", "--learner", "inline", "--run-dir",
            str(run), "--seed", "0", *extra]


def resumes(run: Path, steps: int, env: dict, run_it: bool) -> bool:
    """``train --resume RUN --steps steps`` ends with a summary at ``steps`` (``run_it`` False:
    the newest checkpoint verifies, as a resume checks first; the quick run's shortcut)."""
    from robot_rl.errors import UserFacingError
    from robot_rl.runtime.checkpoint import latest_checkpoint, verify_checkpoint

    if not run_it:
        try:
            verify_checkpoint(latest_checkpoint(run))
            return True
        except (UserFacingError, TypeError):
            return False
    resume = Child(CLI + ["train", "--resume", str(run), "--steps", str(steps), "--no-progress"], env=env)
    return resume.finish(600) == 0 and json.loads(resume.lines[-1])["env_steps"] == steps


def worker_env_faults(work: Path, log, resume: bool = True) -> dict:
    """A hung env (its second reset never returns; --env-timeout-s 1) and Ctrl-C to the whole
    process group during a worker run. Each is detected when the run stops in one line (exit 2,
    naming the env and the call; exit 130) with a checkpoint that a resume goes on from
    (``resume`` False: that verifies)."""
    from robot_rl.runtime.checkpoint import latest_checkpoint, read_state

    (work / "bench_faults_env.py").write_text(WORKER_ENV)
    env = {**os.environ, "PYTHONPATH": str(work)}  # the env's module, for the run and its worker
    results = {}

    run = work / "worker-hung"
    child = Child(CLI + worker_train_args(run, 1000, "--env-kwargs", "hang_at_reset=2", "--env-timeout-s", "1"), env=env)
    rc = child.finish(600)
    errors = [line for line in child.lines if line.startswith("robot-rl:")]
    ckpt = latest_checkpoint(run) if run.exists() else None
    kept = read_state(ckpt)["env_steps"] if ckpt is not None else 0
    results["train_env_hung"] = (rc == 2 and len(errors) == 1 and "did not return within 1 s" in errors[0]
                                 and WORKER_ENV_ID in errors[0] and kept == 40 and resumes(run, 45, env, resume))
    log(f"train_env_hung: {'detected' if results['train_env_hung'] else 'MISSED'}: exit {rc}, "
        f"{errors[-1] if errors else 'no error line'}; checkpoint at env step {kept}")

    run = work / "worker-ctrl-c"
    child = Child(CLI + worker_train_args(run, 100_000), env=env, group=True)
    if not child.wait_for(lambda line: (step_of(line) or 0) >= 200, timeout=600):
        raise RuntimeError(f"the worker run ended before step 200:\n{child.output()[-2000:]}")
    os.killpg(child.proc.pid, signal.SIGINT)  # Ctrl-C in its terminal: the run and its env worker
    rc = child.finish(600)
    ckpt = latest_checkpoint(run) if run.exists() else None
    kept = read_state(ckpt)["env_steps"] if ckpt is not None else 0
    results["train_worker_ctrl_c"] = rc == 130 and kept >= 200 and resumes(run, kept + 20, env, resume)
    log(f"train_worker_ctrl_c: {'detected' if results['train_worker_ctrl_c'] else 'MISSED'}: exit {rc}, "
        f"checkpoint at env step {kept}")
    return results


# --------------------------------------------------------------------------- ROS learner node
def learner_loop(work: Path, n_kills: int, rng: random.Random, log) -> dict:
    try:
        import rclpy  # noqa: F401
    except ImportError:
        log("learner node: ROS 2 (rclpy) is not installed; skipped")
        return {"learner_restarts": 0, "learner_restarts_ok": 0, "learner_skipped": "no rclpy"}
    from robot_rl.commands.record import record_rollouts

    demos = work / "learner-demos.zarr"
    record_rollouts(demos, "PickCube", 2, noise=0.1, seed=5, keep="successes")
    run = work / "learner-run"
    params = {"task": "PickCube", "obs": "state", "cameras": "[]", "run_dir": str(run), "demo_store": str(demos),
              "pretrain_steps": 20, "critic_warmup_steps": 20, "batch_size": 16, "checkpoint_every_s": 0.5}
    args = [sys.executable, "-m", "robot_rl.drivers.learner_node", "--ros-args"]
    for key, value in params.items():
        args += ["-p", f"{key}:={value}"]
    env = {**os.environ, "ROS_DOMAIN_ID": str(bench.private_domain(150, 50)),
           "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "PYTHONUNBUFFERED": "1"}
    env.pop("ROS_LOCALHOST_ONLY", None)
    up = lambda line: "published; waiting for transitions" in line  # noqa: E731
    saved = lambda line: "checkpoint " in line and "/checkpoints/" in line  # noqa: E731
    ok = 0
    for k in range(n_kills + 1):
        node = Child(args, env=env)
        came_up = node.wait_for(up, timeout=300)
        resumed = k == 0 or any("resumed the agent from" in line for line in node.lines)
        if k > 0:
            ok += came_up and resumed
            if not (came_up and resumed):
                log(f"learner restart {k}: did not come up from its checkpoint:\n{node.output()[-1500:]}")
        if k == n_kills or not came_up:
            node.proc.terminate()
            node.finish(60)
            break
        node.wait_for(saved, count=rng.randrange(1, 4), timeout=120)
        pause(rng, 0.5)  # some kills land inside a save
        node.kill()
    return {"learner_restarts": n_kills, "learner_restarts_ok": ok}


# --------------------------------------------------------------------------- run
def run(quick: bool = False, log=print) -> dict:
    cfg = QUICK if quick else FULL
    rng = random.Random(0)
    t0 = time.monotonic()
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="robot-rl-faults-") as tmp:
        work = Path(tmp)
        log("faults 1/5: SIGKILL loop on record")
        figures.update(record_loop(work, cfg["record_kills"], cfg["record_episodes"], rng, log))
        log("faults 2/5: SIGKILL loop on data merge")
        figures.update(merge_loop(work, cfg["merge_kills"], cfg["merge_episodes"], rng, log))
        log("faults 3/5: SIGKILL loop on train (PickCube, state)")
        figures.update(train_loop(work, cfg["train_kills"], cfg["train_steps"], cfg["checkpoint_every"], rng, log))
        log("faults 4/5: SIGKILL loop on the ROS learner node")
        figures.update(learner_loop(work, cfg["learner_kills"], rng, log))
        log("faults 5/5: injected corruptions")
        from robot_rl.bench.corruptions import corruptions  # which imports this module's process helpers

        # the checkpoints damaged: a run the train loop (3/5) resumed to its end (one trained here if none did)
        figures.update(corruptions(work, rng, log, quick, good_run=finished_run(work, cfg["train_steps"])))
    kills = figures["record_kills"] + figures["merge_kills"] + figures["train_kills"] + figures["learner_restarts"]
    summary = {
        "kills": kills,
        "committed_episodes_lost": (figures["record_episodes_lost"] + figures["merge_input_episodes_lost"]
                                    + figures["older_index_episodes_lost"]),
        "partial_outputs": figures["merge_partial_outputs"],
        "env_steps_lost_per_crash_median": figures["env_steps_lost_per_crash_median"],
        "env_steps_lost_per_crash_max": figures["env_steps_lost_per_crash_max"],
        "checkpoint_every_env_steps": cfg["checkpoint_every"],
        "corruptions_injected": figures["corruptions_injected"],
        "corruptions_detected": figures["corruptions_detected"],
        "learner_restarts_ok": figures["learner_restarts_ok"],
    }
    return {**summary, **{k: v for k, v in figures.items() if k not in summary}, "wall_s": round(time.monotonic() - t0, 1)}
