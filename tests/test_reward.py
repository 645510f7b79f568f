"""The success classifier: calibration, metrics, the reward wrapper, data checks."""

import itertools

import numpy as np
import pytest
import torch

from robot_rl.data.store import EpisodeStore
from robot_rl.reward.classifier import (Calibration, ClassifierConfig, ClassifierError, SuccessClassifier,
                                        binary_metrics, load_classifier, roc_auc, save_classifier,
                                        threshold_for_fpr)
from robot_rl.reward.training import load_frames, split_by_episode, train_classifier, training_settings
from robot_rl.reward.wrapper import ClassifierReward, OperatorOutcome


def test_threshold_calibration_hits_its_target_on_synthetic_scores():
    rng = np.random.default_rng(0)
    calibration_neg = rng.normal(0, 1, 20_000)
    fresh_neg, fresh_pos = rng.normal(0, 1, 200_000), rng.normal(4, 1, 20_000)
    for target in (0.01, 0.05, 0.001):
        t = threshold_for_fpr(calibration_neg, target)
        on_calibration = (calibration_neg >= t).mean()
        assert on_calibration <= target  # never above the target on the set it was chosen on
        assert on_calibration >= target - 2 / len(calibration_neg)  # and not needlessly strict
        assert abs((fresh_neg >= t).mean() - target) < 0.25 * target + 0.0005  # holds on new data
    m = binary_metrics(np.concatenate([fresh_neg, fresh_pos]),
                       np.concatenate([np.zeros(len(fresh_neg), bool), np.ones(len(fresh_pos), bool)]),
                       threshold_for_fpr(calibration_neg, 0.01))
    assert m["fpr"] < 0.0125 and m["recall"] > 0.9
    assert threshold_for_fpr(calibration_neg, 0.0) > calibration_neg.max()
    with pytest.raises(ValueError, match="false-positive rate"):
        threshold_for_fpr(calibration_neg, 1.5)


def test_roc_auc_is_the_pairwise_ranking_probability_with_ties():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, 40).astype(float)  # many ties
    labels = rng.random(40) < 0.4
    pairs = [(p, n) for p, n in itertools.product(scores[labels], scores[~labels])]
    brute = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs])
    assert roc_auc(scores, labels) == pytest.approx(brute)


def _classifier(image_size=(32, 32), cameras=("front",)) -> SuccessClassifier:
    return SuccessClassifier(ClassifierConfig(cameras=cameras, image_size=image_size, hidden=(32,), features=16))


def _sim_env(size=32):
    from robot_rl.sim import make

    return make("PickCube", images=True, image_size=(size, size), cameras=("front",))


def test_wrapper_ends_episodes_on_detected_success_after_k_frames():
    env = ClassifierReward(_sim_env(), _classifier(), Calibration(threshold=0.0, target_fpr=0.01, consecutive=3))
    env.reset(seed=0)
    rewards, ends = [], []
    for _ in range(3):
        obs, r, terminated, truncated, info = env.step(np.zeros(7, np.float32))
        rewards.append(r)
        ends.append(terminated)
        assert 0.0 <= info["classifier_p"] <= 1.0
        assert info["ground_truth_success"] is False and info["reward_source"] == "classifier"
    assert rewards == [0.0, 0.0, 1.0] and ends == [False, False, True]


