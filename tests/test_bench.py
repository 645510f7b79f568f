import json

from robot_rl.bench import sim as sim_bench
from robot_rl.cli import main


def test_bench_figures_are_measured():
    assert sim_bench.steps_per_second("PickCube", "mujoco", images=False, steps=20) > 0
    assert 0.0 <= sim_bench.expert_success("PickCube", "mujoco", episodes=2) <= 1.0


def test_gym_hil_missing_gives_null_with_a_reason(monkeypatch):
    monkeypatch.setenv("ROBOT_RL_GYM_HIL_PYTHON", "/nonexistent/python")
    rate, note = sim_bench.gym_hil_steps_per_second(10)
    assert rate is None and "mujoco<3.9" in note


def test_bench_json_is_the_last_line(monkeypatch, capsys):
    monkeypatch.setattr(sim_bench, "run", lambda quick, log: {"mujoco_pickcube_state_steps_per_s": 1.0, "quick": quick})
    assert main(["bench", "sim", "--quick", "--json"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == {"mujoco_pickcube_state_steps_per_s": 1.0, "quick": True}
