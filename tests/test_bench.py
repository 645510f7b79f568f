import json
import statistics

import pytest
import torch

from robot_rl.agents.networks import CriticEnsemble
from robot_rl.bench import learner as learner_bench
from robot_rl.bench import sim as sim_bench
from robot_rl.commands.cli import main
from robot_rl.sim import make
from robot_rl.sim.experts import make_expert
from tests.helpers.common import franky_sim_lock

pytestmark = pytest.mark.integration


@pytest.fixture
def own_domain(monkeypatch):
    """A benchmark's ROS 2 nodes on this test process's domain (tests/helpers/ros.py), not the
    benchmark's own pick by process id: under pytest-xdist, never a domain another worker's test
    is using at the same time."""
    from robot_rl import bench
    from tests.helpers.ros import free_domain_id

    monkeypatch.setattr(bench, "private_domain", lambda base, span: free_domain_id())


class _FakeClock:
    """perf_counter() answers the given instants in turn: a test sees what the bench divides by."""

    def __init__(self, *instants: float):
        self.instants = list(instants)

    def perf_counter(self) -> float:
        return self.instants.pop(0)


def test_sim_steps_per_second_is_the_timed_steps_over_the_timed_span(monkeypatch):
    steps = []

    def counted_make(*args, **kwargs):
        env = make(*args, **kwargs)
        step = env.step
        env.step = lambda action: steps.append(action) or step(action)
        return env

    monkeypatch.setattr(sim_bench, "make", counted_make)
    monkeypatch.setattr(sim_bench, "time", _FakeClock(100.0, 104.0))
    assert sim_bench.steps_per_second("PickCube", "mujoco", images=False, steps=20) == 20 / 4.0
    assert len(steps) == 1 + 20  # the warm-up step is taken but neither counted nor timed


def test_sim_expert_success_counts_the_expert_successes(monkeypatch):
    assert sim_bench.expert_success("PickCube", "mujoco", episodes=2) == 1.0  # the clean expert solves PickCube
    monkeypatch.setattr(sim_bench, "make_expert", lambda task, noise, seed: make_expert(task, noise=1.5, seed=seed))
    assert sim_bench.expert_success("PickCube", "mujoco", episodes=2) == 0.0  # a failing one is counted as failing


def test_gym_hil_missing_gives_null_with_a_reason(monkeypatch):
    monkeypatch.setenv("ROBOT_RL_GYM_HIL_PYTHON", "/nonexistent/python")
    rate, note = sim_bench.gym_hil_steps_per_second(10)
    assert rate is None and "mujoco<3.9" in note