@pytest.mark.parametrize("classifier_fires", [False, True])
def test_the_operators_key_wins_over_the_classifier(classifier_fires):
    """As the actor node composes them: OperatorOutcome around ClassifierReward."""
    threshold = 0.0 if classifier_fires else 1.01  # every frame / no frame is a success to the classifier
    env = OperatorOutcome(ClassifierReward(_sim_env(), _classifier(), Calibration(threshold=threshold, target_fpr=0.01,
                                                                                  consecutive=2)))
    env.reset(seed=0)
    _, r, terminated, _, info = env.step(np.zeros(7, np.float32))
    assert (r, terminated, info["reward_source"]) == (0.0, False, "classifier")  # one frame: never enough
    env.override(not classifier_fires)
    _, r, terminated, truncated, info = env.step(np.zeros(7, np.float32))
    assert info["classifier_success"] is classifier_fires  # the classifier's verdict, overruled
    assert (r, terminated, truncated) == (float(not classifier_fires), True, False)
    assert (info["success"], info["reward_source"]) == (not classifier_fires, "operator")
    assert info["ground_truth_success"] is False  # the sim's own verdict stays apart
    env.reset(seed=1)
    _, _, terminated, _, info = env.step(np.zeros(7, np.float32))
    assert info["reward_source"] == "classifier" and not terminated  # the next episode is the classifier's again


def test_a_collision_reflex_ends_the_episode_as_a_failure_whatever_the_classifier_sees():
    from robot_rl.rollout import evaluate
    from robot_rl.sim import make
    from tests.helpers.common import press_the_peg_onto_the_block

    twin = make("PegInsertHard", images=True, image_size=(32, 32), cameras=("front",), collision_reflex=True)
    env = ClassifierReward(twin, _classifier(), Calibration(threshold=0.0, target_fpr=0.01, consecutive=30))
    obs, reward, terminated, truncated, info = list(press_the_peg_onto_the_block(env))[-1]
    assert info["reflex"] and terminated and not truncated and reward == 0.0
    assert info["success"] is False and info["classifier_success"] is False and info["ground_truth_success"] is False
    env = ClassifierReward(twin, _classifier(), Calibration(threshold=0.0, target_fpr=0.01, consecutive=1))
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(np.zeros(7, np.float32))  # free space: the classifier's call
    assert not info["reflex"] and (reward, terminated, info["success"]) == (1.0, True, True)
    # an evaluation counts the episodes the reflex ended
    down = lambda obs: np.array([0, 0, -1, 0, 0, 0, 0], np.float32)  # noqa: E731 - onto the block or the table
    result = evaluate(down, make("PegInsertHard", collision_reflex=True), episodes=3)
    assert result["success_rate"] == 0.0 and result["reflex_stops"] == 3


def test_wrapper_refuses_an_env_whose_cameras_do_not_match():
    with pytest.raises(ClassifierError, match="24x24 frames; the classifier was trained on 32x32"):
        ClassifierReward(_sim_env(24), _classifier(), Calibration(threshold=0.5, target_fpr=0.01))
    with pytest.raises(ClassifierError, match="no camera 'wrist'"):
        ClassifierReward(_sim_env(), _classifier(cameras=("wrist",)), Calibration(threshold=0.5, target_fpr=0.01))


def _store(path, successes: list[bool], frames=6, size=32, task="PickCube"):
    fields = {"state": ((3,), np.float32), "action": ((7,), np.float32), "front": ((size, size, 3), np.uint8)}
    store = EpisodeStore.create(path, fields, task=task, robot="panda", control_hz=10, cameras={"front": (size, size)})
    rng = np.random.default_rng(0)
    for ok in successes:
        success = np.zeros(frames, bool)
        success[-2:] = ok
        images = rng.integers(0, 60, (frames, size, size, 3), dtype=np.uint8)
        images[success] += 150  # success frames are bright: learnable
        store.add_episode({"state": np.zeros((frames, 3), np.float32), "action": np.zeros((frames, 7), np.float32),
                           "front": images, "reward": np.zeros(frames, np.float32), "terminated": np.zeros(frames, bool),
                           "truncated": np.zeros(frames, bool), "is_intervention": np.zeros(frames, bool),
                           "success": success, "has_action": np.arange(frames) < frames - 1,
                           "timestamp": np.arange(frames) * 0.1})
    return path


