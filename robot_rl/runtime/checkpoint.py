"""Checkpoints without pickle: agent weights and optimizer moments in safetensors, the
replay as .npz (loaded with allow_pickle=False), counters as JSON.

    <run>/checkpoints/step_000002000/agent.safetensors
                                    /replay/{online.npz, demo.npz, mixed.json}
                                    /state.json
                                    /manifest.json  (sha256 and size of every file above)
    <run>/checkpoints/latest        (text: the newest checkpoint's folder name, for people)

A checkpoint is written to ``<name>.tmp``; its ``manifest.json`` is written last, then the
folder is renamed into place. Only a folder whose manifest matches every file counts
(``verify_checkpoint``): ``latest_checkpoint`` returns the newest such one and says which
newer ones it skipped and why, so a kill mid-save, a damaged or tampered file, or NaN
weights never get loaded. Leftover ``*.tmp`` folders are removed by the next writer
(``clean_leftovers``), never by a reader, which might run beside a live save.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from robot_rl.agents.sac import SACAgent, SACConfig
from robot_rl.agents.settings import network_fields
from robot_rl.errors import DiskFullError, UserFacingError, is_disk_full
from robot_rl.replay import FeatureMismatch, MixedReplay, ReplayBuffer

OPTIMIZERS = ("critic_opt", "actor_opt", "base_opt", "alpha_opt", "grasp_opt")
MANIFEST = "manifest.json"
TMP_SUFFIX = ".tmp"


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


def read_agent_file(path: Path, weights: bool = True) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors (onto the CPU, whatever device wrote them; load_agent moves them) and the
    metadata of an ``agent.safetensors``; ``weights=False``: the metadata alone."""
    if not Path(path).is_file():
        raise CheckpointError(f"no agent weights at {path}")
    try:
        tensors = load_file(str(path), device="cpu") if weights else {}
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint file {path} is corrupt ({one_line(err)}); use an earlier checkpoint") from err
    bad = non_finite_tensor(tensors)
    if bad is not None:
        raise CheckpointError(f"checkpoint file {path} holds NaN/inf values (tensor {bad}); use an earlier checkpoint")
    return tensors, meta


def non_finite_tensor(tensors: dict[str, torch.Tensor]) -> str | None:
    """The name of the first tensor holding a NaN or an infinity, or None."""
    for name, value in tensors.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return name
    return None


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def read_agent_config(ckpt: Path) -> SACConfig:
    """The agent config a checkpoint was saved with (a checkpoint folder or its
    ``agent.safetensors``), from the file's metadata alone: no weights are read."""
    path = Path(ckpt)
    path = path / "agent.safetensors" if path.is_dir() else path
    _, meta = read_agent_file(path, weights=False)
    return _agent_config(meta, path)


def _agent_config(meta: dict[str, str], path: Path, device: str = "cpu") -> SACConfig:
    try:
        return SACConfig.from_dict({**json.loads(meta["agent_config"]), "device": device})
    except (KeyError, ValueError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path} does not load ({one_line(err)})") from err


def check_compatible(agent_config: SACConfig, env, ckpt: Path) -> None:
    """Raise CheckpointError (one line naming ``ckpt``) unless an agent of ``agent_config`` (a
    checkpoint's) reads the observations ``env`` gives: the same state size and the same cameras
    at the same image size. ``env`` serves the learner's flat observations (``FlatObservation``:
    ``{"state": float32[S], "<camera>": uint8[H, W, 3], ...}``)."""
    spaces = env.observation_space.spaces
    gives = {"state_dim": int(spaces["state"].shape[0]),
             "images": {cam: [int(n) for n in space.shape[:2]] for cam, space in spaces.items() if cam != "state"}}
    expects = {"state_dim": int(agent_config.state_dim),
               "images": {cam: [int(n) for n in agent_config.image_size] for cam in agent_config.cameras}}
    if gives != expects:
        raise CheckpointError(f"checkpoint {ckpt} expects observations {expects} but this environment gives {gives}; "
                              "use it with the task, --obs mode, cameras and image size it was trained with")


# the settings that shape the agent's networks (declared with network() in agents/settings.py; with
# whether a residual base policy exists)
NETWORK_FIELDS = network_fields(SACConfig)


def network_of(cfg: SACConfig) -> dict:
    """The settings that shape ``cfg``'s networks, as JSON values."""
    net = {f: json.loads(json.dumps(getattr(cfg, f))) for f in NETWORK_FIELDS}  # tuples and lists alike
    net["residual base policy"] = "external" if cfg.base_action_dim else cfg.residual_scale > 0
    return net


