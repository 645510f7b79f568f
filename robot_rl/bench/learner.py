"""``robot-rl bench learner``: SAC/RLPD learner throughput and acting latency, on CPU or a GPU.

Figures, all measured in one run:

* full ``SACAgent.update(batch)`` calls per second (critic + grasp head + actor + temperature
  + target update) at batch 256, state observations (PickCube state spec, 30 dims) with 2 and
  10 critics (REDQ, min over 2 targets), and pixels (front + wrist 64x64 uint8, state 20,
  DrQ encoder, random-shift augmentation inside ``update``) with 2 critics, and the same at
  128x128 (``updates_per_s_pixels128_e2``);
* the same 10-critic state update with the batched ``CriticEnsemble`` swapped for the naive
  per-critic ``LoopCriticEnsemble`` (measured interleaved with the batched one) and the speedup;
* pixels through a frozen backbone (``frozen.py``): the replay holds each frame's cached float16
  feature maps and the update trains only the head; measured interleaved with the state e2
  agent (``updates_per_s_pixels_frozen_e2``, ``pixels_frozen_over_state_e2``) and its replay
  bytes per transition (``replay_bytes_per_transition_frozen``);
* ``agent.act(obs)`` latency for one observation (p50 / p99), state and pixels;
* replay memory per transition for a pixel replay filled with 20-step episodes, against the
  raw bytes of one observation (obs and next_obs share slots, so the ratio is ~ (L+1)/L);
* LeRobot's SAC update on the same shapes (state e2 and pixels e2), when ``ROBOT_RL_LEROBOT_PYTHON``
  names the Python of a LeRobot venv: ``lerobot_sac_worker.py`` runs there (a script that imports
  nothing of robot_rl) right after our figures, on the same device and torch threads, and
  ``over_lerobot_state_e2`` / ``over_lerobot_pixels_e2`` are our rate over its;
  ``lerobot_notes`` says what differs (parameter counts). Unset or unusable: those figures are
  null and ``lerobot_notes`` says why in one line.

Replays are filled with synthesized random transitions of the right spec (the sim is not
stepped); batches are sampled from a ``MixedReplay`` into ``BatchStaging`` host tensors (pinned
on CUDA, as the learner does) before timing, so only ``update`` is timed, including its
host-to-device copy. ``device`` (auto | cpu | cuda[:N] | mps) picks where the agents live; on
CUDA each timed round ends with a device synchronisation and ``gpu_memory_mb`` is the peak
allocated memory (null elsewhere).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from robot_rl.agents.frozen import DRQ_BACKBONE, FrozenEncoder
from robot_rl.agents.networks import mlp
from robot_rl.agents.sac import GRASP_VALUES, SACAgent, SACConfig, make_adam
from robot_rl.contract import Transition
from robot_rl.envs import obs_spec, spec_env
from robot_rl.replay.buffer import BatchStaging, MixedReplay, ReplayBuffer
from robot_rl.runtime.device import resolve_device

BATCH_SIZE = 256
EPISODE_LEN = 20  # realistic PickCube expert episode length (~19 steps)
ACTION_DIM = 7
PIXEL_CAMERAS = ("front", "wrist")
PIXEL_IMAGE_SIZE = (64, 64)
PIXEL_IMAGE_SIZE_LARGE = (128, 128)
PIXEL_STATE_DIM = 20

# Per-mode settings; module-level so tests can shrink them.
QUICK = {"budget_s": 2.5, "rounds": 2, "warmup": 2, "min_calls": 2, "latency_calls": 200,
         "online_episodes": 100, "demo_episodes": 50, "batches": 4, "profile_calls": 3}
FULL = {"budget_s": 10.0, "rounds": 4, "warmup": 5, "min_calls": 3, "latency_calls": 500,
        "online_episodes": 200, "demo_episodes": 100, "batches": 8, "profile_calls": 10}
LATENCY_WARMUP = 20

# LeRobot's SAC, measured in its own venv (it needs Python >= 3.12 and torch < 2.12, so it is never a
# dependency of ours): the variable names that venv's Python (as for tests/test_interchange.py)
LEROBOT_PYTHON_ENV = "ROBOT_RL_LEROBOT_PYTHON"
LEROBOT_WORKER = Path(__file__).with_name("lerobot_sac_worker.py")
LEROBOT_KEYS = ("lerobot_updates_per_s_state_e2", "lerobot_updates_per_s_pixels_e2", "over_lerobot_state_e2",
                "over_lerobot_pixels_e2")
LEROBOT_HOW = (f"set {LEROBOT_PYTHON_ENV} to the Python of a LeRobot venv (python3.12 -m venv .venv-lerobot; "
               ".venv-lerobot/bin/pip install 'lerobot[dataset]==0.6.1'; scripts/make_lerobot_fixture.py "
               "says the same) and bench learner measures LeRobot's SAC update beside ours")


# ------------------------------------------------------------------------------ data
def random_obs(spec: dict, rng: np.random.Generator) -> dict:
    """One observation with the spec's shapes and dtypes (uint8 images, float32 state)."""
    out = {}
    for key, (shape, dtype) in spec.items():
        if np.dtype(dtype) == np.uint8:
            out[key] = rng.integers(0, 256, size=shape, dtype=np.uint8)
        else:
            out[key] = rng.standard_normal(shape).astype(dtype)
    return out


