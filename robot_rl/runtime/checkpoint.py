"""Checkpoints without pickle: agent weights and optimizer moments in safetensors, the
replay as .npz (loaded with allow_pickle=False), counters as JSON.

    <run>/checkpoints/step_000002000/agent.safetensors
                                    /replay/{online.npz, demo.npz, mixed.json}
                                    /state.json
    <run>/checkpoints/latest        (text: the newest complete checkpoint's folder name)

A checkpoint is written to ``<name>.tmp`` and renamed into place when complete, and
``latest`` is replaced atomically afterwards, so a crash mid-save leaves the previous one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from robot_rl.agents.sac import SACAgent, SACConfig
from robot_rl.errors import UserFacingError
from robot_rl.replay import MixedReplay

OPTIMIZERS = ("critic_opt", "actor_opt", "base_opt", "alpha_opt", "grasp_opt")


class CheckpointError(UserFacingError):
    """A checkpoint that is missing, corrupt or does not fit the environment."""


def agent_tensors(agent: SACAgent) -> dict[str, torch.Tensor]:
    """Every module weight plus the Adam moments, flat, for safetensors."""
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in agent.state_dict().items()}
    for name in OPTIMIZERS:
        opt = getattr(agent, name)
        if opt is None:
            continue
        for idx, state in opt.state_dict()["state"].items():
            for key, value in state.items():
                tensors[f"{name}.{idx}.{key}"] = torch.as_tensor(value).detach().clone().contiguous()
    return tensors


def save_agent(agent: SACAgent, path: Path, extra_meta: dict | None = None) -> None:
    meta = {"agent_config": agent.config.to_json(), "num_updates": str(agent.num_updates)}
    for name in OPTIMIZERS:
        opt = getattr(agent, name)
        if opt is not None:
            meta[f"{name}.param_groups"] = json.dumps(opt.state_dict()["param_groups"])
    for k, v in (extra_meta or {}).items():
        meta[k] = json.dumps(v)
    save_file(agent_tensors(agent), str(path), metadata=meta)


def read_agent_file(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    if not Path(path).is_file():
        raise CheckpointError(f"no agent weights at {path}")
    try:
        tensors = load_file(str(path))
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint file {path} is corrupt ({err}); use an earlier checkpoint") from err
    return tensors, meta


def load_agent(path: Path, with_optimizers: bool = True, device: str = "cpu") -> SACAgent:
    """Rebuild an agent from ``agent.safetensors`` (config from its metadata)."""
    tensors, meta = read_agent_file(path)
    try:
        config = SACConfig.from_dict({**json.loads(meta["agent_config"]), "device": device})
        config.pretrained_path = None  # the backbone's weights are in the checkpoint itself
        agent = SACAgent(config)
        agent.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
        agent.num_updates = int(meta.get("num_updates", 0))
        if with_optimizers:
            for name in OPTIMIZERS:
                opt = getattr(agent, name)
                if opt is None:
                    continue
                groups = json.loads(meta[f"{name}.param_groups"])
                state: dict = {}
                prefix = f"{name}."
                for key, value in tensors.items():
                    if key.startswith(prefix):
                        idx, field = key[len(prefix):].split(".", 1)
                        state.setdefault(int(idx), {})[field] = value
                opt.load_state_dict({"state": state, "param_groups": groups})
    except (KeyError, ValueError, RuntimeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"checkpoint {path} does not load ({err})") from err
    return agent


def write_checkpoint(run_dir: Path, name: str, agent: SACAgent, replay: MixedReplay | None, state: dict) -> Path:
    root = Path(run_dir) / "checkpoints"
    tmp, final = root / f"{name}.tmp", root / name
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_agent(agent, tmp / "agent.safetensors")
    if replay is not None:
        replay.save(tmp / "replay")
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    latest_tmp = root / "latest.tmp"
    latest_tmp.write_text(name)
    os.replace(latest_tmp, root / "latest")
    return final


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint folder, or a run folder / checkpoints folder (-> its latest checkpoint)."""
    path = Path(path)
    if (path / "agent.safetensors").exists():
        return path
    for root in (path / "checkpoints", path):
        latest = root / "latest"
        if latest.is_file():
            ckpt = root / latest.read_text().strip()
            if not (ckpt / "agent.safetensors").exists():
                raise CheckpointError(f"{latest} points at {ckpt}, which is incomplete")
            return ckpt
    raise CheckpointError(f"no checkpoint at {path} (expected a checkpoint folder or a run folder with checkpoints/latest)")


def read_state(ckpt: Path) -> dict:
    try:
        return json.loads((Path(ckpt) / "state.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"checkpoint {ckpt} has no readable state.json ({err})") from err


def load_replay(ckpt: Path) -> MixedReplay:
    try:
        return MixedReplay.load(Path(ckpt) / "replay")
    except (OSError, ValueError, KeyError) as err:
        raise CheckpointError(f"replay in {ckpt} is corrupt ({err})") from err