def network_differences(there: dict, here: dict, there_name: str, here_name: str) -> str:
    """``network_of`` descriptions compared: what differs, in words ("" when nothing does)."""
    return "; ".join(f"{key} {there.get(key)} in {there_name}, {value} in {here_name}" for key, value in here.items()
                     if there.get(key) != value)


def check_same_network(saved: SACConfig, wanted: SACConfig, ckpt: Path, source: str) -> None:
    """Raise CheckpointError (one line naming ``ckpt`` and ``source``) unless the checkpoint's
    agent (``saved``) has the networks an agent of ``wanted`` (the run's own config) has: a
    checkpoint copied from another run is refused, not half-loaded."""
    differ = network_differences(network_of(saved), network_of(wanted), "the checkpoint", source)
    if differ:
        raise CheckpointError(f"checkpoint {ckpt} holds another network than its run: {differ}. It is not "
                              "this run's checkpoint: use one of the run's own, or start a new run")


def check_recorded_network(saved: SACConfig, ckpt: Path) -> None:
    """Raise CheckpointError unless the agent file's networks (``saved``, its metadata) are the
    ones the checkpoint's ``state.json`` recorded when it was written (checkpoints from before
    that record pass)."""
    recorded = read_state(ckpt).get("network")
    if recorded is None:
        return
    differ = network_differences(network_of(saved), recorded, "agent.safetensors", "state.json")
    if differ:
        raise CheckpointError(f"checkpoint {ckpt} holds another network than its run wrote there: {differ}. "
                              "Its agent.safetensors is not this run's: use one of the run's own checkpoints")


def check_same_encoder(saved: SACConfig, wanted: SACConfig, ckpt: Path) -> None:
    """Raise CheckpointError (one line naming ``ckpt``) unless the checkpoint's agent (``saved``)
    reads what an agent of ``wanted`` reads: images, or the features of the same frozen encoder
    (backbone, image size and weights)."""
    def describe(cfg: SACConfig) -> str:
        meta = cfg.frozen_encoder if cfg.image_encoder == "frozen" else None
        if not meta:
            return f"a trainable {cfg.image_encoder} encoder" if cfg.cameras else "no cameras"
        h, w = meta["image_size"]
        return f"a frozen {meta['backbone']} encoder on {h}x{w} frames (sha {meta['sha'][:12]})"

    if describe(saved) != describe(wanted):
        raise CheckpointError(f"checkpoint {ckpt} was trained with {describe(saved)}, not {describe(wanted)}: "
                              "use it with its own encoder (or start a new run)")


# optimizer options that follow the device, not the checkpoint (fused Adam on CUDA, plain on a CPU)
DEVICE_OPTIONS = ("fused", "foreach", "capturable")