def fill(buffer: ReplayBuffer, episodes: int, rng: np.random.Generator, add=None) -> None:
    """Add ``episodes`` episodes of EPISODE_LEN random transitions (terminated or truncated at the end)."""
    add = add or buffer.add
    for _ in range(episodes):
        obs = random_obs(buffer.obs_spec, rng)
        success = bool(rng.random() < 0.5)
        for t in range(EPISODE_LEN):
            nxt = random_obs(buffer.obs_spec, rng)
            action = rng.uniform(-1, 1, ACTION_DIM).astype(np.float32)
            action[-1] = GRASP_VALUES[rng.integers(3)]
            last = t == EPISODE_LEN - 1
            add(Transition(obs, action, float(success and last), nxt, success and last, last and not success))
            obs = nxt


def make_replay(spec: dict, settings: dict, seed: int) -> MixedReplay:
    """A MixedReplay (50/50 demo/online) large enough never to wrap."""
    rng = np.random.default_rng(seed)
    slots = lambda eps: eps * (EPISODE_LEN + 1) + 1  # noqa: E731
    online = ReplayBuffer(slots(settings["online_episodes"]), spec, ACTION_DIM, seed=seed)
    demo = ReplayBuffer(slots(settings["demo_episodes"]), spec, ACTION_DIM, seed=seed + 1)
    replay = MixedReplay(online, demo, 0.5)
    fill(demo, settings["demo_episodes"], rng, add=replay.add_demo)
    fill(online, settings["online_episodes"], rng, add=replay.add)
    return replay


def sample_batches(replay: MixedReplay, count: int, device: str) -> list[dict]:
    """``count`` batches, each in its own ``BatchStaging`` slot (pinned host tensors on CUDA)."""
    online = replay.online
    staging = BatchStaging(online.obs_spec, online.action_dim, BATCH_SIZE, device, slots=count)
    return [replay.sample(BATCH_SIZE, staging=staging) for _ in range(count)]


