"""The wire format of actor <-> learner messages: safetensors frames, no pickle.

Every message is one *frame*: the bytes of :func:`pack`, i.e. a safetensors blob holding
the message's arrays, with the message's JSON metadata stored as a string in the
safetensors header metadata (``__metadata__["meta"]``). The message kind is kept in that
metadata under the reserved key ``"_kind"``. Frames are built with ``safetensors`` +
``json`` only, so a ROS 2 (or socket, or file) transport can carry exactly the same bytes.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import safetensors.numpy as _st_numpy

from robot_rl.contract import Transition
from robot_rl.errors import InputError

__all__ = ["Message", "decode", "encode", "pack", "unpack", "read_kind", "split_transition", "transition_arrays"]

_META_KEY = "meta"  # key in the safetensors ``__metadata__`` holding the JSON meta
_KIND_KEY = "_kind"  # key in the JSON meta holding the message kind (frames only)
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # same limit safetensors applies
_ALLOWED_DTYPE_KINDS = "biuf"  # bool, signed int, unsigned int, float


# --------------------------------------------------------------------------------------
# pack / unpack
# --------------------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    """Make numpy/torch scalars and small arrays in ``meta`` JSON-serialisable."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return obj.detach().cpu().tolist()
    raise TypeError(f"meta value of type {type(obj).__name__} is not JSON-serialisable")


def _to_numpy(key: str, value: Any) -> np.ndarray:
    torch = sys.modules.get("torch")  # a tensor cannot exist unless torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16
            t = t.to(torch.float32)
        try:
            arr = t.numpy()
        except (TypeError, RuntimeError) as e:
            raise TypeError(f"array {key!r}: cannot convert torch tensor ({t.dtype}): {e}") from e
    else:
        arr = np.asarray(value)
    if arr.dtype.kind not in _ALLOWED_DTYPE_KINDS:
        raise TypeError(
            f"array {key!r}: unsupported dtype {arr.dtype} (use bool, int, uint or float)"
        )
    if not arr.flags.c_contiguous:  # safetensors reads raw memory: must be C-contiguous
        arr = arr.copy(order="C")
    return arr


def pack(arrays: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None) -> bytes:
    """Serialise ``arrays`` (numpy arrays / torch tensors) and ``meta`` into bytes.

    The result is a plain safetensors blob: ``meta`` (a JSON-serialisable dict; numpy
    scalars are converted) is stored as a JSON string under ``__metadata__["meta"]``.
    Torch tensors are moved to CPU (bfloat16 becomes float32); non-contiguous arrays
    are made contiguous; 0-d, empty and bool arrays are supported.  Keys must be
    non-empty strings (flatten nested dicts yourself, e.g. ``"obs/front"``).

    Raises ``TypeError``/``ValueError`` on unsupported input.
    """
    arrays = {} if arrays is None else arrays
    meta = {} if meta is None else meta
    if not isinstance(meta, Mapping):
        raise TypeError(f"meta must be a dict, got {type(meta).__name__}")
    tensors: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"array keys must be non-empty strings, got {key!r}")
        if key == "__metadata__":
            raise InputError("'__metadata__' is reserved and cannot be an array name")
        tensors[key] = _to_numpy(key, value)
    meta_json = json.dumps(dict(meta), default=_json_default, separators=(",", ":"))
    try:
        return _st_numpy.save(tensors, metadata={_META_KEY: meta_json})
    except Exception as e:  # SafetensorError derives from Exception only
        raise InputError(f"cannot pack arrays: {e}") from e