def test_training_refuses_stores_without_positives_or_negatives(tmp_path):
    with pytest.raises(ClassifierError, match="no positive"):
        load_frames([_store(tmp_path / "fail.zarr", [False, False])])
    fields = {"action": ((7,), np.float32), "front": ((16, 16, 3), np.uint8)}
    only_success = EpisodeStore.create(tmp_path / "pos.zarr", fields, task="PickCube", robot="panda", control_hz=10,
                                       cameras={"front": (16, 16)})
    n = 3
    only_success.add_episode({"action": np.zeros((n, 7), np.float32), "front": np.zeros((n, 16, 16, 3), np.uint8),
                              "reward": np.zeros(n, np.float32), "terminated": np.zeros(n, bool),
                              "truncated": np.zeros(n, bool), "is_intervention": np.zeros(n, bool),
                              "success": np.ones(n, bool), "has_action": np.arange(n) < n - 1,
                              "timestamp": np.arange(n) * 0.1})
    with pytest.raises(ClassifierError, match="no negative"):
        load_frames([tmp_path / "pos.zarr"])
    EpisodeStore.create(tmp_path / "nocam.zarr", {"action": ((7,), np.float32)}, task="PickCube", robot="panda",
                        control_hz=10)
    with pytest.raises(ClassifierError, match="no cameras"):
        load_frames([tmp_path / "nocam.zarr"])


def test_training_refuses_stores_of_different_tasks(tmp_path):
    stores = [_store(tmp_path / "pick.zarr", [True, False]), _store(tmp_path / "push.zarr", [True, False], task="PushCube")]
    with pytest.raises(ClassifierError, match=r"the stores record different tasks \(PickCube, PushCube\)"):
        load_frames(stores)


def test_held_out_split_is_by_episode():
    episodes = np.repeat(np.arange(12), 5)
    labels = np.zeros(60, bool)
    labels[np.isin(episodes, [0, 1, 2, 3, 4, 5])] = np.tile([False, False, False, True, True], 6)
    train, val = split_by_episode(episodes, labels, 0.25, seed=0)
    assert not (train & val).any() and (train | val).all()
    assert not set(episodes[train]) & set(episodes[val])  # no episode on both sides
    assert labels[val].any() and (~labels[val]).any()
    held = set(episodes[val])
    assert any(e < 6 for e in held) and any(e >= 6 for e in held)  # successful and failed episodes held out


def test_train_calibrate_save_and_load(tmp_path):
    data = _store(tmp_path / "d.zarr", [True, False] * 6)
    report = train_classifier([data], tmp_path / "clf", steps=60, batch_size=16, target_fpr=0.0, log=lambda m: None)
    v = report["validation"]
    assert v["fpr"] == 0.0 and v["recall"] == 1.0  # bright vs dark frames: separable
    # easy negatives put the FPR-target threshold near 0; the floor keeps the classifier's boundary
    assert report["threshold_for_target_fpr"] < 0.5 and v["threshold"] == 0.5
    assert (tmp_path / "clf" / "confusion.png").is_file() and (tmp_path / "clf" / "report.json").is_file()
    model, calibration = load_classifier(tmp_path / "clf")
    assert calibration.threshold == pytest.approx(v["threshold"]) and calibration.target_fpr == 0.0
    assert model.config.task == "PickCube"  # the stores' task: a run of another task refuses it
    frames = EpisodeStore.open(data).get_episode(0, ["front", "success"])
    p = model.probability({"front": frames["front"]})
    assert ((p >= calibration.threshold) == frames["success"]).all()
    with pytest.raises(ClassifierError, match="no classifier"):
        load_classifier(tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "classifier.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(Exception):
        load_classifier(tmp_path / "bad")
    save_classifier(tmp_path / "again", model, calibration)
    assert load_classifier(tmp_path / "again")[1] == calibration
    unfloored = train_classifier([data], tmp_path / "clf0", steps=60, batch_size=16, target_fpr=0.0, min_threshold=0.0,
                                 log=lambda m: None)
    assert unfloored["validation"]["threshold"] == unfloored["threshold_for_target_fpr"]
    with pytest.raises(ValueError, match="min_threshold"):
        train_classifier([data], tmp_path / "clf1", steps=1, min_threshold=1.0)


def test_classifier_cli_trains_and_reports(tmp_path, capsys):
    import json

    from robot_rl.commands.cli import main

    data = _store(tmp_path / "d.zarr", [True, False] * 4)
    assert main(["classifier", "train", "--data", str(data), "--out", str(tmp_path / "c"), "--steps", "20",
                 "--batch-size", "8"]) == 0
    validation = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"precision", "recall", "fpr", "roc_auc", "threshold"} <= set(validation)
    assert main(["classifier", "train", "--data", str(_store(tmp_path / "f.zarr", [False] * 3)), "--out",
                 str(tmp_path / "x")]) == 2
    assert "no positive" in capsys.readouterr().err
    assert main(["classifier", "train", "--data", str(data), "--out", str(tmp_path / "y"), "--consecutive", "0"]) == 2


