"""The SAC agent: ensemble maths, grasp-critic targets, log-probs, weights without pickle."""

import numpy as np
import pytest
import torch

from robot_rl.agents.networks import CriticEnsemble, EnsembleLinear, StateDependentNoiseActor, TanhGaussianActor
from robot_rl.agents.sac import SACAgent, SACConfig, gripper_index, metrics_to_floats
from robot_rl.errors import InputError
from robot_rl.runtime.checkpoint import CheckpointError, check_compatible, load_agent, read_agent_config, save_agent
from robot_rl.runtime.transport import pack, unpack


def _batch(n=16, state_dim=8, action=None, reward=None, width=0.08, seed=0):
    rng = np.random.default_rng(seed)
    state = rng.normal(size=(n, state_dim)).astype(np.float32)
    state[:, 0] = width
    return {
        "obs": {"state": state},
        "next_obs": {"state": rng.normal(size=(n, state_dim)).astype(np.float32)},
        "action": action if action is not None else rng.uniform(-1, 1, (n, 7)).astype(np.float32),
        "reward": reward if reward is not None else rng.integers(0, 2, n).astype(np.float32),
        "bootstrap": np.full(n, 0.97, np.float32),
        "is_demo": np.arange(n) < n // 2,
    }


def _agent(**kw):
    torch.manual_seed(0)
    return SACAgent(SACConfig(state_dim=8, hidden=(32, 32), gripper_width_index=0, **kw))


def _encoded(agent, b):
    """An update's encodings of a device batch: (feat, next_feat, next_target_feat, next_base): the
    last the base's motion action at next_obs (None without a residual)."""
    with torch.no_grad():
        next_feat = agent.encoder(b.next_obs)
        return (agent.encoder(b.obs), next_feat, agent.target_encoder(b.next_obs),
                agent.base_motion(b.next_obs, next_feat) if agent.residual else None)


def _critic_loss(agent, b):
    feat, next_feat, next_target, next_base = _encoded(agent, b)
    return agent.critic_loss(feat, b.action[:, : agent.config.motion_dim], b.reward, b.bootstrap, next_feat,
                             next_target, next_base)


def _grasp_loss(agent, b):
    feat, next_feat, next_target, _ = _encoded(agent, b)
    return agent.grasp_loss(feat, b.obs["state"], b.action[:, -1], b.reward, b.bootstrap, next_feat, next_target,
                            b.demo_rows)


def _actor_loss(agent, b):
    feat = _encoded(agent, b)[0]
    return agent.actor_loss(feat, agent.base_motion(b.obs, feat) if agent.residual else None, b.action[:, : agent.config.motion_dim],
                            b.demo_rows)


def test_ensemble_linear_equals_separate_layers():
    layer = EnsembleLinear(4, 5, 3)
    x = torch.randn(4, 7, 5)
    out = layer(x)
    for i in range(4):
        torch.testing.assert_close(out[i], x[i] @ layer.weight[i] + layer.bias[i, 0])


def test_critic_members_are_independent_networks():
    critic = CriticEnsemble(3, 6, 2, hidden=(16, 16))
    q = critic(torch.randn(10, 6), torch.randn(10, 2))
    assert q.shape == (3, 10)
    assert not torch.allclose(q[0], q[1])
    # a gradient through member 0 touches only member 0's weights
    q[0].sum().backward()
    grad = critic.net[0].weight.grad
    assert grad[0].abs().sum() > 0 and grad[1:].abs().sum() == 0


def test_tanh_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    actor = TanhGaussianActor(4, 3, (16,))
    feats = torch.randn(64, 4)
    action, log_prob, _ = actor.sample(feats)
    mean, log_std = actor(feats)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1),
        [torch.distributions.TanhTransform(cache_size=1)],
    )
    keep = action.abs().max(-1).values < 0.999  # atanh is ill-conditioned at the edges
    torch.testing.assert_close(log_prob[keep], dist.log_prob(action)[keep], atol=2e-3, rtol=2e-3)


def test_gripper_index_uses_the_env_thresholds():
    idx = gripper_index(torch.tensor([1.0, 0.6, 0.5, 0.0, -0.5, -0.6, -1.0]))
    assert idx.tolist() == [0, 0, 1, 1, 1, 2, 2]  # close, stay, open


