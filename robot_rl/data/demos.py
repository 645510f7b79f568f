"""Demonstrations from an episode store into the learner's demo buffer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from robot_rl.data.recorder import PRIVILEGED_PREFIX, transitions
from robot_rl.data.store import EpisodeStore, StoreError


def check_store_fits_env(store: EpisodeStore, env, task: str) -> None:
    """The store must hold what the env's flat observations are made of, at the same sizes."""
    if store.attrs.get("task") != task:
        raise StoreError(f"{store.path} holds {store.attrs.get('task')!r} episodes, not {task!r}")
    for cam in env.cameras:
        want = tuple(env.observation_space[cam].shape[:2])
        have = store.cameras.get(cam)
        if have is None:
            raise StoreError(f"{store.path} has no {cam!r} camera; it has {sorted(store.cameras)}")
        if tuple(have) != want:
            raise StoreError(f"camera {cam!r} is {have[0]}x{have[1]} in {store.path} but {want[0]}x{want[1]} in the "
                             f"env; train with --image-size {have[0]} or record at {want[0]}")
    missing = [k for k in env.privileged_keys if PRIVILEGED_PREFIX + k not in store.fields]
    if missing:
        raise StoreError(f"{store.path} lacks the object poses {missing} that obs='state' needs; use obs='pixels'")
    state = (env.observation_space["state"].shape[0] - getattr(env, "base_action_dim", 0),)  # the base's is not stored
    if getattr(env.unwrapped, "full_state", False) and tuple(store.fields["state"][0]) != state:
        raise StoreError(f"{store.path} holds states of shape {tuple(store.fields['state'][0])}, the env's map makes "
                         f"{state}")
    action_dim = env.action_space.shape[0]
    if store.fields["action"][0] != (action_dim,):
        raise StoreError(f"{store.path} holds actions of shape {store.fields['action'][0]}, the env takes ({action_dim},)")


def load_demos(path: str | Path, env, task: str, add: Callable, demo_map: str | Path | None = None,
               label: Callable | None = None) -> dict:
    """Every transition of every episode in the store -> ``add(obs, action, reward, next_obs,
    terminated, truncated)`` with flat observations as ``env`` (a FlatObservation) makes them;
    returns the counts, and each episode's steps and success (``episode_steps``, ``episode_success``:
    the success label of its last observation, the one its final step reached).
    ``path`` may also be a LeRobotDataset v3.0 folder: imported first into a temporary store
    (``robot_rl.data.lerobot``; ``demo_map``: its map, needed unless robot-rl exported it).
    ``label``: each episode's transitions (contract observations, in order) -> the same with what
    the env's observations need beside the store's (a base policy's actions: ``BaseActionEnv.label``)."""
    from robot_rl.data.lerobot import import_lerobot, is_lerobot_dataset

    if is_lerobot_dataset(path):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="robot-rl-demos-") as tmp:
            imported = import_lerobot(path, Path(tmp) / "demos.zarr", demo_map)
            return {**load_demos(imported["out"], env, task, add, label=label), "imported_from": "lerobot"}
    store = EpisodeStore.open(path)
    if not len(store):
        raise StoreError(f"{path} holds no complete episode")
    check_store_fits_env(store, env, task)
    labels = store.read(0, store.n_frames, ["success"])["success"]
    episode_steps, episode_success = [], []
    for i in range(len(store)):
        steps = 0
        episode = transitions(store, i)
        for transition in label(episode) if label is not None else episode:
            add(env.transition(transition))
            steps += 1
        episode_steps.append(steps)
        episode_success.append(bool(labels[store.episode_range(i)[0] + steps]))  # its last observation's label
    return {"episodes": len(store), "steps": sum(episode_steps), "episode_steps": episode_steps,
            "episode_success": episode_success}