def synchronize(device: str) -> None:
    """Wait for the device's queued work (updates are asynchronous on CUDA); a no-op elsewhere."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def make_agent(config: SACConfig, replay: MixedReplay, seed: int) -> SACAgent:
    torch.manual_seed(seed)
    agent = SACAgent(config)
    used = min(replay.demo._slots_written, replay.demo.capacity)
    agent.fit_normalizer(replay.demo._obs["state"][:used])
    return agent


class LoopCriticEnsemble(nn.Module):
    """The naive ensemble, the baseline the batched ``CriticEnsemble`` is measured against: a
    Python loop over ``n`` separate MLPs with the same layers and the same call signature."""

    def __init__(self, n: int, feature_dim: int, action_dim: int, hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        self.n = n
        self.critics = nn.ModuleList(mlp(feature_dim + action_dim, hidden, 1) for _ in range(n))

    def forward(self, features: torch.Tensor, action: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        x = torch.cat([features, action], dim=-1)
        chosen = range(self.n) if members is None else members.tolist()
        return torch.stack([self.critics[i](x).squeeze(-1) for i in chosen])


def use_loop_critic(agent: SACAgent) -> SACAgent:
    """Swap the batched critic (and its target) for the naive per-critic loop, same sizes,
    and rebuild the critic optimizer exactly as ``SACAgent.__init__`` does."""
    c = agent.config
    agent.critic = LoopCriticEnsemble(c.num_critics, agent.encoder.out_dim, c.motion_dim, c.hidden).to(c.device)
    agent.target_critic = copy.deepcopy(agent.critic).requires_grad_(False)
    critic_params = list(agent.critic.parameters()) + [p for p in agent.encoder.parameters() if p.requires_grad]
    agent.critic_opt = make_adam(critic_params, c.critic_lr, agent.device)
    return agent


# ----------------------------------------------------------------------- measurement
class UpdateTimer:
    """Counts ``agent.update`` calls and their wall time over rounds, cycling through batches."""

    def __init__(self, agent: SACAgent, batches: list[dict], warmup: int):
        self.agent, self.batches = agent, batches
        self.calls, self.seconds, self._i = 0, 0.0, 0
        for _ in range(warmup):
            self._step()
        synchronize(agent.config.device)

    def _step(self) -> None:
        self.agent.update(self.batches[self._i % len(self.batches)])
        self._i += 1

    def round(self, budget_s: float, min_calls: int = 1) -> None:
        calls, t0 = 0, time.perf_counter()
        while True:
            self._step()
            calls += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= budget_s and calls >= min_calls:
                break
        synchronize(self.agent.config.device)  # the round's updates have run, not just been queued
        elapsed = time.perf_counter() - t0
        self.calls += calls
        self.seconds += elapsed

    @property
    def rate(self) -> float:
        return self.calls / self.seconds


def measure_updates(timers: list[UpdateTimer], budget_s: float, rounds: int, min_calls: int) -> list[float]:
    """Give each timer ``budget_s`` in total, split into ``rounds`` interleaved rounds."""
    per_round = budget_s / rounds
    for _ in range(rounds):
        for timer in timers:
            timer.round(per_round, max(1, -(-min_calls // rounds)))
    return [timer.rate for timer in timers]


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def gemm_share(agent: SACAgent, batches: list[dict], calls: int) -> float:
    """Fraction of ``agent.update`` CPU time spent inside matrix multiplies (torch profiler).
    1 / share bounds what any re-arrangement of the same float32 FLOPs could gain."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(calls):
            agent.update(batches[i % len(batches)])
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    gemm = sum(e.self_cpu_time_total for e in events if e.key in GEMM_OPS)
    return gemm / total


def act_latency_ms(agent: SACAgent, obs: dict, calls: int) -> tuple[float, float]:
    """(p50, p99) of ``agent.act(obs)`` wall time per call, in milliseconds."""
    for _ in range(LATENCY_WARMUP):
        agent.act(obs)
    times = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        agent.act(obs)
        times[i] = time.perf_counter() - t0
    p50, p99 = np.percentile(times * 1e3, [50, 99])
    return float(p50), float(p99)


def frozen_config(device: str, **extra) -> SACConfig:
    """A pixel agent over a frozen backbone (random weights: the speed does not depend on them)."""
    meta = {**DRQ_BACKBONE, "cameras": list(PIXEL_CAMERAS), "image_size": list(PIXEL_IMAGE_SIZE)}
    meta["sha"] = FrozenEncoder(meta).sha
    return SACConfig(cameras=PIXEL_CAMERAS, image_size=PIXEL_IMAGE_SIZE, state_dim=PIXEL_STATE_DIM, device=device,
                     image_encoder="frozen", frozen_encoder=meta, **extra)