def test_wrapper_applies_the_time_limit_even_when_the_task_is_solved():
    from robot_rl.sim import make

    env = ClassifierReward(make("PickCube", images=True, image_size=(32, 32), cameras=("front",), max_episode_steps=4),
                           _classifier(), Calibration(threshold=1.01, target_fpr=0.01))  # never fires
    env.reset(seed=0)
    ends = [env.step(np.zeros(7, np.float32))[2:4] for _ in range(4)]
    assert ends == [(False, False)] * 3 + [(False, True)]


def _trained(tmp_path, successes=(True, False) * 6):
    data = _store(tmp_path / "d.zarr", list(successes))
    train_classifier([data], tmp_path / "clf", steps=150, batch_size=16, target_fpr=0.0, log=lambda m: None)
    # the bright/dark toy data saturate the scores; a threshold of 0.5 keeps the counts below exact
    model, calibration = load_classifier(tmp_path / "clf")
    calibration.threshold = 0.5
    save_classifier(tmp_path / "clf", model, calibration, {"training": training_settings(tmp_path / "clf")})
    return data, tmp_path / "clf"


def test_evaluate_classifier_reports_frame_and_episode_metrics(tmp_path):
    from robot_rl.reward.training import evaluate_classifier

    data, clf = _trained(tmp_path)
    m = evaluate_classifier(clf, [data])["metrics"]
    assert m["episodes"] == 12 and m["frames"] == 72
    assert (m["successful_episodes"], m["failed_episodes"]) == (6, 6)
    assert m["episode_detections"] == 6 and m["episode_false_positives"] == 0
    assert m["fpr"] == 0.0 and m["recall"] == 1.0
    with pytest.raises(ClassifierError, match="24x24 frames; the classifier reads 32x32"):
        evaluate_classifier(clf, [_store(tmp_path / "small.zarr", [True, False], size=24)])