def test_grasp_penalty_only_for_commands_that_toggle_the_gripper():
    agent = _agent()
    n = 6
    action = np.zeros((n, 7), np.float32)
    action[:, 6] = [1, 1, -1, -1, 0, 0]  # close, close, open, open, stay, stay
    batch = _batch(n, action=action, reward=np.zeros(n, np.float32))
    batch["obs"]["state"][:, 0] = [0.08, 0.0, 0.08, 0.0, 0.08, 0.0]  # open, closed, ...
    b = agent._batch(batch)
    reward = agent.grasp_reward(b.obs["state"], gripper_index(b.action[:, -1]), b.reward)
    p = agent.config.grasp_penalty
    # close while open toggles, close while closed does not; open while closed toggles
    assert reward.tolist() == pytest.approx([-p, 0.0, 0.0, -p, 0.0, 0.0])


def test_grasp_critic_target_is_double_dqn():
    agent = _agent(grasp_margin=0.0)
    batch = _batch(8)
    b = agent._batch(batch)
    with torch.no_grad():
        for p in agent.target_grasp.parameters():  # online and target heads must disagree
            p.add_(0.5 * torch.randn_like(p))
        next_online = agent.grasp(agent.encoder(b.next_obs))
        next_target = agent.target_grasp(agent.target_encoder(b.next_obs))
        chosen = next_online.argmax(-1)
        reward = agent.grasp_reward(b.obs["state"], gripper_index(b.action[:, -1]), b.reward)
        expected = reward + b.bootstrap * next_target.gather(1, chosen[:, None]).squeeze(1)
        plain_dqn = reward + b.bootstrap * next_target.max(-1).values
    assert not torch.allclose(expected, plain_dqn), "heads agree: the test could not tell double DQN from DQN"
    captured = {}
    original = torch.nn.functional.mse_loss

    def spy(q, y):
        captured["y"] = y.clone()
        return original(q, y)

    import robot_rl.agents.sac as sac

    sac.F.mse_loss = spy
    try:
        _grasp_loss(agent, b)
    finally:
        sac.F.mse_loss = original
    torch.testing.assert_close(captured["y"], expected)


def test_grasp_margin_makes_demonstrated_command_greedy():
    agent = _agent(grasp_margin=0.1)
    action = np.zeros((32, 7), np.float32)
    action[:, 6] = -1.0  # the demos always command "open"
    batch = _batch(32, action=action, reward=np.zeros(32, np.float32))
    batch["is_demo"][:] = True
    for _ in range(150):
        agent.update(batch, update_actor=False)
    with torch.no_grad():
        greedy = agent.grasp(agent.encoder(agent._batch(batch).obs)).argmax(-1)
    assert (greedy == 2).float().mean() > 0.9


def test_redq_target_is_the_min_over_a_random_subset_of_the_target_ensemble(monkeypatch):
    """REDQ: every critic regresses onto r + bootstrap * min over num_target_critics target
    critics drawn at random for each update (not over all of them, not always the same ones)."""
    agent = _agent(num_critics=10, num_target_critics=2)
    assert agent.critic.n == 10 and agent.target_critic.n == 10
    target_forward = agent.target_critic.forward
    calls = []

    def recording(features, action, members=None):
        out = target_forward(features, action, members)
        calls.append((features, action, members))
        return out

    monkeypatch.setattr(agent.target_critic, "forward", recording)
    subsets = []
    for seed in range(8):
        b = agent._batch(_batch(16, seed=seed))
        with torch.no_grad():
            q = agent.critic(agent.encoder(b.obs), b.action[:, : agent.config.motion_dim])
        loss = _critic_loss(agent, b)[0].item()
        ((features, action, members),) = calls[-1:]
        subset = sorted(members.tolist())
        assert len(subset) == 2 and len(set(subset)) == 2 and all(0 <= i < 10 for i in subset)
        subsets.append(tuple(subset))
        with torch.no_grad():
            every = target_forward(features, action)  # [10, B]: all target critics
        y_subset = b.reward + b.bootstrap * every[members].min(0).values
        y_all = b.reward + b.bootstrap * every.min(0).values
        assert loss == pytest.approx(((q - y_subset) ** 2).mean(1).sum().item(), rel=1e-5)
        assert loss != pytest.approx(((q - y_all) ** 2).mean(1).sum().item(), rel=1e-5)  # not the full ensemble
    assert len(set(subsets)) > 1, subsets  # a fresh draw per update
    with pytest.raises(ValueError, match="num_target_critics"):
        _agent(num_critics=2, num_target_critics=3)