def frozen_and_state_rates(s: dict, device: str, log=print) -> dict:
    """Updates/s of the frozen-backbone pixel agent and of the state agent, interleaved in one
    process (so the ratio compares like with like), and the frozen replay's bytes per transition."""
    spec = state_spec()
    state_replay = make_replay(spec, s, seed=0)
    state_agent = make_agent(SACConfig(state_dim=spec["state"][0][0], device=device), state_replay, seed=0)
    torch.manual_seed(0)
    frozen = SACAgent(frozen_config(device))
    frozen_replay = make_replay(frozen.replay_spec(pixel_spec()), s, seed=5)
    frozen = make_agent(frozen.config, frozen_replay, seed=0)
    warmup = s["warmup"]
    state_rate, frozen_rate = measure_updates(
        [UpdateTimer(state_agent, sample_batches(state_replay, s["batches"], device), warmup),
         UpdateTimer(frozen, sample_batches(frozen_replay, s["batches"], device), warmup)],
        s["budget_s"], s["rounds"], s["min_calls"])
    log(f"state e2 {state_rate:.1f} updates/s, frozen pixels e2 {frozen_rate:.1f} ({frozen_rate / state_rate:.2f}x)")
    return {"updates_per_s_state_e2": round(state_rate, 2), "updates_per_s_pixels_frozen_e2": round(frozen_rate, 2),
            "pixels_frozen_over_state_e2": round(frozen_rate / state_rate, 3),
            "replay_bytes_per_transition_frozen": round(frozen_replay.online.bytes_per_transition(), 1)}


def state_spec() -> dict:
    """PickCube's state observation, read from its spaces alone (no simulator is started)."""
    return obs_spec(spec_env("PickCube", "state").observation_space)


def pixel_spec(image_size: tuple[int, int] = PIXEL_IMAGE_SIZE) -> dict:
    spec = {"state": ((PIXEL_STATE_DIM,), np.dtype(np.float32))}
    spec.update({cam: ((*image_size, 3), np.dtype(np.uint8)) for cam in PIXEL_CAMERAS})
    return spec



def network_parameters(agent: SACAgent) -> int:
    """Parameters of the networks an update trains (encoder, actor, critics, grasp head); no targets."""
    modules = [agent.encoder, agent.actor, agent.critic] + ([agent.grasp] if agent.grasp is not None else [])
    return sum(p.numel() for p in {id(p): p for m in modules for p in m.parameters()}.values())


def lerobot_timeout_s(s: dict) -> float:
    """Bound on the worker: its imports, two agents built, warm-ups and budgets, under load."""
    return 300.0 + 4 * s["budget_s"] + 10.0 * s["warmup"]


def run_lerobot_worker(python: str, s: dict, device: str, threads: int) -> tuple[dict | None, str]:
    """(the worker's figures, "") or (None, one line saying why there are none)."""
    command = [python, str(LEROBOT_WORKER), "--budget", str(s["budget_s"]), "--warmup", str(s["warmup"]),
               "--min-calls", str(s["min_calls"]), "--threads", str(threads), "--device", device]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    timeout = lerobot_timeout_s(s)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"LeRobot's SAC not measured: its worker ran past {timeout:g} s ({python})"
    except OSError as exc:
        return None, f"LeRobot's SAC not measured: {LEROBOT_PYTHON_ENV}={python} did not start ({exc.strerror or exc})"
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if isinstance(result, dict) and "error" in result:
        return None, f"LeRobot's SAC not measured: {' '.join(str(result['error']).split())}"
    if done.returncode != 0 or not isinstance(result, dict):
        said = [line for line in done.stderr.strip().splitlines() if line.strip()]
        last = " ".join(said[-1].split())[:300] if said else "no output"
        return None, (f"LeRobot's SAC not measured: its worker ({LEROBOT_PYTHON_ENV}={python}) exited "
                      f"{done.returncode} without figures: {last}")
    return result, ""


