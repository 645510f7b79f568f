"""Device selection (runtime/device.py): auto picks what is there; a device that is not there is one clear line."""

import pytest
import torch

from robot_rl.runtime.device import DeviceError, resolve_device


def test_auto_and_cpu_resolve_to_a_device_this_machine_has():
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert resolve_device("auto") == expected == resolve_device(None)
    assert resolve_device("CPU") == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_says_what_was_found():
    with pytest.raises(DeviceError, match=r"--device cuda:1: no CUDA GPU found .*this machine has: cpu"):
        resolve_device("cuda:1")


def test_a_name_that_is_no_device_lists_the_choices():
    with pytest.raises(DeviceError, match=r"'gpu0': not a device; use auto, cpu, cuda, cuda:N or mps"):
        resolve_device("gpu0")