def test_td_targets_are_clipped_to_the_most_an_episode_can_return():
    """With ``max_return`` (1: a success reward that ends the episode) a target critic that
    overestimates cannot lift the critics' or the grasp head's regression targets above it
    (seed 1 of PickCubeSO101 diverged to Q 1.4 on average, up to 4.5, without it); without the
    bound the same critics regress onto the overestimate."""
    batch = _batch(16, reward=np.zeros(16, np.float32))
    targets = {}
    for bound in (None, 1.0):
        agent = _agent(max_return=bound, grasp_margin=0.0)
        with torch.no_grad():  # every target critic and the target grasp head say 5
            agent.target_critic.net[-1].bias.fill_(5.0)
            agent.target_critic.net[-1].weight.zero_()
            agent.target_grasp.net[-1].bias.fill_(5.0)
            agent.target_grasp.net[-1].weight.zero_()
        b = agent._batch(batch)
        with torch.no_grad():
            q = agent.critic(agent.encoder(b.obs), b.action[:, : agent.config.motion_dim])
            q_grasp = agent.grasp(agent.encoder(b.obs)).gather(1, gripper_index(b.action[:, -1])[:, None]).squeeze(1)
            critic_loss = _critic_loss(agent, b)[0].item()
            grasp_loss = _grasp_loss(agent, b)[0].item()
        grasp_reward = agent.grasp_reward(b.obs["state"], gripper_index(b.action[:, -1]), b.reward)
        y = torch.full((16,), 0.97 * 5.0) if bound is None else torch.ones(16)
        y_grasp = grasp_reward + 0.97 * 5.0 if bound is None else (grasp_reward + 0.97 * 5.0).clamp_max(1.0)
        assert critic_loss == pytest.approx(((q - y) ** 2).mean(1).sum().item(), rel=1e-5)
        assert grasp_loss == pytest.approx(((q_grasp - y_grasp) ** 2).mean().item(), rel=1e-5)
        targets[bound] = critic_loss
    assert targets[1.0] < targets[None] / 10


def test_update_moves_targets_by_polyak_averaging():
    agent = _agent(tau=0.5)
    before = agent.target_critic.net[0].weight.detach().clone()
    agent.update(_batch(16))
    online = agent.critic.net[0].weight.detach()
    torch.testing.assert_close(agent.target_critic.net[0].weight, before + 0.5 * (online - before))


def test_residual_policy_starts_at_the_base_policy():
    agent = _agent(residual_scale=0.5)
    feats = agent.encoder(agent._obs({"state": np.random.randn(5, 8).astype(np.float32)}, augment=False))
    _, _, mean = agent.policy(feats)
    base = torch.tanh(agent.base(feats))
    assert (mean - base).abs().max() < 0.05
    before = [p.clone() for p in agent.base.parameters()]
    agent.update(_batch(16))  # RL updates never touch the frozen base
    assert all(torch.equal(a, b) for a, b in zip(before, agent.base.parameters()))



def test_residual_penalty_holds_the_policy_at_the_base():
    """A noisy critic pulls the residual away from the cloned base; the penalty holds it there."""
    obs = {"state": np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32)}

    def drift(penalty):
        agent = _agent(residual_scale=0.5, residual_penalty=penalty, actor_lr=3e-3)
        for i in range(60):
            agent.update(_batch(32, seed=i))
        feats = agent.encoder(agent._obs(obs, augment=False))
        _, _, mean = agent.policy(feats)
        return (mean - torch.tanh(agent.base(feats))).abs().max().item()

    free, held = drift(0.0), drift(100.0)
    assert free > 0.1
    assert held < free / 4


def test_the_conservative_term_lowers_q_off_the_data_and_keeps_it_at_the_data():
    """Critic-only updates on a batch whose actions are all zero and pay 1 at the end: CQL's term
    leaves Q at the data's actions near 1 and pushes it below that elsewhere."""
    n = 64
    batch = _batch(n, action=np.zeros((n, 7), np.float32), reward=np.ones(n, np.float32))
    batch["bootstrap"][:] = 0.0
    states = {"state": batch["obs"]["state"]}
    far = torch.full((n, 6), 0.8)

    def q_at(weight):
        agent = _agent(conservative_weight=weight, critic_lr=3e-3)
        for _ in range(150):
            metrics = agent.update(batch, update_actor=False)
        with torch.no_grad():
            feat = agent.encoder(agent._obs(states, augment=False))
            return (agent.critic(feat, torch.zeros(n, 6)).mean().item(), agent.critic(feat, far).mean().item(),
                    metrics)

    plain_data, plain_far, plain_metrics = q_at(0.0)
    data, off, metrics = q_at(0.2)
    assert abs(data - 1.0) < 0.2 and abs(plain_data - 1.0) < 0.1
    assert off < plain_far - 0.3 and off < data - 0.3
    assert "conservative_penalty" in metrics and "conservative_penalty" not in plain_metrics
    assert "q_data" not in metrics


