"""Which torch device a command runs on: ``auto`` (CUDA when present, else Apple's MPS, else
the CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``. Asking for a device that is not there is
one clear error saying what was found."""

from __future__ import annotations

import os
import platform
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


def first_cpu() -> dict[str, str]:
    """The first processor's fields in Linux's /proc/cpuinfo (model name, cpu family, flags, ...);
    empty elsewhere."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (the AVX512-BF16 or AMX-BF16 flags of Linux's
    /proc/cpuinfo): bf16 autocast pays there; elsewhere torch emulates it, slower than float32."""
    return bool({"avx512_bf16", "amx_bf16"} & set(first_cpu().get("flags", "").split()))


def machine() -> dict:
    """What a figure was measured on: the CPU (model name, family and model numbers: its
    generation), the cores this process may use, the instruction set torch's CPU kernels run
    (AVX2, AVX512, ...), torch's version and the GPU if there is one. Two wall times compare
    only when these agree: the same 2-core job took 13 min on one EPYC and 26 on another."""
    import torch

    fields = first_cpu()  # Linux; elsewhere, platform's word for it
    cpu = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        cpu += f" (family {fields['cpu family']}, model {fields['model']})"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cores": cores, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


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
