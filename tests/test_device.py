"""Device selection (runtime/device.py): auto picks what is there; a device that is not there is one clear line."""

import pytest
import torch

from robot_rl.contract import Transition
from robot_rl.runtime.device import DeviceError, cpu_has_bf16, machine, resolve_device


def test_auto_and_cpu_resolve_to_a_device_this_machine_has():
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert resolve_device("auto") == expected == resolve_device(None)
    assert resolve_device("CPU") == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_says_what_was_found():
    with pytest.raises(DeviceError, match=r"--device cuda:1: no CUDA GPU found .*this machine has: cpu"):
        resolve_device("cuda:1")


def test_the_machine_a_figure_was_measured_on_names_its_cpu_cores_and_kernels():
    seen = machine()
    assert seen["cpu"] and seen["cores"] >= 1
    assert seen["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # e.g. AVX2 or AVX512
    assert seen["torch"] == torch.__version__
    assert (seen["gpu"] is None) == (not torch.cuda.is_available())


def test_bf16_units_are_read_from_the_cpus_flags(monkeypatch, tmp_path):
    import builtins

    real_open = builtins.open

    def cpuinfo_with(flags):
        info = tmp_path / "cpuinfo"
        info.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: fpu sse2 {flags}\n\n")
        monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path, *a, **k))

    cpuinfo_with("avx2 avx512f avx512_bf16")
    assert cpu_has_bf16()
    cpuinfo_with("avx2 amx_tile amx_bf16")
    assert cpu_has_bf16()
    cpuinfo_with("avx2 avx512f avx512bw")  # AVX512 without bf16: torch would emulate it
    assert not cpu_has_bf16()

    def no_cpuinfo(path, *a, **k):
        raise FileNotFoundError(path)

    monkeypatch.setattr(builtins, "open", no_cpuinfo)  # not Linux: no bf16 assumed
    assert not cpu_has_bf16()


def test_a_name_that_is_no_device_lists_the_choices():
    with pytest.raises(DeviceError, match=r"'gpu0': not a device; use auto, cpu, cuda, cuda:N or mps"):
        resolve_device("gpu0")


# ------------------------------------------------------------------ the device setting reaches the agent
import json  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from robot_rl.agent_setup import agent_config_for, check_train_config  # noqa: E402
from robot_rl.config import TrainConfig  # noqa: E402
from robot_rl.node_config import ActorNodeConfig, LearnerNodeConfig  # noqa: E402
from robot_rl.config_values import ConfigError
from robot_rl.agents.sac import metrics_to_floats  # noqa: E402
from robot_rl.runtime.device import OutOfDeviceMemory  # noqa: E402

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
SMALL = {"hidden": (32, 32)}


def _env():
    from robot_rl.envs import spec_env

    return spec_env("PickCube", "state")


def test_the_device_setting_is_the_agents_and_the_only_way_to_choose_it():
    env = _env()
    assert TrainConfig().device == LearnerNodeConfig().device == "auto"
    assert ActorNodeConfig().device == "cpu"  # a robot PC acts on its CPU while a GPU box learns
    assert agent_config_for(TrainConfig(device="CPU"), env).device == "cpu"
    assert agent_config_for(LearnerNodeConfig(), env).device == resolve_device("auto")
    assert agent_config_for(ActorNodeConfig(), env).device == "cpu"
    for make in (TrainConfig, ActorNodeConfig):  # no agent setting chooses the device: the two cannot disagree
        with pytest.raises(ConfigError, match=r"agent: device is not an agent setting; the run takes it from "
                                              r"--device \(the ROS parameter device\)"):
            make(agent={"device": "cuda"})
    with pytest.raises(DeviceError, match="'gpu0': not a device"):
        check_train_config(TrainConfig(device="gpu0"))


def test_the_train_actor_acts_on_the_cpu_and_takes_the_learners_weights(tmp_path):
    """``robot-rl train``'s split: the learner's agent on its device, the actor's copy on the CPU;
    the weights travel as numpy arrays and load onto the actor's device."""
    from robot_rl.actor import LearnerClient
    from robot_rl.agents.sac import SACAgent
    from robot_rl.commands.train import acting_config
    from robot_rl.envs import obs_spec
    from robot_rl.runtime.learner import LATEST_ONLY, build_learner
    from robot_rl.runtime.transport import inprocess_pair

    env = _env()
    cfg = TrainConfig(agent=SMALL, batch_size=8, replay_capacity=100, demo_capacity=100)
    agent_cfg = agent_config_for(cfg, env)
    actor_end, learner_end = inprocess_pair(latest_only=LATEST_ONLY)
    learner = build_learner(cfg, agent_cfg, obs_spec(env.observation_space), learner_end, tmp_path)
    assert learner.agent.config.device == resolve_device("auto")
    policy = SACAgent(acting_config(agent_cfg))
    client = LearnerClient(actor_end, policy, on_error=pytest.fail)
    learner.begin()  # publishes its weights
    client.poll(1.0)
    assert client.weights_version == 1
    for name, value in learner.agent.policy_state_dict().items():
        mine = policy.state_dict()[name]
        assert mine.device.type == "cpu"
        torch.testing.assert_close(mine, value.cpu(), msg=name)