def test_a_bad_conservative_weight_is_refused_before_any_work():
    from robot_rl.config import TrainConfig

    for bad in (-0.5, float("nan")):
        with pytest.raises(InputError, match="conservative_weight .* must be a finite number >= 0"):
            TrainConfig(agent={"conservative_weight": bad}).validate()


def test_the_end_pose_head_learns_where_successful_episodes_ended_and_trains_the_encoder():
    """``end_pose_weight``: a head on the encoder's features fits the batch's end poses on the rows
    whose episode succeeded (``end_pose_mask``), its loss joined to the critic's; rows masked out do
    not count; an agent without it has no such head; a batch without end poses is refused."""
    from robot_rl.replay.buffer import END_POSE, END_POSE_MASK

    agent = _agent(end_pose_weight=1.0)
    b = _batch(n=64)
    target = b["obs"]["state"][:, 1:5] * 0.5  # a function of the observation, as a take's end is of the scene
    b[END_POSE] = np.where(np.arange(64)[:, None] < 48, target, 100.0).astype(np.float32)  # masked rows: nonsense
    b[END_POSE_MASK] = (np.arange(64) < 48).astype(np.float32)
    before = float(agent.update(b)["end_pose_loss"])
    for _ in range(300):
        metrics = agent.update(b)
    after = float(metrics["end_pose_loss"])
    assert after < 0.2 * before and before < 50  # the masked rows' 100s never entered the loss
    assert _agent().end_pose_head is None
    with pytest.raises(InputError, match="end_pose_weight > 0 needs batches with each episode's end pose"):
        agent.update(_batch(n=8))
    from robot_rl.config import TrainConfig

    for bad in (-1.0, float("nan")):
        with pytest.raises(InputError, match=r"end_pose_weight \(the encoder's end-pose loss\) must be a finite"):
            TrainConfig(agent={"end_pose_weight": bad}).validate()


def test_init_std_sets_the_exploration_in_every_state_and_learning_moves_it():
    states = {"state": np.random.default_rng(2).normal(size=(64, 8)).astype(np.float32)}

    def stds(agent):
        with torch.no_grad():
            return agent.actor(agent.encoder(agent._obs(states, augment=False)))[1].exp()

    assert stds(_agent()).max() / stds(_agent()).min() > 3  # as initialised: any std, state by state
    agent = _agent(residual_scale=0.5, init_std=0.1)
    assert torch.allclose(stds(agent), torch.full((64, 6), 0.1), rtol=0.1)
    for i in range(20):
        agent.update(_batch(32, seed=i))
    assert not torch.allclose(stds(agent), torch.full((64, 6), 0.1), rtol=1e-3)  # a start, not a clamp
    for bad in (0.0, -1.0, 100.0):
        with pytest.raises(InputError, match="init_std must lie in"):
            _agent(init_std=bad)


def test_gsde_noise_over_its_matrix_is_the_gaussian_the_update_learns_from():
    """gSDE's rollout noise z(s) @ theta, theta ~ N(0, sigma^2), has per action the std
    sqrt(z(s)^2 @ sigma^2) that the actor's forward reports, which the update's sample and
    log-prob use: what the actor explores with is what SAC's entropy term prices."""
    torch.manual_seed(0)
    actor = StateDependentNoiseActor(4, 3, (16, 16))
    feats = torch.randn(5, 4)
    with torch.no_grad():
        mean, log_std = actor(feats)
        draws = []
        for _ in range(4000):
            actor.resample_noise()
            draws.append(torch.atanh(actor.explore(feats).clamp(-0.999999, 0.999999)) - mean)
    draws = torch.stack(draws)
    torch.testing.assert_close(draws.mean(0), torch.zeros_like(mean), atol=0.05, rtol=0)
    torch.testing.assert_close(draws.std(0), log_std.exp(), rtol=0.06, atol=0.0)
    action, log_prob, _ = actor.sample(feats)  # the update's reparameterised sample: the same Gaussian
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1),
        [torch.distributions.TanhTransform(cache_size=1)])
    torch.testing.assert_close(log_prob, dist.log_prob(action), atol=2e-3, rtol=2e-3)


