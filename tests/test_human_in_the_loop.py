"""The human in the loop on pixels, as the main job runs it: a simulated operator takes over
from the learning policy; its steps are executed, flagged in the episode store, kept in the demo
buffer as well as the online one, and reported per 1,000 env steps and in the progress lines."""

import pytest
import torch

pytestmark = pytest.mark.learning

CAMS = ("front", "wrist")
SIZE = (32, 32)
STEPS = 120


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_pixel_run_learns_from_the_simulated_humans_takeovers(tmp_path, capsys):
    from robot_rl.agents.frozen import read_encoder_meta
    from robot_rl.commands.encoder import pretrain_encoder
    from robot_rl.commands.record import record_rollouts
    from robot_rl.commands.train import TrainConfig, train
    from robot_rl.data.store import EpisodeStore
    from robot_rl.runtime.checkpoint import load_replay

    demos = record_rollouts(tmp_path / "demos.zarr", "PickCube", 3, noise=0.1, seed=10_000, images=True,
                            image_size=SIZE, cameras=CAMS, keep="successes")
    pretrain_encoder([demos["path"]], tmp_path / "encoder", cameras=CAMS, objectives=("bc",), steps=50, probe_steps=10,
                     log=lambda m: None)
    run = tmp_path / "run"
    capsys.readouterr()
    summary = train(TrainConfig(task="PickCube", obs="pixels", cameras=CAMS, image_size=SIZE,
                                demo_store=str(demos["path"]), frozen_encoder=str(tmp_path / "encoder"),
                                env_steps=STEPS, eval_every=STEPS, eval_episodes=2, final_eval_episodes=2,
                                pretrain_steps=20, critic_warmup_steps=20, batch_size=32, human_eagerness=1.0,
                                record_episodes=True, run_dir=str(run), agent={"hidden": [32, 32]}))
    progress = capsys.readouterr().out

    # takeovers happened, and the human drove some steps but not all
    human_steps = sum(block["intervention_steps"] for block in summary["per_1000_steps"])
    assert summary["interventions"] >= 1 and 0 < human_steps < STEPS
    # reported: the share of steps under human control, per block and for the run's end, and as it went
    (block,) = summary["per_1000_steps"]
    assert block["env_step_range"] == [0, STEPS] and block["intervention_rate"] == round(human_steps / STEPS, 4)
    assert summary["intervention_rate_last_2000"] == block["intervention_rate"]
    assert "takeovers" in progress

    # flagged in the episode store: each finished episode's human steps, step by step
    store = EpisodeStore.open(run / "online.zarr")
    assert store.n_episodes == summary["episodes"] >= 1
    flagged = [int(store.get_episode(i, ["is_intervention"])["is_intervention"].sum())
               for i in range(store.n_episodes)]
    assert flagged == [e[2] for e in summary["episode_interventions"]]

    # every human step reached the demo buffer, after the demonstrations, and the online buffer
    replay = load_replay(run / "checkpoints" / f"step_{STEPS:09d}", read_encoder_meta(tmp_path / "encoder")["sha"])
    recorded = EpisodeStore.open(demos["path"])
    assert len(replay.demo) == recorded.n_frames - recorded.n_episodes + human_steps  # a transition per step
    assert len(replay.online) == STEPS