def test_bench_json_is_the_last_line(monkeypatch, capsys):
    monkeypatch.setattr(sim_bench, "run", lambda quick, log: {"mujoco_pickcube_state_steps_per_s": 1.0, "quick": quick})
    assert main(["bench", "sim", "--quick", "--json"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    machine = last.pop("machine")  # what the figures were measured on: wall times compare only on one kind
    assert last == {"mujoco_pickcube_state_steps_per_s": 1.0, "quick": True}
    assert machine["cores"] >= 1 and machine["cpu"] and machine["torch"] == torch.__version__


LEARNER_KEYS = (
    "updates_per_s_state_e2", "updates_per_s_state_e10", "naive_updates_per_s_state_e10", "ensemble_speedup_e10",
    "updates_per_s_pixels_e2", "updates_per_s_pixels128_e2", "actor_latency_ms_p50_state", "actor_latency_ms_p99_state",
    "actor_latency_ms_p50_pixels", "actor_latency_ms_p99_pixels", "replay_bytes_ratio",
    "replay_bytes_per_transition", "raw_obs_bytes", "torch_threads", "batch_size", "naive_e10_gemm_share",
    "ensemble_speedup_ceiling_e10",
)


def test_learner_bench_quick_gives_every_figure_consistently(monkeypatch):
    tiny = {"budget_s": 0.01, "rounds": 1, "warmup": 1, "min_calls": 1, "latency_calls": 20,
            "online_episodes": 10, "demo_episodes": 5, "batches": 1, "profile_calls": 1}
    monkeypatch.setattr(learner_bench, "QUICK", tiny)
    threads = torch.get_num_threads()
    figures = learner_bench.run(quick=True, log=lambda msg: None, device="cpu")
    assert torch.get_num_threads() == threads  # restored after the single-thread measurement
    assert figures["device"] == "cpu" and figures["gpu_memory_mb"] is None  # GPU memory only on CUDA
    for key in LEARNER_KEYS:
        value = figures[key]
        assert isinstance(value, (int, float)) and value > 0, (key, value)
    assert figures["batch_size"] == 256 and figures["torch_threads"] == 1
    # derived figures are what their names say of the measured ones (each rounded to 2-4 places)
    speedup = figures["updates_per_s_state_e10"] / figures["naive_updates_per_s_state_e10"]
    assert figures["ensemble_speedup_e10"] == pytest.approx(speedup, rel=1e-2)
    assert 0 < figures["naive_e10_gemm_share"] < 1
    assert figures["ensemble_speedup_ceiling_e10"] == pytest.approx(1 / figures["naive_e10_gemm_share"], rel=1e-2)
    for kind in ("state", "pixels"):
        assert figures[f"actor_latency_ms_p50_{kind}"] <= figures[f"actor_latency_ms_p99_{kind}"]
    # replay memory: one pixel observation is two 64x64 RGB frames and 20 float32 of state; a
    # replay of 20-step episodes holds 21 observation slots per 20 transitions, plus actions/flags
    assert figures["raw_obs_bytes"] == 2 * 64 * 64 * 3 + 20 * 4
    ratio = figures["replay_bytes_per_transition"] / figures["raw_obs_bytes"]
    assert figures["replay_bytes_ratio"] == pytest.approx(ratio, rel=1e-3)
    assert 21 / 20 <= figures["replay_bytes_ratio"] < 21 / 20 + 0.01
    assert any("LoopCriticEnsemble" in note for note in figures["notes"])
    # the frozen-backbone pixel agent: its rate over the state agent measured beside it, and a
    # replay of cached float16 features: two 5x5x32 maps + 20 float32 of state per slot
    assert figures["updates_per_s_pixels_frozen_e2"] > 0 and figures["pixels_frozen_over_state_e2"] > 0
    features_bytes = 2 * 5 * 5 * 32 * 2 + 20 * 4
    assert 21 / 20 * features_bytes <= figures["replay_bytes_per_transition_frozen"] < 21 / 20 * features_bytes + 60
    assert figures["replay_bytes_per_transition_frozen"] < figures["replay_bytes_per_transition"] / 5


def test_learner_bench_refuses_a_device_that_is_not_there(monkeypatch):
    from robot_rl.runtime.device import DeviceError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="cuda") as err:
        learner_bench.run(quick=True, log=lambda msg: None, device="cuda")
    assert "\n" not in str(err.value)


def test_the_naive_baseline_computes_what_the_batched_ensemble_computes():
    """The speedup figure compares like with like: with the same weights, the per-critic loop
    gives the batched ensemble's Q values, for all members and for a subset."""
    torch.manual_seed(0)
    batched = CriticEnsemble(4, 6, 3, hidden=(16, 16))
    loop = learner_bench.LoopCriticEnsemble(4, 6, 3, hidden=(16, 16))
    assert sum(p.numel() for p in loop.parameters()) == sum(p.numel() for p in batched.parameters())
    with torch.no_grad():
        for i, critic in enumerate(loop.critics):
            linears = [m for m in critic if isinstance(m, torch.nn.Linear)]
            norms = [m for m in critic if isinstance(m, torch.nn.LayerNorm)]
            for linear, layer in zip(linears, batched.net[::3]):
                linear.weight.copy_(layer.weight[i].T)
                linear.bias.copy_(layer.bias[i, 0])
            for norm, layer in zip(norms, batched.net[1::3]):
                norm.weight.copy_(layer.weight[i, 0])
                norm.bias.copy_(layer.bias[i, 0])
    features, action = torch.randn(5, 6), torch.randn(5, 3)
    torch.testing.assert_close(loop(features, action), batched(features, action))
    members = torch.tensor([3, 1])
    torch.testing.assert_close(loop(features, action, members), batched(features, action, members))


DATA_KEYS = ("write_frames_per_s", "read_frames_per_s", "compression_ratio", "lossy_write_frames_per_s",
             "lossy_compression_ratio", "lossy_read_frames_per_s", "bytes_per_frame", "raw_bytes_per_frame",
             "read_unverified_frames_per_s", "digest_ms_per_episode", "digest_share_of_read")


def test_data_bench_quick_gives_every_figure(monkeypatch):
    from robot_rl.bench import data as data_bench

    monkeypatch.setattr(data_bench, "QUICK", {"source_episodes": 1, "episodes": 3, "episode_len": 6,
                                              "candidate_episodes": 2})
    figures = data_bench.run(quick=True, log=lambda msg: None)
    for key in DATA_KEYS:
        assert isinstance(figures[key], float) and figures[key] > 0, key
    assert figures["compression_ratio"] > 1 and figures["lossy_compression_ratio"] > figures["compression_ratio"]
    assert figures["load_3_episodes_s"] > 0
    assert all(c["write_frames_per_s"] > 0 for c in figures["candidates"].values())


def _first_at(curve: list, rate: float):
    """Env steps of a learning curve's first evaluation at or above ``rate``; None if none is."""
    return next((steps for steps, success in curve if success >= rate), None)


def test_classifier_bench_quick_gives_every_figure():
    """The whole pipeline at toy size: data, classifier, both trainings, held-out rollouts of two
    other policies (the figures are not meaningful at this size, only present and consistent)."""
    from robot_rl.bench import classifier as classifier_bench
    from robot_rl.bench.classifier import _median_steps

    figures = classifier_bench.run(quick=True, log=lambda msg: None)
    # the held-out frames hold both classes, so every frame metric is a rate (never NaN)
    assert 0 < figures["heldout_positive_frames"] < figures["heldout_frames"], figures["heldout_frames"]
    for key in ("heldout_fpr", "heldout_recall", "heldout_roc_auc", "heldout_precision"):
        assert 0.0 <= figures[key] <= 1.0, (key, figures[key])
    # steps to 90 %: each seed's first evaluation at 90 % on its curve, the median over seeds, their ratio
    for name in ("classifier_reward", "ground_truth_reward"):
        by_seed = figures[f"steps_to_90_{name}_by_seed"]
        assert by_seed == [_first_at(curve, 0.9) for curve in figures[f"curve_{name}"]], name
        assert figures[f"steps_to_90_{name}"] == _median_steps(by_seed), name
    learned, truth = figures["steps_to_90_classifier_reward"], figures["steps_to_90_ground_truth_reward"]
    assert figures["steps_ratio"] == (round(learned / truth, 3) if learned is not None and truth else None)
    assert figures["heldout_frames"] > 0 and set(figures["heldout_by_policy"]) == {"expert_noise_0.3", "agent"}
    assert figures["heldout_agent_checkpoint"].startswith("step_")
    assert figures["seeds"] == [0, 1]  # each reward trained once per seed
    for name in ("classifier_reward", "ground_truth_reward"):
        assert len(figures[f"steps_to_90_{name}_by_seed"]) == 2 and len(figures[f"curve_{name}"]) == 2
        assert all(curve for curve in figures[f"curve_{name}"])
    assert sum(figures["classifier_reward_training_episodes"].values()) > 0


def test_classifier_bench_takes_the_median_over_seeds_and_ranks_never_last():
    from robot_rl.bench.classifier import _median_steps

    assert _median_steps([5000, 9000, 6000]) == 6000
    assert _median_steps([5000, None, 6000]) == 6000  # never reaching 90% ranks after any that did
    assert _median_steps([5000, None, None]) is None
    assert _median_steps([4000, 6000]) == 5000
    assert _median_steps([4000, None]) is None


def test_ros_bench_quick_gives_every_figure(own_domain, tmp_path_factory, monkeypatch):
    pytest.importorskip("rclpy")
    from robot_rl.bench import franka as franka_bench
    from robot_rl.bench import ros as ros_bench

    franka_figures = franka_bench.run

    def franka_in_turn(*args, **kwargs):  # its franka figures start a franky-sim server: the lock for that part only
        with franky_sim_lock(tmp_path_factory):
            return franka_figures(*args, **kwargs)

    monkeypatch.setattr(franka_bench, "run", franka_in_turn)
    figures = ros_bench.run(quick=True, log=lambda msg: None)
    for kind in ("state", "pixels"):
        for name in ("frame_to_command_latency_ms_p50", "frame_to_command_latency_ms_p99", "loop_jitter_ms_p99",
                     "transitions_per_s", "weight_push_latency_ms"):
            value = figures[f"{name}_{kind}"]
            assert value is not None and value > 0, (name, kind, value)
        assert figures[f"transitions_received_{kind}"] > 0
        assert figures[f"loop_period_ms_mean_{kind}"] > 50  # paced by the arm's 10 Hz ticks
    # the pixel loop again with a learner training beside it, at the learner node's priority
    beside = f"pixels_with_learner_{ros_bench.LearnerNodeConfig.priority}"
    assert figures[f"commands_{beside}"] >= ros_bench.QUICK["steps"]  # every control step sent one (a reset may send more)
    assert 0 <= figures[f"command_latency_misses_{beside}"] <= figures[f"commands_{beside}"]
    assert 0 < figures[f"frame_to_command_latency_ms_p50_{beside}"] <= figures[f"frame_to_command_latency_ms_p99_{beside}"]
    assert figures[f"learner_updates_per_s_{beside}"] > 0  # it trained the whole time
    # the Franka backend against franky-sim: every motion onset seen, nothing dropped
    assert figures["franka_motion_onsets"] == 6 and figures["franka_commands_dropped"] == 0
    assert 0 < figures["franka_command_to_motion_ms_p50"] <= figures["franka_command_to_motion_ms_p99"]
    assert figures["franka_state_rate_hz"] > 10 and figures["franka_loop_jitter_ms_p99"] >= 0
    assert 0 <= figures["franka_step_error_mm_p50"] <= figures["franka_step_error_mm_p99"]
    assert figures["franka_tracking_misses"] >= 0


def test_the_ros_bench_names_the_log_of_a_learner_that_exits_before_training(tmp_path):
    """The control loop with a learner beside it waits for the learner's first update; a learner
    that dies first is one error naming its log, not a loop measured beside nothing."""
    import subprocess
    import sys

    from robot_rl.bench import ros as ros_bench

    learner = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    learner.wait(60)
    with pytest.raises(RuntimeError, match=r"exited \(3\) before training: see .*learner_pixels.log"):
        ros_bench._wait_until_training(learner, tmp_path / "learner_pixels.json", tmp_path / "learner_pixels.log")
    (tmp_path / "learner_pixels.json.training").touch()  # a learner that trains: no wait at all
    ros_bench._wait_until_training(learner, tmp_path / "learner_pixels.json", tmp_path / "learner_pixels.log")


def test_learning_bench_states_each_pixel_seed_s_cycle_time():
    """Each pixel row's cycle time is every seed's summary.json ``cycle_time``, in seed order."""
    from robot_rl.bench.learning import PIXEL_ROWS, pixel_figures

    results = {f"{row}_seed{seed}": {"steps_to_90": None, "final_success_rate": 0.5, "wall_s": 2.0, "updates": 4,
                                     "env_steps": 40, "evals": [{"env_steps": 40, "success_rate": 0.5}],
                                     "cycle_time": {"final_steps_to_success": 20.0 + seed, "final_vs_demos": None}}
               for row in PIXEL_ROWS for seed in range(2)}
    figures = pixel_figures(results, 2)
    for row in PIXEL_ROWS:
        assert figures[f"{row}_cycle_time"] == [results[f"{row}_seed0"]["cycle_time"], results[f"{row}_seed1"]["cycle_time"]]


def test_hil_steps_to_90_start_after_the_clones_evaluation():
    """A cloned base already at 90 % does not count as 0 steps: the run goes on to the first
    evaluation after step 0 at 90 % (where stop_at_success ends it), and so does the figure."""
    from robot_rl.bench.hil import steps_ratio, steps_to_90_after_start

    curve = lambda *points: [{"env_steps": s, "success_rate": r} for s, r in points]  # noqa: E731
    assert steps_to_90_after_start(curve((0, 0.95), (1000, 0.75), (2000, 0.9))) == 2000
    assert steps_to_90_after_start(curve((0, 0.95), (1000, 0.85))) is None
    assert steps_to_90_after_start(curve((0, 0.5), (1000, 1.0))) == 1000
    assert steps_ratio(2000, 3000) == 0.667 and steps_ratio(None, 3000) is None and steps_ratio(2000, None) is None


def test_hil_bench_quick_gives_every_figure(own_domain):
    """The hard task from pixels, both rewards, with and without the simulated human: every figure
    there and each what its name says of the runs' curves."""
    pytest.importorskip("rclpy")
    from robot_rl.bench import hil as hil_bench

    figures = hil_bench.run(quick=True, log=lambda msg: None)
    seeds = hil_bench.QUICK["seeds"]
    assert figures["seeds"] == seeds and figures["eagerness"] == hil_bench.EAGERNESS
    assert figures[f"{hil_bench.KEY}_demos"] == hil_bench.QUICK["pixel_demos"]
    assert isinstance(figures["encoder_held_out_loss"], float)
    for reward in ("ground_truth", "classifier"):
        ratios, reached = [], {"with_human": 0, "without_human": 0}
        for seed in range(seeds):
            key = f"{hil_bench.KEY}_{reward}_seed{seed}"
            steps = {}
            for run in ("with_human", "without_human"):
                curve = figures[f"{key}_{run}_curve"]
                assert curve and curve[0][0] == 0, (key, run)  # the clone is graded before any online step
                steps[run] = figures[f"{key}_steps_to_90_{run}"]
                assert steps[run] is None or isinstance(steps[run], int), (key, run)
                # where the run stops: the first evaluation after step 0 (the clone's counts for neither)
                assert steps[run] == _first_at([point for point in curve if point[0] > 0], 0.9), (key, run)
                reached[run] += steps[run] is not None
                final = figures[f"{key}_final_success_{run}"]
                assert isinstance(final, float) and 0.0 <= final <= 1.0 and final == curve[-1][1], (key, run)
                assert figures[f"{key}_{run}_wall_s"] > 0, (key, run)
                later = [point[1] for point in curve if point[0] > 0]
                assert figures[f"{key}_lowest_eval_{run}"] == (min(later) if later else None), (key, run)
            a, b = steps["with_human"], steps["without_human"]
            ratio = figures[f"{key}_steps_ratio"]
            assert ratio is None or isinstance(ratio, float), key
            assert ratio == (round(a / b, 3) if a is not None and b else None), key
            if ratio is not None:
                ratios.append(ratio)
            human_steps, takeovers = figures[f"{key}_intervention_steps"], figures[f"{key}_interventions"]
            assert isinstance(human_steps, int) and isinstance(takeovers, int), key
            assert human_steps == sum(figures[f"{key}_intervention_steps_by_episode"]), key
            assert takeovers >= (1 if human_steps else 0), key
        median = figures[f"{hil_bench.KEY}_{reward}_steps_ratio_median"]
        assert median is None or isinstance(median, float), reward
        assert median == (round(statistics.median(ratios), 3) if ratios else None), reward
        assert figures[f"{hil_bench.KEY}_{reward}_seeds_with_ratio"] == len(ratios)
        for run in ("with_human", "without_human"):
            assert figures[f"{hil_bench.KEY}_{reward}_reached_90_{run}"] == reached[run], (reward, run)
            lows = [v for seed in range(seeds) if (v := figures[f"{hil_bench.KEY}_{reward}_seed{seed}_lowest_eval_{run}"])
                    is not None]
            assert figures[f"{hil_bench.KEY}_{reward}_lowest_eval_median_{run}"] == (
                round(statistics.median(lows), 3) if lows else None), (reward, run)
    assert not any(k.startswith("peginsert_state") for k in figures)  # the state rows are gone
    assert figures["total_wall_s"] > 0 and figures["notes"]
    assert figures["console_inputs_seen"] == figures["console_inputs"]
    assert 0 < figures["console_input_to_command_ms_p50"] <= figures["console_input_to_command_ms_p99"]


FAULT_KEYS = ("kills", "committed_episodes_lost", "partial_outputs", "env_steps_lost_per_crash_median",
              "env_steps_lost_per_crash_max", "corruptions_injected", "corruptions_detected", "learner_restarts_ok")


def test_faults_bench_kills_and_corrupts_without_losing_anything(monkeypatch, own_domain):
    """The faults benchmark, one kill of each kind: nothing committed is lost, no partial
    output is left, a killed training resumes from its last checkpoint, a killed learner node
    comes back, and every injected corruption is detected."""
    from robot_rl.bench import faults

    monkeypatch.setattr(faults, "QUICK", {"record_kills": 1, "merge_kills": 1, "train_kills": 1, "learner_kills": 1,
                                          "record_episodes": 2, "merge_episodes": 12, "train_steps": 600,
                                          "checkpoint_every": 300})
    said: list[str] = []
    figures = faults.run(quick=True, log=said.append)
    for key in FAULT_KEYS:
        assert isinstance(figures[key], (int, float)), key
    assert figures["kills"] == 4
    assert figures["committed_episodes_lost"] == 0 and figures["partial_outputs"] == 0, said
    assert figures["merge_reruns_ok"] == 1 and figures["record_stores_appendable"] == 1
    assert figures["train_resumes_ok"] == 1
    assert 0 <= figures["env_steps_lost_per_crash_max"] <= 300  # at most one checkpoint interval
    assert figures["corruptions_injected"] == 18 and figures["corruptions_detected"] == 18, figures["corruptions"]
    if "learner_skipped" not in figures:
        assert figures["learner_restarts_ok"] == 1, said


def test_base_bench_quick_times_a_chunked_base_in_process_and_through_a_worker():
    from robot_rl.bench import base as base_bench

    figures = base_bench.run(quick=True, log=lambda msg: None)
    steps = base_bench.QUICK["steps"]
    for where in ("in_process", "worker"):
        # receding plays each chunk whole: one query per HORIZON steps; ensembling queries every step
        assert figures[f"base_queries_{where}_receding"] == -(-steps // base_bench.HORIZON)
        assert figures[f"base_queries_{where}_ensemble"] == steps
        for mode in ("receding", "ensemble"):
            assert 0 < figures[f"base_query_ms_p50_{where}_{mode}"] <= figures[f"base_query_ms_p99_{where}_{mode}"]
            assert 0 < figures[f"base_step_ms_p50_{where}_{mode}"] <= figures[f"base_step_ms_p99_{where}_{mode}"]
        # a step that plays a chunk it holds does not wait on the base
        assert figures[f"base_step_ms_p50_{where}_receding"] < figures[f"base_query_ms_p50_{where}_receding"]
    assert isinstance(figures["worker_hop_ms_p50"], float)