def test_gsde_holds_its_noise_for_sde_every_steps_and_then_draws_anew():
    """With sde_every = 3 the same observation gets the same exploring action three times in a row,
    then another; without gSDE every exploring action differs. The deterministic action draws nothing."""
    obs = {"state": np.random.default_rng(0).normal(size=8).astype(np.float32)}
    agent = _agent(sde_every=3)
    acts = [agent.act(obs) for _ in range(7)]
    assert np.array_equal(acts[0], acts[1]) and np.array_equal(acts[1], acts[2])
    assert not np.allclose(acts[2], acts[3])
    assert np.array_equal(acts[3], acts[5]) and not np.allclose(acts[5], acts[6])
    assert not np.allclose(acts[0], agent.act(obs, deterministic=True))
    assert np.array_equal(agent.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    white = _agent()
    first, second = white.act(obs), white.act(obs)
    assert not np.allclose(first[:6], second[:6])


def test_gsde_learns_its_noise_scale_and_starts_where_init_std_says():
    states = {"state": np.random.default_rng(2).normal(size=(64, 8)).astype(np.float32)}
    agent = _agent(residual_scale=0.5, sde_every=4, init_std=0.2)
    with torch.no_grad():
        std = agent.actor(agent.encoder(agent._obs(states, augment=False)))[1].exp()
    assert 0.1 < std.median() < 0.4  # "a typical state's": a LayerNorm-ReLU layer's |z|^2 about half its width
    sigma = agent.actor.log_sigma.detach().clone()
    for i in range(10):
        agent.update(_batch(32, seed=i))
    assert not torch.allclose(agent.actor.log_sigma, sigma)  # the entropy term and Q move sigma
    assert "theta" not in dict(agent.actor.named_buffers()) and "theta" not in agent.actor.state_dict()
    from robot_rl.config import TrainConfig

    with pytest.raises(InputError, match="sde_every .* must be >= 0"):
        TrainConfig(agent={"sde_every": -1}).validate()


def test_policy_weights_round_trip_without_pickle(monkeypatch):
    import pickle

    agent = _agent()
    for _ in range(3):
        agent.update(_batch(16))
    blob = pack(agent.policy_state_dict(), {"version": 3})

    def no_pickle(*a, **k):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "loads", no_pickle)
    monkeypatch.setattr(pickle, "load", no_pickle)
    arrays, meta = unpack(blob)
    other = _agent()
    other.load_policy_state_dict({k: torch.from_numpy(v) for k, v in arrays.items()})
    obs = {"state": np.random.randn(8).astype(np.float32)}
    np.testing.assert_array_equal(agent.act(obs, deterministic=True), other.act(obs, deterministic=True))
    assert meta["version"] == 3


def test_checkpoint_round_trip_and_corrupt_file(tmp_path):
    agent = _agent(residual_scale=0.3)
    for _ in range(3):
        agent.update(_batch(16))
    path = tmp_path / "agent.safetensors"
    save_agent(agent, path)
    loaded = load_agent(path)
    for (k, a), (_, b) in zip(agent.state_dict().items(), loaded.state_dict().items()):
        torch.testing.assert_close(a, b, msg=k)
    assert loaded.num_updates == 3
    # optimiser moments survive: the next update is identical
    torch.manual_seed(1)
    m1 = agent.update(_batch(16, seed=5))
    torch.manual_seed(1)
    m2 = loaded.update(_batch(16, seed=5))
    assert m1["critic_loss"].item() == pytest.approx(m2["critic_loss"].item(), rel=1e-5)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_agent(path)
    with pytest.raises(CheckpointError, match="no agent weights"):
        load_agent(tmp_path / "missing.safetensors")


def _shapes(agent):
    return {key: tuple(value.shape) for key, value in agent.state_dict().items()}


