"""The frozen-encoder pixel path (issue 20): encoder folders, cached features in the agent and the
replay, the encoder's hash guarding checkpoints, replays and weights, ``robot-rl encoder
pretrain``, and a tiny ``robot-rl train --frozen-encoder`` run end to end."""

import copy
import json
import re
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from robot_rl.contract import Transition
from robot_rl.agents.frozen import (ENCODER_FILE, FrozenEncoder, FrozenEncoderError, check_encoder_fits,
                                    read_encoder_meta, weights_sha)
from robot_rl.agents.sac import BASE_ACTION, SACAgent, SACConfig
from robot_rl.commands.cli import main
from robot_rl.replay import FeatureMismatch, MixedReplay, ReplayBuffer
from robot_rl.runtime.checkpoint import CheckpointError, check_same_encoder, load_replay
from tests.helpers.common import one_line_error  # noqa: E402

CAMS = ("front", "wrist")
SIZE = (32, 32)
DRQ = {"backbone": "drq", "channels": 32, "strides": [2, 2, 2, 1]}
STATE_DIM = 8


def make_encoder(folder, seed: int = 0, cameras=CAMS, image_size=SIZE, strides=(2, 2, 2, 1)):
    """A (randomly initialised) frozen DrQ backbone saved as an encoder folder; returns the folder."""
    torch.manual_seed(seed)
    FrozenEncoder({**DRQ, "strides": list(strides), "cameras": list(cameras), "image_size": list(image_size),
                   "objective": "test"}).save(folder)
    return folder


def frozen_config(folder, **kw) -> SACConfig:
    return SACConfig(state_dim=STATE_DIM, cameras=CAMS, image_size=SIZE, image_encoder="frozen",
                     frozen_encoder=read_encoder_meta(folder), frozen_encoder_path=str(folder), hidden=(32, 32),
                     gripper_width_index=0, **kw)


def frozen_agent(folder, **kw) -> SACAgent:
    torch.manual_seed(0)
    return SACAgent(frozen_config(folder, **kw))


def observation(seed: int = 0, image_size=SIZE) -> dict:
    rng = np.random.default_rng(seed)
    obs = {"state": rng.normal(size=STATE_DIM).astype(np.float32)}
    for cam in CAMS:
        obs[cam] = rng.integers(0, 256, (*image_size, 3), dtype=np.uint8)
    return obs