def lerobot_figures(ours: dict, s: dict, device: str, log=print) -> dict:
    """LeRobot's SAC update on our shapes, measured now by its own venv's Python, and our rates over
    its (``ours``: our ``updates_per_s_*`` figures and ``parameters_*`` counts). Each figure null
    and ``lerobot_notes`` one line saying why when it cannot be measured."""
    out: dict = dict.fromkeys(LEROBOT_KEYS)
    python = os.environ.get(LEROBOT_PYTHON_ENV, "").strip()
    if not python:
        out["lerobot_notes"] = f"LeRobot's SAC not measured ({LEROBOT_PYTHON_ENV} is unset): {LEROBOT_HOW}"
    elif not os.path.isfile(python) or not os.access(python, os.X_OK):
        out["lerobot_notes"] = (f"LeRobot's SAC not measured: {LEROBOT_PYTHON_ENV}={python} is not an executable "
                                f"file; {LEROBOT_HOW}")
    elif torch.device(device).type not in ("cpu", "cuda"):
        out["lerobot_notes"] = f"LeRobot's SAC not measured: device {device} (the comparison runs on cpu or cuda)"
    else:
        log(f"LeRobot's SAC update on the same shapes, in its venv ({python}) ...")
        theirs, why = run_lerobot_worker(python, s, device, torch.get_num_threads())
        if theirs is None:
            out["lerobot_notes"] = why
        else:
            for kind in ("state_e2", "pixels_e2"):
                rate = theirs.get(f"updates_per_s_{kind}")
                if rate:
                    out[f"lerobot_updates_per_s_{kind}"] = round(rate, 3)
                    out[f"over_lerobot_{kind}"] = round(ours[f"updates_per_s_{kind}"] / rate, 3)
            out["lerobot_notes"] = lerobot_differences(ours, theirs)
            log(f"LeRobot {theirs.get('lerobot')}: state e2 {theirs.get('updates_per_s_state_e2')} updates/s "
                f"(ours {out['over_lerobot_state_e2']}x), pixels e2 {theirs.get('updates_per_s_pixels_e2')} "
                f"(ours {out['over_lerobot_pixels_e2']}x)")
    if out["lerobot_updates_per_s_state_e2"] is None:
        log(out["lerobot_notes"])
    return out


def lerobot_differences(ours: dict, theirs: dict) -> str:
    """What the ratio compares: the two updates' networks (parameter counts) and their work."""
    def k(n) -> str:
        return "?" if n is None else f"{n / 1e3:.0f}k"

    return (
        f"LeRobot {theirs.get('lerobot')} (torch {theirs.get('torch')}, Python {theirs.get('python')}, "
        f"{theirs.get('torch_threads')} torch thread(s), {theirs.get('device')}), measured after ours in the same "
        "run: SACAlgorithm over GaussianActorPolicy, one RLTrainer.training_step per update (DrQ random shift "
        "of float32 images as its ReplayBuffer.sample does, eager; its preprocessor's normalisation; then "
        "critic, discrete gripper critic (num_discrete_actions=3), actor and temperature steps, each with "
        "gradient-norm clipping, and the soft target update), utd_ratio 1, 2 critics, MLPs (256, 256) with "
        f"LayerNorm and SiLU (ours ReLU); the shift and normalisation are "
        f"{theirs.get('prepare_share_state_e2')} (state) and {theirs.get('prepare_share_pixels_e2')} (pixels) "
        "of its time. Trained parameters, targets excluded: "
        f"state e2 ours {k(ours.get('parameters_state_e2'))} vs LeRobot {k(theirs.get('parameters_state_e2'))} "
        "(its state encoder, Linear to latent 256 + LayerNorm + tanh, feeds every head 256 features, ours the "
        f"normalised 30); pixels e2 ours {k(ours.get('parameters_pixels_e2'))} vs LeRobot "
        f"{k(theirs.get('parameters_pixels_e2'))} (ours one DrQ 3x3 conv stack per camera to 64 features each, "
        f"148 features with the state; its default conv stack, 7x7/5x5/3x3/3x3 stride 2, "
        f"{k(theirs.get('image_encoder_parameters_pixels_e2'))}, shared by the cameras and trained here as ours "
        f"is, then per camera a spatial embedding and Linear to 256: {theirs.get('encoder_out_dim_pixels_e2')} "
        "features). Per update ours encodes each view once (3 encoder passes, 1 backward); LeRobot encodes "
        "in every loss and has no target encoder (9 passes, 3 backward)"
    )


