"""``robot-rl record``: episodes from the sim twin into an episode store.

The actor is the scripted expert (standing in for a human demonstrator; its noise knob gives
the imperfect and failed takes a real session has) or a trained checkpoint's policy (rollouts
to test a success classifier on, or to mine its false positives from). ``keep`` chooses which
takes are stored, each frame labelled by ``success``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.config import ARM_MAX_FORCE, RecordConfig
from robot_rl.data.recorder import EpisodeRecorder, store_fields
from robot_rl.data.store import EpisodeStore


class CheckpointPolicy:
    """A trained checkpoint acting on the sim's contract observations."""

    def __init__(self, path: str | Path, env, deterministic: bool = False, device: str = "cpu"):
        from robot_rl.envs import FlatObservation
        from robot_rl.runtime.checkpoint import check_compatible, load_agent, read_state, resolve_checkpoint

        ckpt = resolve_checkpoint(Path(path))
        trained = read_state(ckpt).get("train_config", {})
        self.agent = load_agent(ckpt / "agent.safetensors", with_optimizers=False, device=device)
        # the cameras it was trained on, whatever else is recorded
        self.flat = FlatObservation(env, trained.get("obs", "state"), tuple(self.agent.config.cameras))
        check_compatible(self.agent.config, self.flat, ckpt)
        self.deterministic = deterministic

    def reset(self) -> None:
        pass

    def __call__(self, obs: dict) -> np.ndarray:
        return self.agent.act(self.flat.observation(obs), deterministic=self.deterministic)