def test_the_fields_declared_as_shaping_the_networks_are_the_ones_that_do():
    """network_of (what a checkpoint must match) reads the fields declared with network(): each
    changes the agent's weights' names or shapes, and a field not declared so (its training
    settings) leaves them as they are."""
    from robot_rl.agents.settings import network_fields
    from robot_rl.runtime.checkpoint import NETWORK_FIELDS

    assert NETWORK_FIELDS == network_fields(SACConfig)
    assert set(NETWORK_FIELDS) == {"image_encoder", "image_features", "state_features", "hidden", "num_critics",
                                   "state_dim", "cameras", "image_size", "action_dim", "grasp_critic",
                                   "end_pose_weight", "sde_every"}
    def agent(**kw):
        return SACAgent(SACConfig(**{"state_dim": 8, "hidden": (32, 32), "cameras": ("front",), "image_size": (32, 32),
                                     **kw}))

    base = _shapes(agent())
    for field_, value in (("image_features", 16), ("state_features", 8), ("hidden", (32, 16)), ("num_critics", 3),
                          ("state_dim", 9), ("cameras", ("front", "wrist")), ("image_size", (48, 48)),
                          ("action_dim", 5), ("grasp_critic", False), ("image_encoder", "resnet18"),
                          ("end_pose_weight", 1.0), ("sde_every", 4)):
        assert field_ in NETWORK_FIELDS
        assert _shapes(agent(**{field_: value})) != base, field_
    for field_, value in (("discount", 0.9), ("tau", 0.01), ("actor_lr", 1e-3), ("num_target_critics", 1),
                          ("grasp_penalty", 0.0), ("init_temperature", 0.1), ("augment_pad", 2)):
        assert field_ not in NETWORK_FIELDS
        assert _shapes(agent(**{field_: value})) == base, field_


def test_read_agent_config_reads_the_saved_config_alone(tmp_path):
    agent = _agent(num_critics=4, residual_scale=0.3)
    save_agent(agent, tmp_path / "agent.safetensors")
    assert read_agent_config(tmp_path) == agent.config  # a checkpoint folder
    assert read_agent_config(tmp_path / "agent.safetensors") == agent.config  # or its weights file
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"), metadata={"num_updates": "0"})
    with pytest.raises(CheckpointError, match="other.safetensors does not load"):
        read_agent_config(tmp_path / "other.safetensors")
    (tmp_path / "agent.safetensors").write_bytes(b"\x00" * 7)
    with pytest.raises(CheckpointError, match="corrupt"):
        read_agent_config(tmp_path)
    with pytest.raises(CheckpointError, match="no agent weights"):
        read_agent_config(tmp_path / "nowhere")


def test_check_compatible_refuses_an_env_whose_observations_differ_in_one_line(tmp_path):
    from robot_rl.envs import spec_env

    state_env = spec_env("PickCube", "state")
    pixel_env = spec_env("PickCube", "pixels", cameras=("front", "wrist"), image_size=(32, 32))
    state_dim = state_env.observation_space["state"].shape[0]
    pixel_dim = pixel_env.observation_space["state"].shape[0]
    ckpt = tmp_path / "run" / "checkpoints" / "step_000000010"
    check_compatible(SACConfig(state_dim=state_dim), state_env, ckpt)
    check_compatible(SACConfig(state_dim=pixel_dim, cameras=("wrist", "front"), image_size=(32, 32)), pixel_env, ckpt)
    mismatches = [
        (SACConfig(state_dim=state_dim + 1), state_env),  # another state layout
        (SACConfig(state_dim=state_dim), pixel_env),  # a state-observation checkpoint on pixels
        (SACConfig(state_dim=pixel_dim, cameras=("front",), image_size=(32, 32)), pixel_env),  # one camera less
        (SACConfig(state_dim=pixel_dim, cameras=("front", "wrist"), image_size=(64, 64)), pixel_env),  # image size
    ]
    for config, env in mismatches:
        with pytest.raises(CheckpointError) as err:
            check_compatible(config, env, ckpt)
        message = str(err.value)
        assert "\n" not in message and f"checkpoint {ckpt} expects observations" in message, message
        assert "use it with the task, --obs mode, cameras and image size it was trained with" in message