def load_agent(path: Path, with_optimizers: bool = True, device: str = "cpu", config: SACConfig | None = None,
               source: str = "the run's config") -> SACAgent:
    """Rebuild an agent from ``agent.safetensors`` on ``device`` (a resolved name:
    ``runtime.device.resolve_device``), whatever device it was saved from: the tensors are read
    onto the CPU, then copied onto the agent's device; the optimizers keep their own device
    options (``DEVICE_OPTIONS``). The agent is built from ``config`` (the run's own, the one the
    actor builds its policy from) once the checkpoint's networks are checked to be that config's
    (``source`` names it in the error), else from the file's metadata."""
    tensors, meta = read_agent_file(path)
    saved = _agent_config(meta, path, device)
    if config is not None:
        check_same_network(saved, config, path.parent, source)
        config = dataclasses.replace(config, device=device)
    else:
        config = saved
    try:
        config.pretrained_path = None  # the backbone's weights are in the checkpoint itself
        config.frozen_encoder_path = None  # so are a frozen encoder's
        agent = SACAgent(config)
        agent.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
        agent.num_updates = int(meta.get("num_updates", 0))
        if with_optimizers:
            for name in OPTIMIZERS:
                opt = getattr(agent, name)
                if opt is None:
                    continue
                groups = json.loads(meta[f"{name}.param_groups"])
                for group, own in zip(groups, opt.param_groups):
                    group.update({k: own[k] for k in DEVICE_OPTIONS if k in own})
                state: dict = {}
                prefix = f"{name}."
                for key, value in tensors.items():
                    if key.startswith(prefix):
                        idx, field = key[len(prefix):].split(".", 1)
                        state.setdefault(int(idx), {})[field] = value
                opt.load_state_dict({"state": state, "param_groups": groups})
    except (KeyError, ValueError, RuntimeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"checkpoint {path} does not load ({one_line(err)})") from err
    return agent


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """Record the sha256 and size of every file in ``folder`` (written last, atomically)."""
    folder = Path(folder)
    files = {p.relative_to(folder).as_posix(): {"sha256": _sha256(p), "bytes": p.stat().st_size}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    tmp = folder / f"{MANIFEST}{TMP_SUFFIX}"
    with open(tmp, "w") as f:
        json.dump({"saved_at": time.time(), "files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)


def clean_leftovers(run_dir: Path) -> list[Path]:
    """Remove what an interrupted save left in ``<run>/checkpoints`` (``*.tmp``); returns them.
    Only the process that writes the run's checkpoints may call this."""
    root = Path(run_dir) / "checkpoints"
    leftovers = sorted(root.glob(f"*{TMP_SUFFIX}")) if root.is_dir() else []
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return leftovers


def write_checkpoint(run_dir: Path, name: str, agent: SACAgent, replay: MixedReplay | None, state: dict) -> Path:
    root = Path(run_dir) / "checkpoints"
    clean_leftovers(run_dir)
    tmp, final = root / f"{name}{TMP_SUFFIX}", root / name
    try:
        tmp.mkdir(parents=True)
        save_agent(agent, tmp / "agent.safetensors")
        if replay is not None:
            replay.save(tmp / "replay")
        # the networks once more, beside the weights: an agent file swapped in from another run disagrees
        (tmp / "state.json").write_text(json.dumps({**state, "network": network_of(agent.config)}, indent=1))
        write_manifest(tmp)
    except OSError as e:
        if not is_disk_full(e):
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # the half-written folder, not a checkpoint: gone
        raise DiskFullError(f"disk full: checkpoint {final} was not written ({e.strerror}); the run's earlier "
                            f"checkpoints are intact: free space, then robot-rl train --resume {run_dir}") from e
    replaced = root / f"{name}.old{TMP_SUFFIX}"  # a checkpoint of the same name is swapped out, not deleted first
    if final.exists():
        os.replace(final, replaced)
    os.replace(tmp, final)
    shutil.rmtree(replaced, ignore_errors=True)
    latest_tmp = root / f"latest{TMP_SUFFIX}"
    latest_tmp.write_text(name)
    os.replace(latest_tmp, root / "latest")
    return final


def verify_checkpoint(ckpt: Path) -> None:
    """Raise CheckpointError (one line naming the file) unless every file of the checkpoint
    matches its manifest and the weights are finite."""
    ckpt = Path(ckpt)
    manifest_path = ckpt / MANIFEST
    if ckpt.name.endswith(TMP_SUFFIX):
        raise CheckpointError(f"{ckpt} is an unfinished save (a {TMP_SUFFIX} folder); use a complete checkpoint")
    if not manifest_path.is_file():
        raise CheckpointError(f"checkpoint {ckpt} has no {MANIFEST}: it is incomplete (its save was interrupted) "
                              "or was written by an older robot-rl; use a complete checkpoint")
    try:
        files = json.loads(manifest_path.read_text())["files"]
        listed = {rel: (int(want["bytes"]), str(want["sha256"])) for rel, want in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        listed = {}
    inside = all(not Path(rel).is_absolute() and ".." not in Path(rel).parts for rel in listed)
    if not inside or "agent.safetensors" not in listed or "state.json" not in listed:
        raise CheckpointError(f"checkpoint file {manifest_path} is corrupt; use an earlier checkpoint")
    for rel, (size, sha256) in listed.items():
        path = ckpt / rel
        if not path.is_file():
            raise CheckpointError(f"checkpoint file {path} is missing (listed in {MANIFEST}); use an earlier checkpoint")
        if path.stat().st_size != size or _sha256(path) != sha256:
            nan = _nan_note(path) if rel == "agent.safetensors" else ""
            raise CheckpointError(f"checkpoint file {path} is corrupt: it changed after it was saved "
                                  f"(sha256 differs from {MANIFEST}){nan}; use an earlier checkpoint")
    read_agent_file(ckpt / "agent.safetensors")  # weights saved with NaN/inf in them


def _nan_note(path: Path) -> str:
    try:
        bad = non_finite_tensor(load_file(str(path)))
    except (SafetensorError, OSError, ValueError):
        return ""
    return f" and holds NaN/inf values (tensor {bad})" if bad else ""


def checkpoints_root(path: Path) -> Path:
    """``<run>/checkpoints`` for a run folder; the folder itself for a checkpoints folder."""
    path = Path(path)
    if not (path / "checkpoints").is_dir() and (path.name == "checkpoints" or (path / "latest").is_file()):
        return path
    return path / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoint folders of a run, oldest first by the time in their manifest (the folder's
    time without one); not yet verified. ``*.tmp`` leftovers never count."""
    root = checkpoints_root(run_dir)
    found = []
    for path in root.iterdir() if root.is_dir() else ():
        if path.is_dir() and not path.name.endswith(TMP_SUFFIX) and any(
                (path / name).is_file() for name in (MANIFEST, "agent.safetensors")):
            try:
                saved_at = float(json.loads((path / MANIFEST).read_text())["saved_at"])
            except (OSError, ValueError, KeyError, TypeError):
                saved_at = path.stat().st_mtime  # verification refuses it, saying why
            found.append((saved_at, path.name, path))
    return [p for _, _, p in sorted(found)]


def _newest_verified(run_dir: Path) -> tuple[Path | None, list[CheckpointError]]:
    """The newest checkpoint that verifies, and why each newer one did not."""
    failures = []
    for ckpt in reversed(list_checkpoints(run_dir)):
        try:
            verify_checkpoint(ckpt)
            return ckpt, failures
        except CheckpointError as err:
            failures.append(err)
    return None, failures


def _stderr(message: str) -> None:
    print(f"robot-rl: warning: {message}", file=sys.stderr, flush=True)


def latest_checkpoint(run_dir: Path, log=_stderr) -> Path | None:
    """The newest checkpoint of a run (or checkpoints) folder that verifies, or None. When
    newer ones fail verification, ``log`` is told each reason and which one is used instead."""
    ckpt, failures = _newest_verified(run_dir)
    _report_fallback(ckpt, failures, log)
    return ckpt


def _report_fallback(ckpt: Path | None, failures: list[CheckpointError], log) -> None:
    for err in failures:
        log(f"skipping a checkpoint that does not verify: {err}")
    if ckpt is not None and failures:
        log(f"using {ckpt}, the newest checkpoint that verifies")


def resolve_checkpoint(path: Path, log=_stderr) -> Path:
    """A checkpoint folder (verified), or a run folder / checkpoints folder: its newest
    checkpoint that verifies (saying so when it skipped newer ones)."""
    path = Path(path)
    if (path / "agent.safetensors").exists() or (path / MANIFEST).exists() or path.name.endswith(TMP_SUFFIX):
        verify_checkpoint(path)
        return path
    ckpt, failures = _newest_verified(path)
    if ckpt is None and failures:
        raise CheckpointError(f"no checkpoint in {checkpoints_root(path)} verifies; the newest: {failures[0]}")
    if ckpt is None:
        raise CheckpointError(f"no checkpoint at {path} (expected a checkpoint folder or a run folder with checkpoints)")
    _report_fallback(ckpt, failures, log)
    return ckpt


def read_state(ckpt: Path) -> dict:
    try:
        return json.loads((Path(ckpt) / "state.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"checkpoint {ckpt} has no readable state.json ({one_line(err)})") from err


def load_replay(ckpt: Path, features: str | None = None, encode=None) -> MixedReplay:
    """Both replay buffers of a checkpoint; a damaged file is named in one line, and so is one
    whose camera keys hold another frozen encoder's features than ``features`` (a sha; None: images).
    ``encode``: what turns incoming frames into those features (``MixedReplay``'s)."""
    folder = Path(ckpt) / "replay"
    try:
        demo_fraction = json.loads((folder / "mixed.json").read_text())["demo_fraction"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"replay file {folder / 'mixed.json'} is corrupt ({one_line(err)}); "
                              "use an earlier checkpoint") from err
    buffers = []
    for name in ("online.npz", "demo.npz"):
        try:
            buffers.append(ReplayBuffer.load(folder / name, features))
        except FeatureMismatch as err:
            raise CheckpointError(str(err)) from err
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            raise CheckpointError(f"replay file {folder / name} is corrupt ({one_line(err)}); "
                                  "use an earlier checkpoint") from err
    return MixedReplay(*buffers, demo_fraction, encode=encode)