def record_rollouts(out: str | Path, task: str, episodes: int, on_episode=None, **settings) -> dict:
    """Record ``episodes`` episodes (kept ones) of ``task`` into a new store at ``out``; returns a
    summary. ``settings``: the other fields of ``RecordConfig`` (robot_rl/config.py, their
    defaults). ``on_episode(index, success)`` is called as each episode is committed. The actor is the scripted expert with ``noise``, or the checkpoint ``policy`` (a run folder
    or checkpoint; its stochastic policy, so that rollouts differ).

    ``hold_after_success`` keeps recording that many steps of a still arm after the task is
    solved, each frame labelled by ground truth: success classifiers need more than the one
    success frame an episode ends on (an operator would hold the success pose the same way).
    ``hold_motion`` > 0 moves the arm while it holds (translation actions drawn with that
    standard deviation, in action units): an operator's hand is never still, and frames on
    both sides of the success boundary, each labelled by ground truth, are what teach a
    classifier where the boundary is; ``hold_rise`` adds that mean upward action (the held
    object carried up through the workspace). ``hold_after_failure`` records the same motion
    after a failed take (the arm moving about without the object: negatives that look like
    the success pose from the arm's side). ``hold_release`` is the share of successful takes
    whose hold lets go of the object at a random step of its second half (the gripper opens
    and stays open): an object falling or flung through the air above the line is a success
    by ground truth that a held object never shows. ``continue_after_success`` instead lets the actor go on
    acting for that many steps, up to the episode's time limit (a rollout not cut at success:
    what the actor does next).
    Those frames come after the terminal transition, so demo loading ignores them. ``device``:
    where the ``policy`` acts (auto, cpu, cuda, cuda:N, mps)."""
    from robot_rl.envs import check_twin_contact, twin_contact
    from robot_rl.sim import make
    from robot_rl.sim.experts import make_expert

    c = RecordConfig(task=task, episodes=episodes, **settings)
    c.validate()
    if c.env:
        return record_env_rollouts(out, c, on_episode)
    policy, seed, hold_after_success, hold_release = c.policy, c.seed, c.hold_after_success, c.hold_release
    continue_after_success, hold_motion, hold_rise = c.continue_after_success, c.hold_motion, c.hold_rise
    device, contact = c.device, twin_contact(vars(c))  # the twin asked for: its reflex and force bound
    if policy is not None:
        from robot_rl.runtime.checkpoint import read_state, resolve_checkpoint
        from robot_rl.runtime.device import resolve_device

        device = resolve_device(device)  # before the sim starts and the store is created
        # neither asked for: the twin the policy practised on, its collision reflex and force bound if it had them
        contact = contact or twin_contact(read_state(resolve_checkpoint(Path(policy))).get("train_config", {}))
    check_twin_contact(task, contact)
    env = make(task, c.backend, images=c.images, image_size=tuple(c.image_size), cameras=tuple(c.cameras), **contact)
    try:
        fields, cams = store_fields(env.observation_space, env.action_space.shape[0])
        if policy is None:
            actor, source = make_expert(task, noise=c.noise, seed=seed), {"source": "scripted_expert", "expert_noise": c.noise}
        else:
            import torch

            torch.manual_seed(seed)  # the policy samples its actions
            actor, source = CheckpointPolicy(policy, env, device=device), {"source": "policy", "policy": str(policy)}
        store = EpisodeStore.create(out, fields, task=task, robot="panda", control_hz=env.limits.control_hz, cameras=cams,
                                    images=c.image_codec, backend=c.backend, **source,
                                    hold_after_success=hold_after_success, hold_after_failure=c.hold_after_failure,
                                    hold_motion=hold_motion, hold_rise=hold_rise, hold_release=hold_release,
                                    continue_after_success=continue_after_success,
                                    collision_reflex=bool(contact.get("collision_reflex", False)),
                                    arm_max_force=float(contact.get("max_force", ARM_MAX_FORCE)))
        period = 1.0 / env.limits.control_hz
        t = [0.0]
        recorder = EpisodeRecorder(store, clock=lambda: t[0])  # sim time, not wall time
        hold_rng = np.random.default_rng(seed + 1)
        resets = (spread_reset_seeds(task, c.backend, seed, c.spread_layouts) if c.spread_layouts
                  else range(seed, seed + 10 * episodes))
        kept = tries = successes = 0
        while kept < episodes and tries < min(10 * episodes, len(resets)):
            obs, _ = env.reset(seed=resets[tries])
            actor.reset()
            tries += 1
            t[0] = 0.0
            recorder.start(obs)
            steps = 0
            while True:
                steps += 1
                action = actor(obs)
                obs, reward, terminated, truncated, info = env.step(action)
                t[0] += period
                recorder.step(action, obs, reward, terminated, truncated, success=info["success"])
                if terminated or truncated:
                    break
            # a rollout that goes on stops at the episode's time limit; a held pose does not
            after = hold_after_success + min(continue_after_success, env.max_episode_steps - steps)
            release_at = (int(hold_rng.integers(hold_after_success // 2, hold_after_success))
                          if hold_release > 0 and info["success"] and hold_after_success
                          and hold_rng.random() < hold_release else None)
            for i in range(after if info["success"] else c.hold_after_failure):
                hold = np.zeros(env.action_space.shape, np.float32)  # gripper as it is
                if release_at is not None and i >= release_at:
                    hold[6] = -1.0  # open
                if continue_after_success:
                    hold = actor(obs)
                elif hold_motion > 0 or hold_rise > 0:
                    hold[:3] = np.clip(hold_rng.normal([0.0, 0.0, hold_rise], hold_motion, 3), -1, 1)
                obs, reward, terminated, truncated, hold_info = env.step(hold)
                t[0] += period
                recorder.step(hold, obs, reward, terminated, truncated, success=hold_info["success"])
            if c.keep == "all" or (c.keep == "successes") == bool(info["success"]):
                index = recorder.finish()
                kept += 1
                successes += bool(info["success"])
                if on_episode:
                    on_episode(index, bool(info["success"]))
            else:
                recorder.discard()
    finally:
        env.close()
    return {"path": str(out), "episodes": kept, "tries": tries, "successes": successes,
            "frames": int(store.n_frames), "success_rate": successes / max(kept, 1)}



def scene_layout(privileged: dict) -> np.ndarray:
    """A twin scene as numbers: each object's position and, for a pose, its yaw (the sim's
    privileged poses at reset: where the hole, the cube or the clutter is, and how the held peg
    sits in the gripper)."""
    from robot_rl.geometry import quat_to_yaw

    parts = []
    for name in sorted(privileged):
        value = np.asarray(privileged[name], np.float64).ravel()
        if value.size % 7 == 0:  # poses: x y z and a quaternion each
            for pose in value.reshape(-1, 7):
                parts += [*pose[:3], float(quat_to_yaw(pose[3:7]))]
        else:
            parts += list(value)
    return np.array(parts)


def spread_reset_seeds(task: str, backend: str, seed: int, candidates: int) -> list[int]:
    """The reset seeds ``seed .. seed + candidates - 1`` in farthest-point order: the first, then
    each next the one whose scene (``scene_layout``, each number scaled by its spread over the
    candidates) is farthest from every one taken so far. Twenty demonstrations from consecutive
    resets leave parts of the task's variation nearly empty (PegInsertHard's main job: 2 of 20 with
    a peg turn of 30 degrees or more, 5 with the hole 1 cm or more to the left, where its policies
    then needed the human about twice as often; docs/CALIBRATION.md); the first ``episodes`` of
    this order cover it evenly."""
    from robot_rl.sim import make

    env = make(task, backend)  # no cameras: the scene's poses are all it reads
    try:
        scenes = np.stack([scene_layout(env.reset(seed=seed + i)[0]["privileged"]) for i in range(candidates)])
    finally:
        env.close()
    spread = scenes.std(axis=0)
    scenes = (scenes - scenes.mean(axis=0)) / np.where(spread > 1e-9, spread, 1.0)
    order, nearest = [0], np.linalg.norm(scenes - scenes[0], axis=1)
    nearest[0] = -1.0  # taken
    while len(order) < candidates:
        nxt = int(np.argmax(nearest))
        order.append(nxt)
        nearest = np.minimum(nearest, np.linalg.norm(scenes - scenes[nxt], axis=1))
        nearest[order] = -1.0
    return [seed + i for i in order]


def record_env_rollouts(out: str | Path, c: RecordConfig, on_episode=None, device=None, clock=None) -> dict:
    """``record --env``: episodes of a Gymnasium env (through its map) into a new store, the actor
    its scripted policy (``env_expert``), a checkpoint's policy or a teleop device (``teleop``, or
    ``device``: an object with ``read()`` as ``teleop.devices`` has, paced by ``clock``, default
    real time at the env's rate; its success / failure / reset events end the episode). The store
    holds the mapped state, the cameras (``images``) and the policy's actions, as training uses them."""
    import time

    from robot_rl.contract import OPERATOR_EVENTS
    from robot_rl.foreign.env import ScriptedExpert, make_foreign_env

    if c.teleop and device is None:
        from robot_rl.teleop.devices import open_device

        device = open_device(c.teleop)
    cameras = tuple(c.cameras) if c.images else ()
    env = make_foreign_env(c, cameras, tuple(c.image_size))
    try:
        fields, cams = store_fields(env.observation_space, env.action_space.shape[0])
        if c.policy is not None:
            import torch

            from robot_rl.runtime.device import resolve_device

            torch.manual_seed(c.seed)
            actor, source = CheckpointPolicy(c.policy, env, device=resolve_device(c.device)), \
                {"source": "policy", "policy": str(c.policy)}
        elif device is not None:
            actor, source = None, {"source": "teleop", "device": c.teleop or type(device).__name__}
        else:
            actor, source = ScriptedExpert(env), {"source": "scripted_policy", "policy": c.env_expert}
        store = EpisodeStore.create(out, fields, task=c.env, robot=c.env, control_hz=env.limits.control_hz,
                                    cameras=cams, images=c.image_codec, env_map=c.env_map,
                                    env_kwargs=list(c.env_kwargs), **source)
        period = 1.0 / env.limits.control_hz
        t = [0.0]
        recorder = EpisodeRecorder(store, clock=lambda: t[0])
        kept = tries = successes = 0
        while kept < c.episodes and tries < 10 * c.episodes:
            obs, _ = env.reset(seed=c.seed + tries)
            if actor is not None:
                actor.reset()
            tries += 1
            t[0] = 0.0
            recorder.start(obs)
            outcome = None
            while True:
                if actor is not None:
                    action = actor(obs)
                else:
                    tick = (clock or time.monotonic)()
                    reading = device.read()
                    events = [e for e in reading.events if e in OPERATOR_EVENTS]
                    if any(e in ("success", "failure", "reset", "rerecord") for e in events):
                        outcome = events[0]
                        break
                    action = device_action(reading.action, env.unwrapped.map)
                obs, reward, terminated, truncated, info = env.step(action)
                t[0] += period
                recorder.step(action, obs, reward, terminated, truncated, success=info["success"],
                              is_intervention=actor is None)
                if terminated or truncated:
                    break
                if actor is None and clock is None:
                    time.sleep(max(0.0, period - (time.monotonic() - tick)))
            success = bool(info["success"]) if outcome is None else outcome == "success"
            if outcome in ("reset", "rerecord") or recorder.steps == 0:
                recorder.discard()
            elif c.keep == "all" or (c.keep == "successes") == success:
                index = recorder.finish()
                kept += 1
                successes += success
                if on_episode:
                    on_episode(index, success)
            else:
                recorder.discard()
    finally:
        env.close()
        if device is not None and hasattr(device, "close"):
            device.close()
    return {"path": str(out), "env": c.env, "episodes": kept, "tries": tries, "successes": successes,
            "frames": int(store.n_frames), "success_rate": successes / max(kept, 1),
            "success_source": env.unwrapped.success_source}


def device_action(contract_action, env_map) -> np.ndarray:
    """A teleop device's action (the contract's: translation, rotation, gripper) as a mapped env's
    policy action: the translation then the rotation fill the map's motion dimensions in order, the
    gripper the gripper's (last) when the map has one."""
    contract_action = np.asarray(contract_action, np.float32)
    out = np.zeros(env_map.action_dim, np.float32)
    n = len(env_map.motion)
    out[: min(n, 6)] = contract_action[: min(n, 6)]
    if env_map.gripper is not None:
        out[-1] = contract_action[6]
    return out