def test_the_actor_counts_how_far_behind_it_the_policies_it_swaps_in_were(tmp_path):
    """Each weights message says how many transitions the learner had taken when it made them; the
    actor keeps, per swap, how many of those it had sent that the learner had not yet taken (from
    the first weights on: a resumed learner's earlier transitions are not this actor's)."""
    from robot_rl.actor import LearnerClient
    from robot_rl.agents.sac import SACAgent
    from robot_rl.commands.train import acting_config
    from robot_rl.envs import obs_spec
    from robot_rl.runtime.learner import LATEST_ONLY, build_learner
    from robot_rl.runtime.transport import inprocess_pair
    from robot_rl.runtime.wire import transition_arrays

    env = _env()
    cfg = TrainConfig(agent=SMALL, batch_size=8, replay_capacity=100, demo_capacity=100)
    agent_cfg = agent_config_for(cfg, env)
    actor_end, learner_end = inprocess_pair(maxsize=1000, latest_only=LATEST_ONLY)
    learner = build_learner(cfg, agent_cfg, obs_spec(env.observation_space), learner_end, tmp_path)
    client = LearnerClient(actor_end, SACAgent(acting_config(agent_cfg)), on_error=pytest.fail)
    assert client.lag_figures() == {"learner_lag_steps_p50": None, "learner_lag_steps_p99": None,
                                    "learner_lag_steps_max": None}
    learner.online_received = 40  # a resumed learner's
    learner.begin()
    client.poll(1.0)
    obs = env.observation_space.sample()
    for _ in range(5):
        client.send("transition", transition_arrays(Transition(obs, env.action_space.sample(), 0.0, obs, False, False)))
    for msg in learner_end.receive(1.0)[:2]:  # the learner has taken two of the five
        learner.handle(msg)
    learner.publish_weights()
    client.poll(1.0)
    assert client.weights_version == 2 and client.lags == [0, 3]
    assert client.lag_figures()["learner_lag_steps_max"] == 3.0


# ------------------------------------------------------------------ checkpoints load on any device
def _as_if_saved_on_a_gpu(path):
    """Rewrite a checkpoint's metadata as a CUDA learner with fused Adam would have written it."""
    tensors = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        meta = dict(f.metadata())
    config = json.loads(meta["agent_config"])
    meta["agent_config"] = json.dumps({**config, "device": "cuda:0"})
    for key in [k for k in meta if k.endswith(".param_groups")]:
        meta[key] = json.dumps([{**g, "fused": True, "capturable": True} for g in json.loads(meta[key])])
    save_file(tensors, str(path), metadata=meta)