def test_hard_negatives_keep_false_positive_episodes_cut_after_the_last_one_and_retrain(tmp_path):
    from robot_rl.reward.hard_negatives import mine_hard_negatives, retrain_with

    data, clf = _trained(tmp_path)
    rollouts = _store(tmp_path / "rollouts.zarr", [True, False, False])
    store = EpisodeStore.open(rollouts, "a")
    # a fourth episode: failed, but frames 1 and 2 look like success to the classifier
    episode = store.get_episode(1)
    episode["front"][1:3] += 150
    store.add_episode(episode)
    summary = mine_hard_negatives(clf, [rollouts], tmp_path / "hard.zarr")
    assert summary["rollout_episodes"] == 4 and summary["kept_episodes"] == 1
    assert summary["false_positive_frames"] == 2 and summary["kept_positive_frames"] == 0
    mined = EpisodeStore.open(tmp_path / "hard.zarr")
    kept = mined.get_episode(0)
    assert len(kept["success"]) == 3 and not kept["success"].any()  # frames 0..2, labels as recorded
    assert list(kept["has_action"]) == [True, True, False] and kept["truncated"][1]
    np.testing.assert_array_equal(kept["front"], episode["front"][:3])
    settings = training_settings(clf)
    assert settings["steps"] == 150 and settings["target_fpr"] == 0.0
    report = retrain_with(clf, tmp_path / "hard.zarr", tmp_path / "clf2", log=lambda m: None)
    assert report["train_frames"] + report["val_frames"] == 72 + 3
    retrained = training_settings(tmp_path / "clf2")
    assert retrained["data"][-1] == str((tmp_path / "hard.zarr").resolve())
    # a new classifier, as many steps as the first, unless told to fine-tune this one
    assert retrained["init_from"] is None and retrained["steps"] == 150
    retrain_with(clf, tmp_path / "hard.zarr", tmp_path / "clf3", fine_tune=True, log=lambda m: None)
    assert training_settings(tmp_path / "clf3")["init_from"] == str(clf.resolve())
    assert training_settings(tmp_path / "clf3")["steps"] == 150 // 4
    retrain_with(clf, tmp_path / "hard.zarr", tmp_path / "clf4", steps=7, fine_tune=True, log=lambda m: None)
    assert training_settings(tmp_path / "clf4")["steps"] == 7
    # fine-tuning starts from the classifier's weights: with a learning rate of 0 they stay its own
    retrain_with(clf, tmp_path / "hard.zarr", tmp_path / "clf0", steps=1, fine_tune=True, lr=0.0, log=lambda m: None)
    torch.testing.assert_close(load_classifier(tmp_path / "clf0")[0].state_dict(), load_classifier(clf)[0].state_dict())
    with pytest.raises(ClassifierError, match="at least 1 step"):
        retrain_with(clf, tmp_path / "hard.zarr", tmp_path / "clf5", steps=0, log=lambda m: None)
    # a starting point that reads other frames is refused by name before any training
    other = tmp_path / "other"
    train_classifier([_store(tmp_path / "s48.zarr", [True, False] * 3, size=48)], other, steps=2, batch_size=4,
                     log=lambda m: None)
    with pytest.raises(ClassifierError, match="other.*cannot be the starting point"):
        train_classifier([data], tmp_path / "clf6", steps=2, batch_size=4, init_from=other, log=lambda m: None)
    with pytest.raises(ClassifierError, match="at least one rollout store"):
        mine_hard_negatives(clf, [], tmp_path / "none.zarr")
    with pytest.raises(ClassifierError, match="the classifier reads"):
        mine_hard_negatives(clf, [_store(tmp_path / "small.zarr", [False], size=24)], tmp_path / "x.zarr")


def test_classifier_eval_and_hard_negatives_cli(tmp_path, capsys):
    import json

    from robot_rl.commands.cli import main

    data, clf = _trained(tmp_path)
    assert main(["classifier", "eval", "--classifier", str(clf), "--data", str(data)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["recall"] == 1.0
    assert main(["classifier", "hard-negatives", "--classifier", str(clf), "--rollouts", str(data),
                 "--out", str(tmp_path / "h.zarr"), "--retrain", str(tmp_path / "c2")]) == 0
    out = capsys.readouterr().out
    assert '"kept_episodes": 0' in out and "nothing to retrain" in out
    assert main(["classifier", "hard-negatives", "--classifier", str(clf), "--rollouts", str(data),
                 "--out", str(tmp_path / "h2.zarr"), "--retrain", str(tmp_path / "c3"), "--retrain-steps", "0"]) == 2
    assert "--retrain-steps must be >= 1" in capsys.readouterr().err and not (tmp_path / "h2.zarr").exists()
    assert main(["classifier", "eval", "--classifier", str(tmp_path / "missing"), "--data", str(data)]) == 2
    assert "no classifier" in capsys.readouterr().err