def _read_meta(data: bytes) -> dict:
    """Parse just the header of a packed blob and return its JSON meta (cheap)."""
    if len(data) < 8:
        raise InputError(f"corrupt message: {len(data)} bytes is shorter than the header size")
    (n,) = struct.unpack("<Q", data[:8])
    if n > _MAX_HEADER_BYTES or 8 + n > len(data):
        raise InputError(f"corrupt message: header length {n} does not fit in {len(data)} bytes")
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"corrupt message: bad header: {e}") from e
    if not isinstance(header, dict):
        raise InputError("corrupt message: header is not a JSON object")
    md = header.get("__metadata__") or {}
    if not isinstance(md, dict):
        raise InputError("corrupt message: bad __metadata__")
    raw = md.get(_META_KEY, "{}")
    try:
        meta = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError as e:
        raise InputError(f"corrupt message: bad meta JSON: {e}") from e
    if not isinstance(meta, dict):
        raise InputError("corrupt message: meta is not a JSON object")
    return meta


def unpack(data: bytes | bytearray | memoryview) -> tuple[dict[str, np.ndarray], dict]:
    """Inverse of :func:`pack`: ``(arrays, meta)``; arrays are fresh writable numpy arrays.

    Raises ``ValueError("corrupt message: ...")`` for anything that is not a valid blob.
    """
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise TypeError(f"unpack expects bytes, got {type(data).__name__}")
    meta = _read_meta(data)
    try:
        arrays = _st_numpy.load(data)
    except Exception as e:  # SafetensorError derives from Exception only
        raise InputError(f"corrupt message: {e}") from e
    return dict(arrays), meta


# --------------------------------------------------------------------------------------
# Messages and frames
# --------------------------------------------------------------------------------------


@dataclass
class Message:
    """One received message."""

    kind: str  # e.g. "transition", "weights", "status", "stop"
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)


def encode(kind: str, arrays: Mapping[str, Any] | None, meta: Mapping[str, Any] | None) -> bytes:
    if not isinstance(kind, str) or not kind:
        raise InputError(f"message kind must be a non-empty string, got {kind!r}")
    meta = {} if meta is None else dict(meta)
    if _KIND_KEY in meta:
        raise InputError(f"meta key {_KIND_KEY!r} is reserved by the transport")
    meta[_KIND_KEY] = kind
    return pack(arrays, meta)


def _kind(meta: dict) -> str:
    kind = meta.pop(_KIND_KEY, None)
    if not isinstance(kind, str) or not kind:
        raise InputError("corrupt message: frame has no message kind")
    return kind


def decode(data: bytes) -> Message:
    arrays, meta = unpack(data)
    kind = _kind(meta)
    return Message(kind=kind, arrays=arrays, meta=meta)


def read_kind(data: bytes) -> str:
    """A frame's message kind from its header alone (the arrays stay undecoded): what a
    transport needs to queue a frame, which is then decoded once, when it is received."""
    return _kind(_read_meta(data))


# --------------------------------------------------------------------------------------
# The transition: what the actor sends the learner for each env step ("transition", and
# "demo" for demonstrations), as one message's arrays
# --------------------------------------------------------------------------------------
def transition_arrays(t: Transition) -> dict:
    """A transition as a message's arrays: ``obs/KEY`` and ``next_obs/KEY`` per observation key,
    ``action`` (float32), ``reward`` (float32), ``terminated``, ``truncated`` and
    ``is_intervention`` (bool: the human drove)."""
    arrays = {f"obs/{k}": v for k, v in t.obs.items()}
    arrays.update({f"next_obs/{k}": v for k, v in t.next_obs.items()})
    arrays.update(action=np.asarray(t.action, np.float32), reward=np.float32(t.reward),
                  terminated=np.bool_(t.terminated), truncated=np.bool_(t.truncated),
                  is_intervention=np.bool_(t.is_intervention))
    return arrays


def split_transition(arrays: dict[str, np.ndarray]) -> Transition:
    """``transition_arrays``' inverse."""
    obs = {k[4:]: v for k, v in arrays.items() if k.startswith("obs/")}
    next_obs = {k[9:]: v for k, v in arrays.items() if k.startswith("next_obs/")}
    return Transition(obs, arrays["action"], float(arrays["reward"]), next_obs, bool(arrays["terminated"]),
                      bool(arrays["truncated"]), bool(arrays.get("is_intervention", False)))