def image_spec(image_size=SIZE) -> dict:
    return {"state": ((STATE_DIM,), np.dtype(np.float32)),
            **{cam: ((*image_size, 3), np.dtype(np.uint8)) for cam in CAMS}}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread, as training runs: small tensors on a busy 2-core machine are many times
    slower when threads contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Four scripted PickCube takes with front + wrist frames at 32x32 (all successful)."""
    from robot_rl.commands.record import record_rollouts

    out = record_rollouts(tmp_path_factory.mktemp("demos") / "demos.zarr", "PickCube", 4, noise=0.1, images=True,
                          image_size=SIZE, cameras=CAMS)
    assert out["successes"] == 4
    return out["path"]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """Two encoder folders of the same architecture with different weights: A and B."""
    root = tmp_path_factory.mktemp("encoders")
    return make_encoder(root / "a", seed=0), make_encoder(root / "b", seed=1)


# ------------------------------------------------------------------ encoder folders
def test_save_load_round_trip_keeps_the_features_and_the_sha(tmp_path):
    torch.manual_seed(0)
    encoder = FrozenEncoder({**DRQ, "cameras": list(CAMS), "image_size": [64, 64], "objective": "test"})
    path = encoder.save(tmp_path / "enc")
    assert path == tmp_path / "enc" / ENCODER_FILE
    loaded = FrozenEncoder.load(tmp_path / "enc")
    assert loaded.sha == encoder.sha == read_encoder_meta(tmp_path / "enc")["sha"]
    assert loaded.sha == weights_sha(loaded.backbones.state_dict())
    assert FrozenEncoder.load(path).sha == loaded.sha  # the file itself names the encoder too
    images = {cam: torch.randint(0, 256, (3, 64, 64, 3), dtype=torch.uint8) for cam in CAMS}
    ours, theirs = encoder.features(images), loaded.features(images)
    for cam in CAMS:
        assert ours[cam].dtype == torch.float16 and tuple(ours[cam].shape) == (3, *encoder.feature_shape)
        assert torch.equal(ours[cam], theirs[cam])
    assert encoder.feature_shape == (5, 5, 32)  # 64 -> 31 -> 15 -> 7 -> 5, 32 channels
    assert not torch.equal(ours["front"], encoder.features({"front": images["front"].flip(1)})["front"])
    # the sha is of the weights alone: saving again, elsewhere, gives the same one
    loaded.save(tmp_path / "again")
    assert read_encoder_meta(tmp_path / "again")["sha"] == encoder.sha
    # frozen: no gradients, and train() does not move BatchNorm statistics or dropout
    assert not any(p.requires_grad for p in loaded.parameters())
    assert not loaded.train().training
    with pytest.raises(FrozenEncoderError, match=r"got front images of shape \(32, 32, 3\), not \(64, 64, 3\)"):
        loaded.features({"front": torch.zeros(1, 32, 32, 3, dtype=torch.uint8)})


def test_a_changed_weights_file_is_refused_in_one_line(tmp_path):
    path = make_encoder(tmp_path / "enc") / ENCODER_FILE
    tensors = load_file(str(path))
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    key = sorted(tensors)[0]
    tensors[key] = tensors[key] + 0.01  # same names and shapes, other values
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(FrozenEncoderError) as err:
        FrozenEncoder.load(tmp_path / "enc")
    message = str(err.value)
    assert str(path) in message and "do not match their sha" in message and "\n" not in message
    # a truncated file: named, one line
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(FrozenEncoderError, match=re.escape(str(path))) as err:
        FrozenEncoder.load(tmp_path / "enc")
    assert "\n" not in str(err.value)


def test_read_encoder_meta_refuses_what_is_not_an_encoder_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FrozenEncoderError, match="no encoder.safetensors there.*robot-rl encoder pretrain"):
        read_encoder_meta(tmp_path / "empty")
    other = tmp_path / "other"
    other.mkdir()
    save_file({"w": torch.zeros(2)}, str(other / ENCODER_FILE))  # a safetensors file, no encoder meta
    with pytest.raises(FrozenEncoderError, match=f"{re.escape(str(other / ENCODER_FILE))} is not a robot-rl encoder"):
        read_encoder_meta(other)
    meta = {"backbone": "drq", "cameras": ["front"], "image_size": [32, 32], "sha": "0" * 64}
    for missing in ("sha", "channels"):  # its description, or what its backbone needs, left out
        described = {**DRQ, **meta}
        del described[missing]
        save_file({"w": torch.zeros(2)}, str(other / ENCODER_FILE), metadata={"meta": json.dumps(described)})
        with pytest.raises(FrozenEncoderError, match=f"is not a robot-rl encoder \\(KeyError: '{missing}'\\)"):
            read_encoder_meta(other)
    (other / ENCODER_FILE).write_bytes(b"not a safetensors file at all")
    with pytest.raises(FrozenEncoderError, match="is not a robot-rl encoder"):
        read_encoder_meta(other)


def test_check_encoder_fits_names_the_image_size_and_the_missing_camera(encoders):
    meta = read_encoder_meta(encoders[0])
    check_encoder_fits(meta, CAMS, SIZE, "enc")
    check_encoder_fits(meta, ("wrist",), [32, 32], "enc")  # a subset of its cameras is fine
    with pytest.raises(FrozenEncoderError, match="enc was trained on 32x32 frames, not 64x64: use --image-size 32 32"):
        check_encoder_fits(meta, CAMS, (64, 64), "enc")
    with pytest.raises(FrozenEncoderError, match=r"backbones for cameras \['front', 'wrist'\], not \['side'\]"):
        check_encoder_fits(meta, ("front", "side"), SIZE, "enc")


# ------------------------------------------------------------------ train refuses a misfit before any work
def test_train_cli_refuses_a_frozen_encoder_that_does_not_fit_in_one_line(tmp_path, encoders, capsys, monkeypatch):
    import robot_rl.commands.train as train_module

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(train_module, "_train", no_training)
    enc = str(encoders[0])
    run = tmp_path / "run"
    base = ["train", "--steps", "10", "--run-dir", str(run)]
    assert main(base + ["--obs", "state", "--frozen-encoder", enc]) == 2
    one_line_error(capsys.readouterr().err, enc, "needs --obs pixels")
    assert main(base + ["--obs", "pixels", "--image-size", "64", "--frozen-encoder", enc]) == 2
    one_line_error(capsys.readouterr().err, "trained on 32x32 frames, not 64x64", "--image-size 32 32")
    front_only = make_encoder(tmp_path / "front_only", cameras=("front",))
    assert main(base + ["--obs", "pixels", "--image-size", "32", "--frozen-encoder", str(front_only)]) == 2
    one_line_error(capsys.readouterr().err, str(front_only), "not ['wrist']")
    assert main(base + ["--obs", "pixels", "--image-size", "32", "--frozen-encoder", str(tmp_path / "nowhere")]) == 2
    one_line_error(capsys.readouterr().err, "no encoder.safetensors")
    # the frozen encoder is the camera encoder: another one asked for as well is a contradiction
    assert main(base + ["--obs", "pixels", "--image-size", "32", "--frozen-encoder", enc,
                        "--image-encoder", "resnet18"]) == 2
    one_line_error(capsys.readouterr().err, "--frozen-encoder", "--image-encoder")
    assert main(base + ["--obs", "pixels", "--image-size", "32", "--agent", "image_encoder=frozen"]) == 2
    one_line_error(capsys.readouterr().err, "--frozen-encoder DIR")
    assert not run.exists()


# ------------------------------------------------------------------ the agent reads features
def test_cache_features_and_replay_spec(encoders):
    agent = frozen_agent(encoders[0])
    encoder = FrozenEncoder.load(encoders[0])
    assert agent.frozen_sha == encoder.sha
    obs = observation()
    cached = agent.cache_features(obs)
    assert np.array_equal(cached["state"], obs["state"])
    for cam in CAMS:
        assert cached[cam].dtype == np.float16 and cached[cam].shape == encoder.feature_shape == (1, 1, 32)
        expected = encoder.features({cam: torch.as_tensor(obs[cam])[None]})[cam][0].numpy()
        assert np.array_equal(cached[cam], expected)
    assert agent.cache_features(cached) is cached  # features already: as they are
    spec = agent.replay_spec(image_spec())
    assert spec == {"state": ((STATE_DIM,), np.dtype(np.float32)),
                    **{cam: ((1, 1, 32), np.dtype(np.float16)) for cam in CAMS}}
    # an agent with a trainable encoder keeps images everywhere
    torch.manual_seed(0)
    images_agent = SACAgent(SACConfig(state_dim=STATE_DIM, cameras=CAMS, image_size=SIZE, hidden=(32, 32),
                                      gripper_width_index=0))
    assert images_agent.frozen_sha is None
    assert images_agent.replay_spec(image_spec()) == image_spec()
    assert images_agent.cache_features(obs) is obs


def test_a_frozen_agent_acts_on_images_as_on_their_features(encoders):
    agent = frozen_agent(encoders[0], residual_scale=0.5)  # the residual base reads its own head too
    assert agent.base_encoder is not None
    for seed in range(3):
        obs = observation(seed)
        on_images = agent.act(obs, deterministic=True)
        assert np.array_equal(on_images, agent.act(agent.cache_features(obs), deterministic=True))
        assert on_images.shape == (7,) and np.all(np.abs(on_images) <= 1)
    assert not np.array_equal(agent.act(observation(0), True), agent.act(observation(1), True))


def test_an_agent_made_for_one_encoder_refuses_another_encoders_folder(encoders):
    config = frozen_config(encoders[0])
    config.frozen_encoder_path = str(encoders[1])
    with pytest.raises(FrozenEncoderError, match="not the encoder this agent was made for"):
        SACAgent(config)


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "trainable"])
def test_cloning_trains_the_base_encoder_and_rl_updates_leave_it(encoders, frozen):
    """With cameras and a residual base, the base reads its own image encoder: ``pretrain_actor``
    (behaviour cloning) trains it, the critic / actor updates that follow never move it."""
    if frozen:
        agent = frozen_agent(encoders[0], residual_scale=0.5)
    else:
        torch.manual_seed(0)
        agent = SACAgent(SACConfig(state_dim=STATE_DIM, cameras=CAMS, image_size=SIZE, hidden=(32, 32),
                                   gripper_width_index=0, residual_scale=0.5))
    spec = agent.replay_spec(image_spec())
    replay = MixedReplay(ReplayBuffer(64, spec, 7, seed=0, features=agent.frozen_sha),
                         ReplayBuffer(64, spec, 7, seed=1, features=agent.frozen_sha), encode=agent.cache_features)
    rng = np.random.default_rng(0)
    for t in range(20):
        action = rng.uniform(-1, 1, 7).astype(np.float32)
        replay.add_demo(Transition(observation(t), action, float(t % 2), observation(t + 1), False, t == 19))
        replay.add(Transition(observation(100 + t), action, 0.0, observation(101 + t), False, t == 19))
    agent.fit_normalizer(np.stack([observation(t)["state"] for t in range(20)]))

    def snapshot(module):
        return {k: v.clone() for k, v in module.state_dict().items()}

    frozen_before = snapshot(agent.frozen) if frozen else None
    base_encoder, encoder = snapshot(agent.base_encoder), snapshot(agent.encoder)
    for _ in range(3):
        agent.pretrain_actor(replay.demo.sample(16))
    cloned = snapshot(agent.base_encoder)
    assert any(not torch.equal(cloned[k], base_encoder[k]) for k in cloned)  # cloning trained it
    assert all(torch.equal(agent.encoder.state_dict()[k], v) for k, v in encoder.items())  # not the critic's
    base = snapshot(agent.base)
    for _ in range(3):
        agent.update(replay.sample(16))
    assert all(torch.equal(agent.base_encoder.state_dict()[k], v) for k, v in cloned.items())
    assert all(torch.equal(agent.base.state_dict()[k], v) for k, v in base.items())
    assert any(not torch.equal(agent.encoder.state_dict()[k], v) for k, v in encoder.items())  # the critic's moved
    if frozen:
        assert all(torch.equal(agent.frozen.state_dict()[k], v) for k, v in frozen_before.items())


# ------------------------------------------------------------------ replays and checkpoints of another encoder
def test_a_replay_of_one_encoders_features_loads_for_no_other(tmp_path, encoders):
    sha_a, sha_b = (read_encoder_meta(e)["sha"] for e in encoders)
    agent = frozen_agent(encoders[0])
    spec = agent.replay_spec(image_spec())
    online = ReplayBuffer(16, spec, 7, seed=0, features=sha_a)
    replay = MixedReplay(online, ReplayBuffer(16, spec, 7, seed=1, features=sha_a), encode=agent.cache_features)
    first = observation(0)
    replay.add(Transition(first, np.zeros(7, np.float32), 0.0, observation(1), False, False))
    # what entered is the encoder's features of the frame
    sampled = online.sample(1)
    assert np.array_equal(sampled["obs"]["front"][0], agent.cache_features(first)["front"])
    path = tmp_path / "online.npz"
    online.save(path)
    assert ReplayBuffer.load(path, sha_a).features == sha_a
    for other, says in ((sha_b, f"features of frozen encoder {sha_b[:12]}"), (None, "camera images")):
        with pytest.raises(FeatureMismatch) as err:
            ReplayBuffer.load(path, other)
        message = str(err.value)
        assert str(path) in message and f"holds features of frozen encoder {sha_a[:12]}" in message and says in message
    images = ReplayBuffer(16, image_spec(), 7, seed=0)
    images.add(Transition(first, np.zeros(7, np.float32), 0.0, observation(1), False, False))
    images.save(tmp_path / "images.npz")
    with pytest.raises(FeatureMismatch, match="holds camera images, but this agent reads features of frozen encoder"):
        ReplayBuffer.load(tmp_path / "images.npz", sha_a)
    # both buffers of a checkpoint: the mismatch is a CheckpointError naming the file
    ckpt = tmp_path / "step_000000001"
    replay.save(ckpt / "replay")
    assert load_replay(ckpt, sha_a).online.features == sha_a
    assert MixedReplay.load(ckpt / "replay", sha_a).demo.features == sha_a
    with pytest.raises(FeatureMismatch):
        MixedReplay.load(ckpt / "replay", sha_b)
    with pytest.raises(CheckpointError, match=re.escape(str(ckpt / "replay" / "online.npz"))):
        load_replay(ckpt, sha_b)
    with pytest.raises(CheckpointError, match="start a new run"):
        load_replay(ckpt, None)


def test_check_same_encoder_refuses_a_checkpoint_of_another_encoder(tmp_path, encoders):
    a, b = frozen_config(encoders[0]), frozen_config(encoders[1])
    ckpt = tmp_path / "ckpt"
    check_same_encoder(a, frozen_config(encoders[0]), ckpt)
    with pytest.raises(CheckpointError) as err:
        check_same_encoder(a, b, ckpt)
    sha_a, sha_b = a.frozen_encoder["sha"], b.frozen_encoder["sha"]
    assert str(ckpt) in str(err.value) and sha_a[:12] in str(err.value) and sha_b[:12] in str(err.value)
    larger = make_encoder(tmp_path / "larger", image_size=(64, 64))
    at_64 = SACConfig(state_dim=STATE_DIM, cameras=CAMS, image_size=(64, 64), image_encoder="frozen",
                      frozen_encoder=read_encoder_meta(larger))
    with pytest.raises(CheckpointError, match="frozen drq encoder on 32x32 frames .*, not a frozen drq encoder on 64x64"):
        check_same_encoder(a, at_64, ckpt)
    trainable = SACConfig(state_dim=STATE_DIM, cameras=CAMS, image_size=SIZE)
    with pytest.raises(CheckpointError, match="trained with a frozen drq encoder on 32x32 frames.*not a trainable drq"):
        check_same_encoder(a, trainable, ckpt)
    with pytest.raises(CheckpointError, match="trained with a trainable drq encoder"):
        check_same_encoder(trainable, a, ckpt)
    check_same_encoder(trainable, SACConfig(state_dim=STATE_DIM, cameras=CAMS, image_size=SIZE), ckpt)


def test_the_actor_refuses_weights_of_a_learner_with_another_encoder(encoders):
    from robot_rl.actor import LearnerClient
    from robot_rl.runtime.transport import inprocess_pair

    learner_agent, policy = frozen_agent(encoders[0], residual_scale=0.5), frozen_agent(encoders[0], residual_scale=0.5)
    with torch.no_grad():
        for p in learner_agent.actor.parameters():
            p.add_(0.5)
    weights = {k: v.numpy() for k, v in learner_agent.policy_state_dict().items()}
    actor_end, learner_end = inprocess_pair()
    errors = []
    client = LearnerClient(actor_end, policy, on_error=errors.append)
    before = {k: v.clone() for k, v in policy.policy_state_dict().items()}
    sha_b = read_encoder_meta(encoders[1])["sha"]
    for version, theirs in ((1, sha_b), (2, None)):
        learner_end.send("weights", weights, {"version": version, "updates": 1, "frozen_encoder": theirs})
        client.poll(5.0)
        assert client.weights_version == 0
        assert all(torch.equal(policy.policy_state_dict()[k], v) for k, v in before.items())
    assert len(errors) == 2 and all("\n" not in e and "same frozen_encoder" in e for e in errors)
    assert sha_b[:12] in errors[0] and policy.frozen_sha[:12] in errors[0]
    assert "camera images (no frozen encoder)" in errors[1]
    learner_end.send("weights", weights, {"version": 3, "updates": 1, "frozen_encoder": policy.frozen_sha})
    client.poll(5.0)
    assert client.weights_version == 3 and len(errors) == 2
    torch.testing.assert_close(policy.actor.state_dict(), learner_agent.actor.state_dict())


# ------------------------------------------------------------------ robot-rl encoder pretrain
def test_encoder_pretrain_trains_behaviour_cloning_alone_by_default(tmp_path, store, capsys):
    # the probe's ranking did not predict the policy's success (docs/CALIBRATION.md): one default
    out = tmp_path / "enc"
    assert main(["encoder", "pretrain", "--data", str(store), "--out", str(out), "--steps", "5",
                 "--probe-steps", "5"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report["candidates"]) == {"bc"} and report["chosen"] == "bc"
    assert FrozenEncoder.load(out).meta["objective"] == "bc"


def test_encoder_pretrain_writes_the_best_candidate_and_its_report(tmp_path, store, capsys):
    out = tmp_path / "enc"
    assert main(["encoder", "pretrain", "--data", str(store), "--out", str(out), "--steps", "5",
                 "--probe-steps", "5", "--objective", "bc", "autoencoder"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    report = json.loads((out / "report.json").read_text())
    assert printed == report
    assert set(report["candidates"]) == {"bc", "autoencoder"}
    losses = {name: c["held_out_loss"] for name, c in report["candidates"].items()}
    assert report["chosen"] == min(losses, key=losses.get)
    assert all(np.isfinite(v) for v in losses.values())
    assert report["held_out_frames"] > 0 and report["frames"] > report["held_out_frames"]
    encoder = FrozenEncoder.load(out)
    assert encoder.sha == report["sha"] and encoder.meta["objective"] == report["chosen"]
    assert encoder.cameras == CAMS and encoder.image_size == SIZE
    assert list(encoder.feature_shape) == report["feature_shape"]
    assert encoder.meta["chosen_from"] == ["autoencoder", "bc"] and encoder.meta["data"] == [str(store)]


def test_end_pose_targets_are_where_each_take_ended_relative_to_the_frame():
    """bc_goal's second target: the take's last TCP position minus the frame's (decimetres) and
    the yaw still to turn, wrapped to (-pi, pi], about the base's z axis."""
    from robot_rl.commands.encoder import end_pose_targets
    from robot_rl.geometry import END_POSE_SCALE as GOAL_SCALE
    from robot_rl.geometry import HOME_ROTATION, matrix_to_quat, rotvec_to_matrix

    def tcp_state(pos, yaw):  # the gripper down, turned by yaw about the base's z
        state = np.zeros(20, np.float32)
        state[:3], state[3:7] = pos, matrix_to_quat(rotvec_to_matrix(np.array([0.0, 0.0, yaw])) @ HOME_ROTATION)
        return state

    end = tcp_state((0.55, 0.03, 0.10), np.radians(170))
    state = np.stack([tcp_state((0.50, 0.00, 0.15), np.radians(-170)), end])
    targets = end_pose_targets({"state": state, "end_state": np.stack([end, end])})
    assert GOAL_SCALE == 10.0
    np.testing.assert_allclose(targets[0], [0.5, 0.3, -0.5, np.radians(-20)], atol=1e-5)  # the short way round
    np.testing.assert_allclose(targets[1], 0.0, atol=1e-6)