def test_pixel_agent_updates_and_acts():
    torch.manual_seed(0)
    cfg = SACConfig(state_dim=5, cameras=("front", "wrist"), image_size=(32, 32), hidden=(32, 32),
                    gripper_width_index=0)
    agent = SACAgent(cfg)
    rng = np.random.default_rng(0)
    n = 8

    def obs():
        return {"state": rng.normal(size=(n, 5)).astype(np.float32),
                "front": rng.integers(0, 255, (n, 32, 32, 3), dtype=np.uint8),
                "wrist": rng.integers(0, 255, (n, 32, 32, 3), dtype=np.uint8)}

    batch = {"obs": obs(), "next_obs": obs(), "action": rng.uniform(-1, 1, (n, 7)).astype(np.float32),
             "reward": np.zeros(n, np.float32), "bootstrap": np.ones(n, np.float32), "is_demo": np.zeros(n, bool)}
    conv = agent.encoder.images.encoders["front"]
    before = [p.clone() for p in conv.parameters()]
    agent.update(batch)
    assert any(not torch.equal(a, b) for a, b in zip(before, conv.parameters())), "the critic trains the encoder"
    action = agent.act({k: v[0] for k, v in batch["obs"].items()})
    assert action.shape == (7,) and np.all(np.abs(action) <= 1)


def _pixel_replay(seed: int):
    """A small pixel MixedReplay (one 32x32 camera); the same seed gives the same contents."""
    from robot_rl.contract import Transition
    from robot_rl.replay import MixedReplay, ReplayBuffer

    spec = {"state": ((5,), np.float32), "front": ((32, 32, 3), np.uint8)}
    rng = np.random.default_rng(seed)
    replay = MixedReplay(ReplayBuffer(64, spec, 7, seed=seed), ReplayBuffer(64, spec, 7, seed=seed + 1))
    obs = lambda: {"state": rng.normal(size=5).astype(np.float32),  # noqa: E731
                   "front": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)}
    for add in (replay.add_demo, replay.add):
        for t in range(20):
            add(Transition(obs(), rng.uniform(-1, 1, 7).astype(np.float32), float(t % 2), obs(), False, t % 5 == 4))
    return replay, spec


def _pixel_agent(**kw):
    torch.manual_seed(0)
    return SACAgent(SACConfig(state_dim=5, cameras=("front",), image_size=(32, 32), hidden=(32, 32),
                              gripper_width_index=0, bc_weight=1.0, **kw))


def test_an_update_from_staged_uint8_host_tensors_equals_one_from_numpy_batches():
    from robot_rl.replay import BatchStaging

    (plain, spec), (staged, _) = _pixel_replay(0), _pixel_replay(0)
    staging = BatchStaging(spec, 7, 16, "cpu")
    a, b = _pixel_agent(), _pixel_agent()
    for step in range(3):
        batch, host = plain.sample(16, n_step=2), staged.sample(16, n_step=2, staging=staging)
        assert host["obs"]["front"].dtype == torch.uint8  # images cross to the device as uint8
        torch.manual_seed(step)
        ma = a.update(batch)
        torch.manual_seed(step)
        mb = b.update(host)
        assert all(torch.is_tensor(v) for v in ma.values())  # read later, not synchronised per update
        assert metrics_to_floats(ma) == metrics_to_floats(mb)
    for (k, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0, msg=k)


def test_bf16_autocast_updates_are_finite_and_close_to_float32():
    replay, _ = _pixel_replay(1)
    full, half = _pixel_agent(), _pixel_agent(autocast_bf16=True)
    for step in range(3):
        batch = replay.sample(32)
        torch.manual_seed(step)
        m32 = metrics_to_floats(full.update(batch))
        torch.manual_seed(step)
        m16 = metrics_to_floats(half.update(batch))
        for name in ("critic_loss", "grasp_loss", "actor_loss", "bc_loss", "q_mean"):
            assert np.isfinite(m16[name]), (name, m16)
            assert m16[name] == pytest.approx(m32[name], rel=0.05, abs=0.02), (step, name, m16[name], m32[name])
    assert half.critic.net[0].weight.dtype == torch.float32  # weights and optimiser stay float32
    assert np.isfinite(half.pretrain_actor(replay.demo.sample(8)).item())


def test_metrics_to_floats_reads_tensors_and_floats_in_order():
    metrics = {"a": torch.tensor(1.5), "b": 2.0, "c": torch.tensor(float("nan"))}
    out = metrics_to_floats(metrics)
    assert list(out) == ["a", "b", "c"] and out["a"] == 1.5 and out["b"] == 2.0 and np.isnan(out["c"])
    assert metrics_to_floats({}) == {}


