"""Which torch device a command runs on: ``auto`` (CUDA when present, else Apple's MPS, else
the CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``. Asking for a device that is not there is
one clear error saying what was found."""

from __future__ import annotations

import re
from contextlib import contextmanager

from robot_rl.errors import UserFacingError

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"


class DeviceError(UserFacingError):
    """A device that this machine does not have, or a name that is none."""


def found_devices() -> str:
    """What this machine offers, in words (for error messages)."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found.append(f"cuda (GPUs 0-{torch.cuda.device_count() - 1})")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return ", ".join(found)


def resolve_device(spec: str | None = "auto") -> str:
    """The torch device name for ``spec``; raises DeviceError if it is not on this machine."""
    import torch

    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if spec == "cpu":
        return "cpu"
    match = re.fullmatch(r"cuda(?::(\d+))?", spec)
    if match:
        if not torch.cuda.is_available():
            raise DeviceError(f"--device {spec}: no CUDA GPU found (torch {torch.__version__}, "
                              f"CUDA build: {torch.version.cuda or 'none'}); this machine has: {found_devices()}")
        index = int(match.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise DeviceError(f"--device {spec}: there are {torch.cuda.device_count()} CUDA GPUs (0-"
                              f"{torch.cuda.device_count() - 1})")
        return spec
    if spec == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise DeviceError(f"--device mps: Apple's MPS is not available; this machine has: {found_devices()}")
        return "mps"
    raise DeviceError(f"--device {spec!r}: not a device; use {DEVICE_CHOICES}")


class OutOfDeviceMemory(UserFacingError):
    """The device ran out of memory; the message names the sizes that fill it and the flags that shrink them."""


@contextmanager
def out_of_memory_says(what: str, sizes: str, flags: str):
    """Turn ``torch.cuda.OutOfMemoryError`` raised inside into one ``OutOfDeviceMemory`` line:
    ``what`` ran out of memory, with ``sizes`` (e.g. "batch size 256, replay capacity 200000")
    and the ``flags`` that shrink them."""
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError as err:
        raise OutOfDeviceMemory(f"{what} ran out of GPU memory ({sizes}); shrink them with {flags}, "
                                "or use --device cpu") from err