def test_encoder_pretrain_bc_goal_trains_one_backbone_on_both_targets(tmp_path, store, capsys):
    out = tmp_path / "enc"
    assert main(["encoder", "pretrain", "--data", str(store), "--out", str(out), "--steps", "5",
                 "--probe-steps", "5", "--objective", "bc_goal"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report["candidates"]) == {"bc_goal"} and report["chosen"] == "bc_goal"
    encoder = FrozenEncoder.load(out)
    assert encoder.meta["objective"] == "bc_goal" and encoder.sha == report["sha"]
    # the second target changes what the backbone learns: another encoder than bc's from the same start
    assert main(["encoder", "pretrain", "--data", str(store), "--out", str(tmp_path / "bc"), "--steps", "5",
                 "--probe-steps", "5", "--objective", "bc"]) == 0
    assert FrozenEncoder.load(tmp_path / "bc").sha != encoder.sha


def test_encoder_pretrain_measures_the_classifiers_and_your_resnet18(tmp_path, store, capsys):
    from robot_rl.agents.encoders import ResNet18Trunk
    from robot_rl.commands.encoder import from_classifier
    from robot_rl.reward.classifier import Calibration, ClassifierConfig, SuccessClassifier, save_classifier

    torch.manual_seed(0)
    classifier = SuccessClassifier(ClassifierConfig(cameras=CAMS, image_size=SIZE, hidden=(16,), features=8))
    save_classifier(tmp_path / "clf", classifier, Calibration(threshold=0.0, target_fpr=0.01))
    taken = from_classifier(tmp_path / "clf", CAMS, SIZE)
    for cam in CAMS:  # the classifier's own conv trunk, frozen
        for k, v in classifier.encoder.encoders[cam].convnet.state_dict().items():
            assert torch.equal(taken.backbones[cam].net.state_dict()[k], v)
    save_file(ResNet18Trunk().state_dict(), str(tmp_path / "resnet18.safetensors"))
    out = tmp_path / "enc"
    assert main(["encoder", "pretrain", "--data", str(store), "--out", str(out), "--objective", "bc", "--classifier",
                 str(tmp_path / "clf"), "--pretrained", str(tmp_path / "resnet18.safetensors"), "--steps", "5",
                 "--probe-steps", "5"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report["candidates"]) == {"bc", "classifier", "pretrained"}
    losses = {name: c["held_out_loss"] for name, c in report["candidates"].items()}
    assert report["chosen"] == min(losses, key=losses.get)
    assert report["candidates"]["pretrained"]["feature_bytes_per_frame"] == 2 * 2 * 512  # 1x1x512 float16, 2 cameras
    assert FrozenEncoder.load(out).sha == report["sha"]


def test_encoder_pretrain_bad_input_is_one_line_before_any_training(tmp_path, store, capsys, monkeypatch):
    from robot_rl.commands import encoder as pretrain
    from robot_rl.commands.record import record_rollouts
    from robot_rl.reward.classifier import Calibration, ClassifierConfig, SuccessClassifier, save_classifier

    def no_training(*args, **kwargs):
        raise AssertionError("a candidate was trained")

    monkeypatch.setattr(pretrain, "train_bc", no_training)
    monkeypatch.setattr(pretrain, "train_autoencoder", no_training)
    one = record_rollouts(tmp_path / "one.zarr", "PickCube", 1, noise=0.1, images=True, image_size=SIZE,
                          cameras=("front",))["path"]
    failed = record_rollouts(tmp_path / "failed.zarr", "PickCube", 2, noise=1.0, images=True, image_size=SIZE,
                             cameras=CAMS, keep="failures")["path"]
    save_classifier(tmp_path / "clf_front", SuccessClassifier(ClassifierConfig(cameras=("front",), image_size=SIZE,
                                                                               hidden=(16,), features=8)),
                    Calibration(threshold=0.0, target_fpr=0.01))
    out = tmp_path / "enc"
    base = ["encoder", "pretrain", "--out", str(out), "--steps", "5", "--probe-steps", "5"]
    cases = [
        (["--data", str(one)], [str(one), "no camera 'wrist'", "--images --cameras"]),
        (["--data", str(store), "--cameras", "front", "side"], [str(store), "no camera 'side'"]),
        (["--data", str(one), "--cameras", "front"], ["at least 2 successful episodes"]),
        (["--data", str(failed)], ["no successful episode"]),
        (["--data", str(store), "--objective", "contrastive"], ["unknown objective 'contrastive'"]),
        (["--data", str(store), "--objective", "classifier"], ["--classifier DIR"]),
        (["--data", str(store), "--pretrained", str(tmp_path / "missing.pt")], ["missing.pt", "not found"]),
        (["--data", str(store), "--classifier", str(tmp_path / "nothing")], ["nothing"]),
        (["--data", str(store), "--classifier", str(tmp_path / "clf_front")], ["clf_front", "['front']"]),
        (["--data", str(tmp_path / "nowhere.zarr")], ["nowhere.zarr"]),
        (["--data", str(store), "--steps", "0"], ["--steps"]),
        (["--data", str(store), "--held-out", "1"], ["--held-out"]),
    ]
    for args, needles in cases:
        assert main(base + args) == 2, args
        one_line_error(capsys.readouterr().err, *needles)
    assert not (out / ENCODER_FILE).exists()


# ------------------------------------------------------------------ a tiny frozen-encoder run, end to end
def test_a_frozen_pixel_run_evaluates_without_its_encoder_folder_and_resumes_only_with_that_encoder(
        tmp_path, store, capsys):
    from robot_rl.runtime.checkpoint import load_agent, resolve_checkpoint

    enc = make_encoder(tmp_path / "enc", seed=0)
    encoder = FrozenEncoder.load(enc)
    shutil.copytree(enc, tmp_path / "moved")
    run = tmp_path / "run"
    assert main(["train", "--task", "PickCube", "--obs", "pixels", "--image-size", "32", "--demos", str(store),
                 "--frozen-encoder", str(enc), "--steps", "30", "--learner", "inline", "--eval-every", "30",
                 "--eval-episodes", "1", "--final-eval-episodes", "1", "--pretrain-steps", "10",
                 "--critic-warmup-steps", "10", "--batch-size", "32", "--no-progress", "--run-dir", str(run),
                 "--agent", "hidden=[64,64]"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["env_steps"] == 30 and summary["demos"] == 4
    ckpt = resolve_checkpoint(run)
    # the replay holds the encoder's float16 features, and says whose
    replay = load_replay(ckpt, encoder.sha)
    assert len(replay.online) == 30 and len(replay.demo) > 0
    for buf in (replay.online, replay.demo):
        assert buf.features == encoder.sha
        assert buf.obs_spec["front"] == ((1, 1, 32), np.dtype(np.float16))
    # the checkpoint holds the frozen backbone itself
    agent = load_agent(ckpt / "agent.safetensors", with_optimizers=False)
    assert agent.frozen_sha == encoder.sha
    for k, v in encoder.backbones.state_dict().items():
        assert torch.equal(agent.frozen.backbones.state_dict()[k], v)
    shutil.rmtree(enc)
    assert main(["eval", "--checkpoint", str(run), "--episodes", "1"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["episodes"] == 1
    # another encoder, in the run's own folder or given anew: one line, nothing lost
    make_encoder(enc, seed=1)
    other = make_encoder(tmp_path / "other", seed=1)
    assert main(["train", "--resume", str(run), "--steps", "40"]) == 2
    one_line_error(capsys.readouterr().err, str(ckpt), encoder.sha[:12], "use it with its own encoder")
    assert main(["train", "--resume", str(run), "--steps", "40", "--frozen-encoder", str(other)]) == 2
    one_line_error(capsys.readouterr().err, str(ckpt), encoder.sha[:12])
    assert resolve_checkpoint(run) == ckpt and len(load_replay(ckpt, encoder.sha).online) == 30
    # the run's own encoder, moved elsewhere, resumes it
    assert main(["train", "--resume", str(run), "--steps", "40", "--frozen-encoder", str(tmp_path / "moved")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == 40


# ------------------------------------------------------------------ learning from pixels on a CPU
PIXEL_STEPS = 1500
PIXEL_EPISODES = 40  # each evaluation's
PIXEL_SEED = 1
PIXEL_ENCODER_STEPS = 250  # the backbone's behaviour-cloning pretraining (500 before 2026-11-30: 75 s more)
# measured on the 2-core AMD EPYC (one seed gives one run on one kind of CPU; another CPU's kernels
# round differently, like another seed), over 40 episodes after 1,500 steps with the simulated human:
# the backbone pretrained 250 steps, seeds 0-3: 0.825 -> 0.975, 0.55 -> 0.90, 0.65 -> 0.875,
# 0.875 -> 0.90; 500 steps: seed 1 0.50 -> 0.775, seed 0 0.90 -> 0.85; 3,000 steps over 20 episodes
# (earlier): the Xeon 0.85 -> 0.95, the EPYC 0.95 -> 0.85. Without the human a strong clone falls into an early dip
# (a clone of 100 BC steps 0.85 -> 0.50 at 3,000 steps, of 50 steps 0.65 -> 0.20), see docs/CALIBRATION.md
PIXEL_LIFT = 0.10  # a weak clone is lifted by at least this (4 episodes of 40) ...
PIXEL_KEEP = 0.75  # ... and a strong one kept at least this high: the final policy >= min(clone + LIFT, KEEP)


@pytest.mark.learning
@pytest.mark.timeout(1800)  # a bound against a hang: 1,500 pixel steps with the human take 8-16 min on a loaded 2-core machine
def test_pixels_through_a_frozen_encoder_learn_past_a_weak_clone_and_keep_a_strong_one(tmp_path):
    """Issue 20's learning test, with issue 30's human in the loop: PickCube from what a real cell
    sees (front + wrist 64x64 + the arm's state, no object pose), 20 scripted demos, a
    behaviour-cloning backbone pretrained on them and frozen, features cached in the replay,
    ground-truth reward, and the simulated human as the main job runs it (eagerness 0.5, its
    corrections also cloned into the base, the grasp head greedy, target entropy -|A|). The base is
    cloned briefly (200 steps), which leaves it anywhere from half to nine in ten by the seed (and
    the CPU); 1,500 online steps must lift a weak clone past itself and keep a strong one, the
    policy alone graded over 40 evaluation episodes each. The learner runs inline (one seed gives
    one run either way)."""
    from robot_rl.commands.encoder import pretrain_encoder
    from robot_rl.agents.sac import HUMAN_IN_THE_LOOP_EXPLORATION
    from robot_rl.commands.record import record_rollouts
    from robot_rl.commands.train import TrainConfig, train

    demos = record_rollouts(tmp_path / "demos.zarr", "PickCube", 20, noise=0.1, seed=10_000, images=True,
                            image_size=(64, 64), cameras=CAMS, keep="successes")
    assert demos["successes"] == 20
    report = pretrain_encoder([demos["path"]], tmp_path / "encoder", cameras=CAMS, objectives=("bc",),
                              steps=PIXEL_ENCODER_STEPS, probe_steps=20, log=lambda m: None)
    assert report["chosen"] == "bc" and report["feature_shape"] == [5, 5, 32]
    summary = train(TrainConfig(task="PickCube", obs="pixels", demo_store=str(demos["path"]),
                                frozen_encoder=str(tmp_path / "encoder"), env_steps=PIXEL_STEPS, seed=PIXEL_SEED,
                                eval_every=PIXEL_STEPS, eval_episodes=PIXEL_EPISODES,
                                final_eval_episodes=PIXEL_EPISODES, learner="inline",
                                pretrain_steps=200, critic_warmup_steps=500, run_dir=str(tmp_path / "run"),
                                human_eagerness=0.5, intervention_bc_steps=1, progress=False,
                                agent=dict(HUMAN_IN_THE_LOOP_EXPLORATION)),  # the main job's exploration
                    log=lambda m: None)
    cloned = summary["evals"][0]["success_rate"]  # the cloned base alone, before any online step
    assert summary["evals"][0]["env_steps"] == 0 and summary["final_eval_episodes"] == PIXEL_EPISODES
    assert summary["updates"] >= 2 * PIXEL_STEPS and summary["demos"] == 20
    assert summary["interventions"] > 0  # the human corrected the learning policy; the evaluations ran it alone
    assert summary["final_success_rate"] >= min(cloned + PIXEL_LIFT, PIXEL_KEEP) - 1e-9, summary["evals"]


# ------------------------------------------------------------------ the base's actions kept with the observations
class _Outbox:
    """An endpoint that keeps what the learner sends."""

    def __init__(self):
        self.sent = []

    def send(self, kind, arrays=None, meta=None):
        self.sent.append(kind)


def _base_learner(folder, run_dir, resume_from=None, **learning):
    from robot_rl.config import TrainConfig
    from robot_rl.runtime.learner import build_learner

    agent_cfg = frozen_config(folder, residual_scale=0.5, feature_augment_pad=learning.pop("pad", 0))
    cfg = TrainConfig(pretrain_steps=20, critic_warmup_steps=2, batch_size=16, replay_capacity=400, demo_capacity=400,
                      **learning)
    torch.manual_seed(0)
    return build_learner(cfg, agent_cfg, image_spec(), _Outbox(), run_dir, resume_from)


def _steps(learner, first_seed, count, demo):
    for k in range(count):
        t = Transition(observation(first_seed + k), np.zeros(7, np.float32), 0.0, observation(first_seed + k + 1),
                       False, k == count - 1, False)
        learner.replay.add_demo(t) if demo else learner.replay.add(t)


def _base_at(agent, obs):
    """The base run afresh at stored observations (what an update computed before it was kept)."""
    with torch.no_grad():
        o = agent._obs({k: v for k, v in obs.items() if k != BASE_ACTION}, augment=False)
        return torch.tanh(agent.base(agent.base_encoder(o))).numpy()


def test_a_base_nothing_trains_after_cloning_is_kept_with_each_stored_observation(tmp_path, encoders):
    from robot_rl.runtime.checkpoint import write_checkpoint

    learner = _base_learner(encoders[0], tmp_path)
    assert learner.keeps_base_actions and learner.replay.demo.obs_spec[BASE_ACTION] == ((6,), np.dtype(np.float32))
    _steps(learner, 0, 12, demo=True)
    before_cloning = learner.replay.demo._obs[BASE_ACTION][:13].copy()
    learner.begin()  # cloning changes the base: every stored action is computed again
    demo = learner.replay.demo
    stored = {k: v[:13] for k, v in demo._obs.items()}
    np.testing.assert_allclose(stored[BASE_ACTION], _base_at(learner.agent, stored), atol=1e-5)
    assert not np.allclose(stored[BASE_ACTION], before_cloning, atol=1e-3)
    _steps(learner, 100, 8, demo=False)  # online observations carry it as they come in
    online = {k: v[:9].copy() for k, v in learner.replay.online._obs.items()}
    np.testing.assert_allclose(online[BASE_ACTION], _base_at(learner.agent, online), atol=1e-5)
    # an update reading the kept actions is the update that runs the base (up to rounding)
    batch = learner.replay.sample(16)
    twin = copy.deepcopy(learner.agent)
    torch.manual_seed(1)  # the same noise and critic subsets for both
    kept = learner.agent.update(batch)
    torch.manual_seed(1)
    ran = twin.update({**batch, **{k: {n: v for n, v in batch[k].items() if n != BASE_ACTION}
                                   for k in ("obs", "next_obs")}})
    for name in ("critic_loss", "actor_loss", "residual_deviation"):
        assert float(kept[name]) == pytest.approx(float(ran[name]), rel=1e-4, abs=1e-6)
    # a resume recomputes them from the checkpoint's base, or keeps them no more if the base trains on
    ckpt = write_checkpoint(tmp_path, "step_000000008", learner.agent, learner.replay, {"env_steps": 8})
    learner.replay.online._obs[BASE_ACTION][:] = 0
    write_checkpoint(tmp_path, "zeroed", learner.agent, learner.replay, {"env_steps": 8})
    again = _base_learner(encoders[0], tmp_path, str(tmp_path / "checkpoints" / "zeroed"))
    np.testing.assert_allclose(again.replay.online._obs[BASE_ACTION][:9], online[BASE_ACTION], atol=1e-5)
    training_on = _base_learner(encoders[0], tmp_path, str(ckpt), intervention_bc_steps=1)
    assert not training_on.keeps_base_actions and BASE_ACTION not in training_on.replay.online.obs_spec
    assert len(training_on.replay.online) == 8


@pytest.mark.parametrize("learning, why", [({"intervention_bc_steps": 1}, "the human's corrections train the base"),
                                           ({"pad": 2}, "an update shifts what the base reads")])
def test_a_base_that_changes_is_run_in_each_update(tmp_path, encoders, learning, why):
    learner = _base_learner(encoders[0], tmp_path, **learning)
    assert not learner.keeps_base_actions, why
    assert BASE_ACTION not in learner.replay.online.obs_spec


def test_a_learner_resumed_from_another_agent_keeps_that_agents_base_actions(tmp_path, encoders):
    """The ROS learner node builds its learner, then resumes it from a checkpoint's agent: what
    enters the replay after (its demonstrations) carries that agent's base's actions, and what
    was stored before is recomputed with it."""
    learner = _base_learner(encoders[0], tmp_path)
    _steps(learner, 0, 4, demo=True)
    trained = copy.deepcopy(learner.agent)
    with torch.no_grad():
        for p in trained.base.parameters():
            p.add_(0.5)
    learner.resume_from(trained)
    _steps(learner, 50, 6, demo=True)
    stored = {k: v[:12] for k, v in learner.replay.demo._obs.items()}
    np.testing.assert_allclose(stored[BASE_ACTION], _base_at(trained, stored), atol=1e-5)