def test_the_actor_update_reads_q_through_the_action_alone(monkeypatch):
    """The actor's loss differentiates Q through the action only (``weights_without_grad``): its
    step is the one it was when backward also filled the critic's weight gradients, the critic's
    gradients from its own step are left as they were, and its weights train again afterwards."""
    import contextlib
    import copy

    from robot_rl.agents import sac

    agent = _agent()
    b = agent._batch(_batch(16))
    sac._step(agent.critic_opt, _critic_loss(agent, b)[0])
    reference = copy.deepcopy(agent)
    critic_grads = [p.grad.clone() for p in agent.critic.parameters()]
    torch.manual_seed(1)
    sac._step(agent.actor_opt, _actor_loss(agent, b)[0])
    assert all(torch.equal(g, p.grad) for g, p in zip(critic_grads, agent.critic.parameters()))
    assert all(p.requires_grad for p in agent.critic.parameters())

    monkeypatch.setattr(sac, "weights_without_grad", lambda module: contextlib.nullcontext())  # the old way
    torch.manual_seed(1)
    sac._step(reference.actor_opt, _actor_loss(reference, b)[0])
    assert not all(torch.equal(g, p.grad) for g, p in zip(critic_grads, reference.critic.parameters()))
    for mine, theirs in zip(agent.actor.parameters(), reference.actor.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


def test_weights_without_grad_gives_the_weights_back_after_an_error():
    from robot_rl.agents.sac import weights_without_grad

    critic = CriticEnsemble(2, 4, 2, hidden=(8,))
    with pytest.raises(RuntimeError):
        with weights_without_grad(critic):
            assert not any(p.requires_grad for p in critic.parameters())
            raise RuntimeError("a failed forward")
    assert all(p.requires_grad for p in critic.parameters())


def test_q_filtered_behaviour_cloning_trains_the_actor_as_unfiltered_cloning_where_the_filter_passes():
    """bc_weight with the Q filter: where the critic rates the demo action at least as high as
    the policy's (here: a critic rating every action alike), the actor's step is the unfiltered
    one, BC gradient included (the filter's mask once swallowed that gradient: the term was a
    constant)."""
    from robot_rl.agents import sac

    filtered, plain = _agent(bc_weight=10.0, q_filter=True), _agent(bc_weight=10.0, q_filter=False)
    batch = _batch(16)
    batch["is_demo"][:] = True
    for agent in (filtered, plain):
        with torch.no_grad():
            agent.critic.net[-1].weight.zero_()  # every action equally good: the filter lets every row through
    steps = []
    for agent in (filtered, plain):
        b = agent._batch(batch)
        torch.manual_seed(3)
        loss, _, metrics = _actor_loss(agent, b)
        assert metrics["bc_loss"].item() > 0
        sac._step(agent.actor_opt, loss)
        steps.append([p.detach().clone() for p in agent.actor.parameters()])
    for a, b in zip(*steps):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    no_bc = _agent(bc_weight=10.0, q_filter=True)
    with torch.no_grad():
        no_bc.critic.net[-1].weight.zero_()
    batch["is_demo"][:] = False
    torch.manual_seed(3)
    sac._step(no_bc.actor_opt, _actor_loss(no_bc, no_bc._batch(batch))[0])
    assert any(not torch.equal(a, p) for a, p in zip(steps[0], no_bc.actor.parameters())), "the BC term moved nothing"


def test_the_actor_loss_weighs_its_terms_the_same_with_and_without_demo_rows():
    """One formula: sac / q_scale + bc_weight * bc + residual_penalty * deviation. A batch without
    demo rows has bc = 0, and the SAC term is still divided by mean |Q|."""
    agent = _agent(bc_weight=2.5)
    batch = _batch(16)
    batch["is_demo"][:] = False
    b = agent._batch(batch)
    torch.manual_seed(3)
    loss, log_prob, metrics = _actor_loss(agent, b)
    assert metrics["bc_loss"].item() == 0.0
    torch.manual_seed(3)
    with torch.no_grad():
        feat = agent.encoder(b.obs)
        action, log_prob, _ = agent.policy(feat)
        q = agent.critic(feat, action).mean(0)
        expected = (agent.alpha * log_prob - q).mean() / q.abs().mean().clamp_min(1e-3)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    plain = _agent()  # no imitation term: the SAC term as it is
    torch.manual_seed(3)
    loss, _, _ = _actor_loss(plain, plain._batch(batch))
    torch.manual_seed(3)
    with torch.no_grad():
        feat = plain.encoder(plain._batch(batch).obs)
        action, log_prob, _ = plain.policy(feat)
        expected = (plain.alpha * log_prob - plain.critic(feat, action).mean(0)).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