# ------------------------------------------------------------------------------- run
def run(quick: bool = False, log=print, device: str = "auto") -> dict:
    s = QUICK if quick else FULL
    device = resolve_device(device)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if torch.device(device).type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        figures = _run(s, log, device)
        on_cuda = torch.device(device).type == "cuda"
        figures["gpu_memory_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if on_cuda else None
        return figures
    finally:
        torch.set_num_threads(previous_threads)


def _run(s: dict, log, device: str) -> dict:
    figures: dict = {"device": device, "batch_size": BATCH_SIZE, "torch_threads": torch.get_num_threads()}
    budget, rounds, warmup, min_calls = s["budget_s"], s["rounds"], s["warmup"], s["min_calls"]

    # --- state: 2 critics, 10 critics batched vs naive loop (interleaved)
    spec = state_spec()
    state_dim = spec["state"][0][0]
    replay = make_replay(spec, s, seed=0)
    batches = sample_batches(replay, s["batches"], device)
    log(f"state replay: {len(replay.online)} online + {len(replay.demo)} demo transitions, state_dim {state_dim}")
    cfg = lambda n: SACConfig(state_dim=state_dim, num_critics=n, num_target_critics=2, device=device)  # noqa: E731
    agent_e2 = make_agent(cfg(2), replay, seed=0)
    (rate,) = measure_updates([UpdateTimer(agent_e2, batches, warmup)], budget, rounds, min_calls)
    figures["updates_per_s_state_e2"] = round(rate, 2)
    parameters = {"parameters_state_e2": network_parameters(agent_e2)}
    log(f"state e2: {rate:.1f} updates/s")
    agent_e10 = make_agent(cfg(10), replay, seed=0)
    naive_e10 = use_loop_critic(make_agent(cfg(10), replay, seed=0))
    timers = [UpdateTimer(agent_e10, batches, warmup), UpdateTimer(naive_e10, batches, warmup)]
    batched, naive = measure_updates(timers, budget, rounds, min_calls)
    figures["updates_per_s_state_e10"] = round(batched, 2)
    figures["naive_updates_per_s_state_e10"] = round(naive, 2)
    figures["ensemble_speedup_e10"] = round(batched / naive, 3)
    log(f"state e10: {batched:.1f} updates/s batched, {naive:.1f} naive loop ({batched / naive:.2f}x)")
    share = gemm_share(naive_e10, batches, s["profile_calls"])
    figures["naive_e10_gemm_share"] = round(share, 3)
    figures["ensemble_speedup_ceiling_e10"] = round(1 / share, 2)
    log(f"naive e10: {share:.0%} of its update time is GEMM; same-FLOP ceiling {1 / share:.2f}x")
    state_obs = random_obs(spec, np.random.default_rng(1))
    p50, p99 = act_latency_ms(agent_e2, state_obs, s["latency_calls"])
    figures["actor_latency_ms_p50_state"], figures["actor_latency_ms_p99_state"] = round(p50, 4), round(p99, 4)
    log(f"state act latency: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    del agent_e10, naive_e10, timers, batches, replay

    # --- pixels through a frozen backbone (cached features), interleaved with state e2 again
    both = frozen_and_state_rates(s, device, log)
    figures["updates_per_s_pixels_frozen_e2"] = both["updates_per_s_pixels_frozen_e2"]
    figures["pixels_frozen_over_state_e2"] = both["pixels_frozen_over_state_e2"]
    figures["replay_bytes_per_transition_frozen"] = both["replay_bytes_per_transition_frozen"]

    # --- pixels: 2 critics, 2 cameras at 128x128, then at 64x64
    large = make_replay(pixel_spec(PIXEL_IMAGE_SIZE_LARGE), s, seed=4)
    config = SACConfig(cameras=PIXEL_CAMERAS, image_size=PIXEL_IMAGE_SIZE_LARGE, state_dim=PIXEL_STATE_DIM,
                       device=device)
    timer = UpdateTimer(make_agent(config, large, seed=0), sample_batches(large, s["batches"], device),
                        max(1, warmup // 2))
    (rate,) = measure_updates([timer], budget, rounds, min_calls)
    figures["updates_per_s_pixels128_e2"] = round(rate, 3)
    log(f"pixels 128x128 e2: {rate:.2f} updates/s")
    del large, timer

    spec = pixel_spec()
    replay = make_replay(spec, s, seed=2)
    batches = sample_batches(replay, s["batches"], device)
    log(f"pixel replay: {len(replay.online)} online + {len(replay.demo)} demo transitions")
    config = SACConfig(cameras=PIXEL_CAMERAS, image_size=PIXEL_IMAGE_SIZE, state_dim=PIXEL_STATE_DIM, device=device)
    agent_px = make_agent(config, replay, seed=0)
    parameters["parameters_pixels_e2"] = network_parameters(agent_px)
    (rate,) = measure_updates([UpdateTimer(agent_px, batches, max(1, warmup // 2))], budget, rounds, min_calls)
    figures["updates_per_s_pixels_e2"] = round(rate, 3)
    log(f"pixels e2: {rate:.2f} updates/s")
    pixel_obs = random_obs(spec, np.random.default_rng(3))
    p50, p99 = act_latency_ms(agent_px, pixel_obs, s["latency_calls"])
    figures["actor_latency_ms_p50_pixels"], figures["actor_latency_ms_p99_pixels"] = round(p50, 4), round(p99, 4)
    log(f"pixels act latency: p50 {p50:.3f} ms, p99 {p99:.3f} ms")

    # --- replay memory: the pixel online buffer holds only complete 20-step episodes, unwrapped
    per_transition = replay.online.bytes_per_transition()
    raw = sum(np.asarray(v).nbytes for v in pixel_obs.values())
    figures["replay_bytes_per_transition"] = round(per_transition, 1)
    figures["raw_obs_bytes"] = int(raw)
    figures["replay_bytes_ratio"] = round(per_transition / raw, 4)
    log(f"pixel replay: {per_transition:.0f} bytes/transition vs {raw} raw obs bytes ({per_transition / raw:.3f}x)")

    # --- LeRobot's SAC update on the same shapes, in its own venv, now (after ours, same device and threads)
    figures.update(lerobot_figures({**figures, **parameters}, s, device, log))

    figures["notes"] = [
        f"device {device}; torch.set_num_threads(1) for comparability across machines and runs (restored "
        "afterwards); float32; Adam fused on CUDA; gpu_memory_mb: torch.cuda.max_memory_allocated over the run "
        "(null when not on CUDA)",
        f"updates/s time only SACAgent.update (host-to-device copy included; on CUDA a synchronisation ends each "
        f"round) on pre-sampled batch-{BATCH_SIZE} MixedReplay batches (50% demo) in BatchStaging host tensors "
        "(pinned on CUDA), cycled; replay sampling is not timed; replays hold synthesized random transitions "
        "of the right spec; pixels: 2 cameras at 64x64 (updates_per_s_pixels_e2) and 128x128 "
        "(updates_per_s_pixels128_e2), uint8 until on the device",
        f"each update figure: {budget:g} s wall budget after {warmup} warm-up updates; the e10 batched and naive "
        f"loop agents are measured interleaved in {rounds} rounds each",
        "pixels_frozen_over_state_e2: the frozen-backbone pixel agent (2 cameras 64x64, drq backbone frozen, "
        "features cached float16 in the replay, head + heads trained) over a state e2 agent, measured "
        "interleaved in the same rounds (that state agent's own rate is not the updates_per_s_state_e2 figure)",
        "naive = the same agent with critic and target critic replaced by LoopCriticEnsemble (same sizes, fresh "
        "weights) and the critic optimizer rebuilt over critic + encoder params as in SACAgent.__init__",
        f"act latency: time.perf_counter per agent.act(obs) call on one observation, {LATENCY_WARMUP} warm-up "
        f"calls then {s['latency_calls']} timed; stochastic action plus grasp head",
        "naive_e10_gemm_share: share of the naive e10 update's profiled CPU time in mm/addmm/bmm/baddbmm; "
        "a batched ensemble does the same float32 GEMM FLOPs, so 1/share (ensemble_speedup_ceiling_e10) bounds "
        "its speedup on this CPU even with zero overhead (batch 256 x 256 hidden is compute-bound on one core)",
        f"replay bytes: pixel ReplayBuffer.bytes_per_transition() after {EPISODE_LEN}-step episodes "
        "(obs and next_obs share slots: L+1 slots per L transitions) over the nbytes of one observation dict",
        f"lerobot_*: LeRobot's SAC update (robot_rl/bench/lerobot_sac_worker.py run by {LEROBOT_PYTHON_ENV}) on "
        "the state e2 and pixels e2 shapes, random batch-256 data, the same budget, warm-up (pixels: half) and "
        "torch threads, measured after ours (not interleaved: a load that changes between the two moves the "
        "ratio); over_lerobot_*: our updates_per_s over its; lerobot_notes: what differs, or why it is null",
    ]
    return figures