def test_a_checkpoint_from_a_gpu_loads_on_the_cpu_without_touching_cuda(tmp_path, monkeypatch):
    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.runtime.checkpoint import load_agent, save_agent

    agent = SACAgent(SACConfig(state_dim=8, hidden=(32, 32), gripper_width_index=0))
    rng = np.random.default_rng(0)
    batch = {"obs": {"state": rng.normal(size=(16, 8)).astype(np.float32)},
             "next_obs": {"state": rng.normal(size=(16, 8)).astype(np.float32)},
             "action": rng.uniform(-1, 1, (16, 7)).astype(np.float32), "reward": rng.normal(size=16).astype(np.float32),
             "bootstrap": np.full(16, 0.99, np.float32)}
    agent.update(batch)
    path = tmp_path / "agent.safetensors"
    save_agent(agent, path)
    _as_if_saved_on_a_gpu(path)

    def no_cuda(*args, **kwargs):
        raise AssertionError("asked for the CPU, the loader touched CUDA")

    for name in ("_lazy_init", "is_available", "device_count", "current_device", "init"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    loaded = load_agent(path, device="cpu")
    assert loaded.config.device == "cpu"
    assert {p.device.type for p in loaded.parameters()} == {"cpu"}
    for opt in (loaded.critic_opt, loaded.actor_opt, loaded.alpha_opt):
        assert all(not g["fused"] and not g["capturable"] for g in opt.param_groups)  # this device's options
        assert {v.device.type for s in opt.state.values() for v in s.values()} == {"cpu"}
    torch.manual_seed(1)
    expected = metrics_to_floats(agent.update(batch))
    torch.manual_seed(1)
    assert metrics_to_floats(loaded.update(batch))["critic_loss"] == pytest.approx(expected["critic_loss"], rel=1e-5)


# ------------------------------------------------------------------ out of GPU memory
def test_out_of_gpu_memory_in_the_learner_names_the_sizes_and_the_flags(tmp_path, monkeypatch):
    from robot_rl.agents.sac import SACAgent
    from robot_rl.envs import obs_spec
    from robot_rl.runtime.learner import LATEST_ONLY, build_learner
    from robot_rl.runtime.transport import inprocess_pair

    def out_of_memory(self, batch, update_actor=True):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(SACAgent, "update", out_of_memory)
    env = _env()
    cfg = TrainConfig(agent=SMALL, batch_size=8, replay_capacity=300, demo_capacity=200, pretrain_steps=0)
    learner = build_learner(cfg, agent_config_for(cfg, env), obs_spec(env.observation_space),
                            inprocess_pair(latest_only=LATEST_ONLY)[1], tmp_path)
    obs = env.observation_space.sample()
    for _ in range(10):
        learner.replay.add_demo(Transition(obs, env.action_space.sample(), 0.0, obs, False, False))
    with pytest.raises(OutOfDeviceMemory) as err:
        learner.begin()  # the critic warm-up's first update
    message = str(err.value)
    assert "\n" not in message
    assert "batch size 8, replay capacity 300, demo capacity 200" in message
    assert "--batch-size, --replay-capacity, --demo-capacity, --image-size" in message


def test_out_of_gpu_memory_in_classifier_training_is_one_line(tmp_path, monkeypatch, capsys):
    from robot_rl.commands.cli import main
    from robot_rl.reward.classifier import SuccessClassifier
    from tests.test_reward import _store

    data = _store(tmp_path / "d.zarr", [True, False] * 3)

    def out_of_memory(self, images):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(SuccessClassifier, "forward", out_of_memory)
    assert main(["classifier", "train", "--data", str(data), "--out", str(tmp_path / "c"), "--steps", "5",
                 "--batch-size", "8", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("robot-rl: error: classifier training on cpu ran out of GPU memory (batch size 8, 1 cameras")
    assert "--batch-size" in err and "--image-size" in err


# ------------------------------------------------------------------ every command resolves its device first
@NO_GPU
@pytest.mark.parametrize("argv", [
    ["train", "--steps", "10"],
    ["eval", "--checkpoint", "{tmp}/no-run"],
    ["record", "--policy", "{tmp}/no-run", "--out", "{tmp}/out.zarr"],
    ["classifier", "train", "--data", "{tmp}/none.zarr", "--out", "{tmp}/c"],
    ["classifier", "eval", "--classifier", "{tmp}/c", "--data", "{tmp}/none.zarr"],
    ["classifier", "hard-negatives", "--classifier", "{tmp}/c", "--rollouts", "{tmp}/r.zarr", "--out", "{tmp}/h.zarr"],
    ["bench", "learning"],
    ["bench", "classifier"],
], ids=lambda argv: " ".join(argv[:2]))
def test_cuda_without_a_gpu_stops_every_command_before_any_work(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # train's default run folder would land here
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--device", "cuda"]
    from robot_rl.commands.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device cuda: no CUDA GPU found" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run folder, no store


def test_an_unknown_device_name_is_one_line(capsys):
    from robot_rl.commands.cli import main

    assert main(["eval", "--checkpoint", "nowhere", "--device", "tpu"]) == 2
    assert capsys.readouterr().err.strip() == ("robot-rl: error: --device 'tpu': not a device; use auto, cpu, cuda, "
                                               "cuda:N or mps")


def test_bench_passes_the_device_only_to_benchmarks_that_take_one(monkeypatch, capsys):
    from robot_rl import bench
    from robot_rl.commands.cli import main

    seen = {}
    with_device = types.ModuleType("fake_bench_with_device")
    with_device.run = lambda quick=False, log=print, device="auto": seen.setdefault("device", device) and {"device": device}
    without = types.ModuleType("fake_bench_without")
    without.run = lambda quick=False, log=print: {"ran": True}
    monkeypatch.setitem(sys.modules, with_device.__name__, with_device)
    monkeypatch.setitem(sys.modules, without.__name__, without)
    monkeypatch.setitem(bench.BENCHMARKS, "fake-device", bench.Benchmark(with_device.__name__, "takes one"))
    monkeypatch.setitem(bench.BENCHMARKS, "fake-plain", bench.Benchmark(without.__name__, "takes none"))
    assert bench.run_benchmark("fake-device", device="CPU") == {"device": "cpu"}
    assert bench.run_benchmark("fake-plain") == {"ran": True}
    with pytest.raises(bench.BenchmarkDeviceError, match="bench fake-plain takes no --device"):
        bench.run_benchmark("fake-plain", device="cpu")
    assert main(["bench", "fake-plain", "--device", "cpu"]) == 2
    assert "takes no --device" in capsys.readouterr().err
    for name in ("learning", "classifier"):  # the two this part implements
        import importlib

        assert bench.takes_device(importlib.import_module(bench.BENCHMARKS[name].module).run)
