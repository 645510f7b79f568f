import os

import numpy as np
import pytest
import torch

from robot_rl.contract import Transition
from robot_rl.replay import BatchStaging, MixedReplay, ReplayBuffer

IMG = (8, 8, 3)
SPEC = {"state": ((2,), np.float32), "front": (IMG, np.uint8)}
A = 3


def make_obs(ep: int, t: int) -> dict:
    """state = [episode id, step]; the image encodes the same pair so slots can be cross-checked."""
    return {"state": np.array([ep, t], np.float32), "front": np.full(IMG, (ep * 31 + t) % 256, np.uint8)}


def add_episode(buf, ep, length, rewards=None, terminated=True, truncated=False, close=True, **kw):
    rewards = [1.0] * length if rewards is None else rewards
    for t in range(length):
        end = close and t == length - 1
        buf.add(Transition(make_obs(ep, t), np.full(A, t, np.float32), rewards[t], make_obs(ep, t + 1),
                terminated and end, truncated and end, **kw))


def ep_t(obs):
    return obs["state"][:, 0].astype(int), obs["state"][:, 1].astype(int)


def image_matches_state(obs):
    ep, t = ep_t(obs)
    return np.array_equal(obs["front"][:, 0, 0, 0], ((ep * 31 + t) % 256).astype(np.uint8))


def mixed(fraction=0.5, n_online_eps=3, n_demo_eps=3):
    m = MixedReplay(ReplayBuffer(200, SPEC, A, seed=1), ReplayBuffer(200, SPEC, A, seed=2), fraction)
    for ep in range(n_online_eps):
        add_episode(m.online, ep, 5)
    for ep in range(n_demo_eps):
        add_episode(m.demo, 100 + ep, 5)  # demo episode ids are >= 100
    return m


# ------------------------------------------------------------------ mixing
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.7, 1.0])
@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_demo_rows_are_exactly_rounded_fraction_and_come_first(fraction, batch_size):
    batch = mixed(fraction).sample(batch_size)
    n_demo = round(batch_size * fraction)
    assert batch["is_demo"].dtype == bool and batch["is_demo"].shape == (batch_size,)
    assert batch["is_demo"].sum() == n_demo and batch["is_demo"][:n_demo].all()
    ep, _ = ep_t(batch["obs"])
    assert (ep[:n_demo] >= 100).all() and (ep[n_demo:] < 100).all()
    assert batch["action"].shape == (batch_size, A) and batch["next_obs"]["front"].shape == (batch_size, *IMG)


def test_empty_demo_buffer_gives_all_online_and_empty_online_gives_all_demo():
    batch = mixed(0.5, n_demo_eps=0).sample(10)
    assert not batch["is_demo"].any() and (ep_t(batch["obs"])[0] < 100).all()
    batch = mixed(0.5, n_online_eps=0).sample(10)
    assert batch["is_demo"].all() and (ep_t(batch["obs"])[0] >= 100).all()
    with pytest.raises(ValueError, match="empty"):
        mixed(0.5, 0, 0).sample(4)


# ----------------------------------------------------------------- staging
@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_staged_batches_are_the_same_batches_in_reused_uint8_host_tensors(fraction):
    plain, staged = mixed(fraction), mixed(fraction)  # same contents, same seeds
    staging = BatchStaging(SPEC, A, 12, "cpu", slots=2)
    slots = []
    for _ in range(3):
        want = plain.sample(12, n_step=3, discount=0.9)
        got = staged.sample(12, n_step=3, discount=0.9, staging=staging)
        slots.append(got)
        assert got["obs"]["front"].dtype == torch.uint8 and got["next_obs"]["front"].dtype == torch.uint8
        for key in ("obs", "next_obs"):
            for k in SPEC:
                np.testing.assert_array_equal(got[key][k].numpy(), want[key][k], err_msg=f"{key}/{k}")
        for key in ("action", "reward", "bootstrap", "is_intervention", "is_demo"):
            np.testing.assert_array_equal(got[key].numpy(), want[key], err_msg=key)
        assert image_matches_state({k: v.numpy() for k, v in got["obs"].items()})
        # the frames are the stored ones, byte for byte
        ep, t = ep_t({"state": got["next_obs"]["state"].numpy()})
        assert all(np.array_equal(got["next_obs"]["front"][i].numpy(), make_obs(ep[i], t[i])["front"])
                   for i in range(12))
    assert slots[0]["obs"]["front"] is slots[2]["obs"]["front"]  # two slots, reused in turn
    assert slots[0]["obs"]["front"] is not slots[1]["obs"]["front"]
    assert not slots[0]["obs"]["front"].is_pinned()  # pinned only for a CUDA learner


def test_staging_refuses_another_batch_size_and_an_empty_replay():
    with pytest.raises(ValueError, match="batch_size 8 does not match the staging's 12"):
        mixed().sample(8, staging=BatchStaging(SPEC, A, 12))
    with pytest.raises(ValueError, match="empty"):
        mixed(0.5, 0, 0).sample(4, staging=BatchStaging(SPEC, A, 4))
    with pytest.raises(ValueError, match="slots must be >= 1"):
        BatchStaging(SPEC, A, 4, slots=0)


def test_interventions_go_to_both_buffers_and_add_demo_only_to_demo():
    m = mixed(0.5, 0, 0)
    add_episode(m, 0, 4)  # autonomous
    add_episode(m, 1, 3, is_intervention=True)  # human takes over
    assert (len(m.online), len(m.demo)) == (7, 3)
    for ep, t in ((2, 0), (2, 1), (3, 0)):
        m.add_demo(Transition(make_obs(ep, t), np.zeros(A), 0.0, make_obs(ep, t + 1), ep == 3 or t == 1, False))
    assert (len(m.online), len(m.demo)) == (7, 6)
    demo = m.demo.sample(50)
    ep, _ = ep_t(demo["obs"])
    assert set(ep.tolist()) == {1, 2, 3}
    np.testing.assert_array_equal(demo["is_intervention"], ep == 1)
    online = m.online.sample(50)
    np.testing.assert_array_equal(online["is_intervention"], ep_t(online["obs"])[0] == 1)


def test_a_takeover_penalty_ends_the_policy_stretch_before_each_takeover():
    # one episode: the policy acts at t 0-1, the human at 2-3, the policy at 4, the human at 5
    # (success, reward 1); a second episode the human takes over from its first step
    m = MixedReplay(ReplayBuffer(64, SPEC, A, seed=1), ReplayBuffer(64, SPEC, A, seed=2), 0.5, takeover_penalty=2.0)
    human = [False, False, True, True, False, True]
    for t, h in enumerate(human):
        m.add(Transition(make_obs(0, t), np.full(A, t, np.float32), float(t == 5), make_obs(0, t + 1), t == 5, False, h))
    for t in range(2):
        m.add(Transition(make_obs(1, t), np.full(A, t, np.float32), 0.0, make_obs(1, t + 1), False, t == 1, True))
    batch = m.online.sample(400, n_step=3, discount=0.5)
    ep, t = ep_t(batch["obs"])
    nep, nt = ep_t(batch["next_obs"])
    # (episode, t) -> (3-step return, next t, bootstrap): the policy's t 1 and t 4 led to takeovers
    expected = {(0, 0): (0.5 * -2.0, 2, 0.0), (0, 1): (-2.0, 2, 0.0), (0, 2): (0.25 * -2.0, 5, 0.0),
                (0, 3): (0.5 * -2.0, 5, 0.0), (0, 4): (-2.0, 5, 0.0), (0, 5): (1.0, 6, 0.0),
                (1, 0): (0.0, 2, 0.25), (1, 1): (0.0, 2, 0.5)}  # a takeover at the start: no policy step to end
    for i in range(400):
        ret, next_t, boot = expected[(ep[i], t[i])]
        assert batch["reward"][i] == pytest.approx(ret)
        assert (nep[i], nt[i]) == (ep[i], next_t)
        assert batch["bootstrap"][i] == pytest.approx(boot)
    assert {(int(e), int(s)) for e, s in zip(ep, t)} == set(expected)
    demo = m.demo.sample(100, n_step=1, discount=0.5)  # the human's steps keep their rewards
    np.testing.assert_allclose(demo["reward"], (ep_t(demo["obs"])[1] == 5) & (ep_t(demo["obs"])[0] == 0))


def test_without_a_takeover_penalty_the_policy_steps_keep_their_rewards():
    m = MixedReplay(ReplayBuffer(64, SPEC, A, seed=1), ReplayBuffer(64, SPEC, A, seed=2), 0.5)
    for t, h in enumerate([False, True]):
        m.add(Transition(make_obs(0, t), np.zeros(A), 0.0, make_obs(0, t + 1), t == 1, False, h))
    one = m.online.sample(50, n_step=1, discount=0.5)
    np.testing.assert_allclose(one["reward"], 0.0)
    np.testing.assert_allclose(one["bootstrap"], np.where(ep_t(one["obs"])[1] == 0, 0.5, 0.0))


@pytest.mark.parametrize("penalty", [-1.0, float("nan"), float("inf")])
def test_a_bad_takeover_penalty_is_refused(penalty):
    with pytest.raises(ValueError, match="takeover_penalty must be a finite number >= 0"):
        MixedReplay(ReplayBuffer(4, SPEC, A), ReplayBuffer(4, SPEC, A), 0.5, takeover_penalty=penalty)


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_demo_fraction_outside_unit_interval_is_refused(fraction):
    with pytest.raises(ValueError, match=r"demo_fraction must be within \[0, 1\]"):
        MixedReplay(ReplayBuffer(4, SPEC, A), ReplayBuffer(4, SPEC, A), fraction)


# ------------------------------------------------------------------ storage
def test_next_observation_is_not_stored_twice():
    spec = {"state": ((2,), np.float32), "front": ((64, 64, 3), np.uint8), "wrist": ((64, 64, 3), np.uint8)}
    raw = 2 * 4 + 2 * 64 * 64 * 3
    buf = ReplayBuffer(21 * 5, spec, A, seed=0)
    assert buf.nbytes() >= 21 * 5 * raw
    for ep in range(5):
        for t in range(20):
            o = {"state": np.array([ep, t], np.float32), "front": np.full((64, 64, 3), t, np.uint8),
                 "wrist": np.full((64, 64, 3), 100 + t, np.uint8)}
            n = {"state": np.array([ep, t + 1], np.float32), "front": np.full((64, 64, 3), t + 1, np.uint8),
                 "wrist": np.full((64, 64, 3), 101 + t, np.uint8)}
            buf.add(Transition(o, np.zeros(A), 0.0, n, t == 19, False))
    assert len(buf) == 100  # 5 episodes x 20 steps fit exactly in 5 x 21 slots
    assert raw <= buf.bytes_per_transition() <= 1.1 * raw
    batch = buf.sample(256)
    ep, t = ep_t(batch["obs"])
    nep, nt = ep_t(batch["next_obs"])
    np.testing.assert_array_equal(nep, ep)
    np.testing.assert_array_equal(nt, t + 1)
    np.testing.assert_array_equal(batch["next_obs"]["front"][:, 5, 5, 0], t + 1)
    np.testing.assert_array_equal(batch["next_obs"]["wrist"][:, 5, 5, 0], 101 + t)
    assert batch["obs"]["front"].dtype == np.uint8


# -------------------------------------------------------------------- n-step
def test_n_step_rewards_and_bootstrap_on_hand_built_episodes():
    buf = ReplayBuffer(64, SPEC, A, seed=0)
    add_episode(buf, 0, 4, [1, 2, 3, 4], terminated=True)
    add_episode(buf, 1, 3, [10, 20, 30], terminated=False, truncated=True)
    add_episode(buf, 2, 2, [5, 6], close=False)  # still running: its next step is not stored yet
    # (episode, t) -> (n-step return, next t, bootstrap) with n_step=3, discount=0.5
    expected = {
        (0, 0): (1 + 0.5 * 2 + 0.25 * 3, 3, 0.125),
        (0, 1): (2 + 0.5 * 3 + 0.25 * 4, 4, 0.0),  # terminal reached inside the window
        (0, 2): (3 + 0.5 * 4, 4, 0.0),
        (0, 3): (4, 4, 0.0),
        (1, 0): (10 + 0.5 * 20 + 0.25 * 30, 3, 0.125),
        (1, 1): (20 + 0.5 * 30, 3, 0.25),  # truncation still bootstraps
        (1, 2): (30, 3, 0.5),
        (2, 0): (5 + 0.5 * 6, 2, 0.25),
        (2, 1): (6, 2, 0.5),
    }
    assert len(buf) == len(expected)
    batch = buf.sample(400, n_step=3, discount=0.5)
    ep, t = ep_t(batch["obs"])
    nep, nt = ep_t(batch["next_obs"])
    seen = set()
    for i in range(400):
        ret, next_t, boot = expected[(ep[i], t[i])]
        assert batch["reward"][i] == pytest.approx(ret)
        assert (nep[i], nt[i]) == (ep[i], next_t)
        assert batch["bootstrap"][i] == pytest.approx(boot)
        np.testing.assert_array_equal(batch["action"][i], np.full(A, t[i]))
        seen.add((ep[i], t[i]))
    assert seen == set(expected)
    assert batch["reward"].dtype == np.float32 and batch["bootstrap"].dtype == np.float32

    one = buf.sample(200, n_step=1, discount=0.5)
    ep, t = ep_t(one["obs"])
    rewards = {0: [1, 2, 3, 4], 1: [10, 20, 30], 2: [5, 6]}
    np.testing.assert_allclose(one["reward"], [rewards[e][s] for e, s in zip(ep, t)])
    np.testing.assert_allclose(one["bootstrap"], np.where((ep == 0) & (t == 3), 0.0, 0.5))


def test_ring_wraparound_never_mixes_episodes():
    rng = np.random.default_rng(123)
    buf = ReplayBuffer(37, SPEC, A, seed=7)
    lengths, terminal = {}, {}
    for ep in range(60):
        lengths[ep], terminal[ep] = int(rng.integers(1, 16)), bool(rng.integers(2))
        add_episode(buf, ep, lengths[ep], terminated=terminal[ep], truncated=not terminal[ep])
        if ep < 5:
            continue
        assert 0 < len(buf) < 37
        batch = buf.sample(64, n_step=3, discount=0.5)
        e, t = ep_t(batch["obs"])
        ne, nt = ep_t(batch["next_obs"])
        assert image_matches_state(batch["obs"]) and image_matches_state(batch["next_obs"])
        np.testing.assert_array_equal(ne, e)
        m = nt - t
        assert (m >= 1).all() and (m <= np.minimum(3, [lengths[x] - s for x, s in zip(e, t)])).all()
        np.testing.assert_allclose(batch["reward"], (1 - 0.5**m) / 0.5)  # sum of 0.5^j, j < m, reward 1
        ends = np.array([terminal[x] and n == lengths[x] for x, n in zip(e, nt)])
        np.testing.assert_allclose(batch["bootstrap"], np.where(ends, 0.0, 0.5**m))
    assert ep_t(buf.sample(200)["obs"])[0].min() > 40  # old episodes were overwritten


# ---------------------------------------------------------------- save/load
def test_save_load_round_trip_gives_identical_samples(tmp_path):
    buf = ReplayBuffer(50, SPEC, A, seed=3)
    for ep in range(6):
        add_episode(buf, ep, 7)  # wraps the ring
    add_episode(buf, 6, 2, close=False)  # an episode left open
    buf.sample(5)
    path = tmp_path / "replay.npz"
    buf.save(path)
    assert os.listdir(tmp_path) == ["replay.npz"]  # no temp file left behind
    with np.load(path, allow_pickle=False) as data:
        assert all(data[k].dtype != object for k in data.files)
    loaded = ReplayBuffer.load(path)
    assert len(loaded) == len(buf) and loaded.nbytes() == buf.nbytes()
    for _ in range(3):
        a, b = buf.sample(16, n_step=3), loaded.sample(16, n_step=3)
        for key in ("action", "reward", "bootstrap", "is_intervention"):
            np.testing.assert_array_equal(a[key], b[key])
        for key in SPEC:
            np.testing.assert_array_equal(a["obs"][key], b["obs"][key])
            np.testing.assert_array_equal(a["next_obs"][key], b["next_obs"][key])
    # the open episode continues seamlessly after loading
    for b_ in (buf, loaded):
        b_.add(Transition(make_obs(6, 2), np.zeros(A), 1.0, make_obs(6, 3), True, False))
    assert len(loaded) == len(buf)


def test_mixed_save_load_round_trip(tmp_path):
    m = mixed(0.25)
    m.save(tmp_path / "mix")
    loaded = MixedReplay.load(tmp_path / "mix")
    assert loaded.demo_fraction == 0.25
    a, b = m.sample(12, n_step=2), loaded.sample(12, n_step=2)
    np.testing.assert_array_equal(a["is_demo"], b["is_demo"])
    np.testing.assert_array_equal(a["obs"]["state"], b["obs"]["state"])
    np.testing.assert_array_equal(a["reward"], b["reward"])


# ------------------------------------------------------------------- errors
def test_sampling_errors():
    buf = ReplayBuffer(10, SPEC, A)
    with pytest.raises(ValueError, match="empty replay buffer"):
        buf.sample(4)
    add_episode(buf, 0, 3)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        buf.sample(0)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        mixed().sample(0)


@pytest.mark.parametrize(
    "mutate, pattern",
    [
        (lambda o, n, a: o.pop("front"), r"obs is missing key 'front'"),
        (lambda o, n, a: n.pop("state"), r"next_obs is missing key 'state'"),
        (lambda o, n, a: o.update(front=np.zeros((8, 8, 4), np.uint8)),
         r"obs\['front'\] has shape \(8, 8, 4\), expected \(8, 8, 3\)"),
        (lambda o, n, a: n.update(state=np.zeros(3, np.float32)),
         r"next_obs\['state'\] has shape \(3,\), expected \(2,\)"),
        (lambda o, n, a: o.update(front=np.zeros(IMG, np.float32)), r"obs\['front'\] has dtype float32, expected uint8"),
        (lambda o, n, a: a.__setitem__(1, np.nan), r"action has non-finite values at indices \[1\]"),
        (lambda o, n, a: a.__setitem__(2, np.inf), r"action has non-finite values at indices \[2\]"),
    ],
)
def test_add_rejects_bad_input_with_clear_message(mutate, pattern):
    buf = ReplayBuffer(10, SPEC, A)
    obs, nxt, action = make_obs(0, 0), make_obs(0, 1), np.zeros(A, np.float32)
    mutate(obs, nxt, action)
    with pytest.raises(ValueError, match=pattern):
        buf.add(Transition(obs, action, 0.0, nxt, False, False))
    assert len(buf) == 0


def test_wrong_action_shape_is_refused():
    with pytest.raises(ValueError, match=r"action has shape \(2,\), expected \(3,\)"):
        ReplayBuffer(10, SPEC, A).add(Transition(make_obs(0, 0), np.zeros(2), 0.0, make_obs(0, 1), False, False))


# ------------------------------------------------------------------ a key derived from the others
def test_a_derived_key_is_recomputed_at_every_slot_sampled_with_its_observation_and_dropped(tmp_path):
    m = mixed()
    m.keep_derived("sum", ((1,), np.float32), lambda obs: obs["state"].sum(-1, keepdims=True) + 0.5)
    for buf in (m.online, m.demo):
        assert buf.obs_spec["sum"] == ((1,), np.dtype(np.float32))
    batch = m.sample(32)
    for key in ("obs", "next_obs"):  # each row's value is its own observation's, at obs and at next_obs
        np.testing.assert_array_equal(batch[key]["sum"][:, 0], batch[key]["state"].sum(-1) + 0.5)
    m.keep_derived("sum", ((1,), np.float32), lambda obs: obs["state"][:, :1] * 0)  # its function changed
    assert not m.sample(32)["obs"]["sum"].any()
    m.save(tmp_path / "mix")  # it travels with the buffers
    assert MixedReplay.load(tmp_path / "mix").online.obs_spec["sum"] == ((1,), np.dtype(np.float32))
    m.keep_derived("sum", None)
    assert "sum" not in m.sample(8)["obs"] and "sum" not in m.demo.obs_spec
    with pytest.raises(Exception, match="stores no key 'sum'"):
        m.online.recompute("sum", lambda obs: obs["state"])


# ------------------------------------------------------------------ end poses
POSE_SPEC = {"state": ((7,), np.float32)}


def pose_obs(ep: int, t: int) -> dict:
    """A robot state in the contract's layout: the TCP at x = 1 cm a step, y = the episode, level."""
    return {"state": np.array([0.01 * t, ep, 0.0, 1.0, 0.0, 0.0, 0.0], np.float32)}


def add_pose_episode(buf, ep, length, last_reward, terminated=True, truncated=False, close=True):
    for t in range(length):
        end = close and t == length - 1
        buf.add(Transition(pose_obs(ep, t), np.zeros(A, np.float32), last_reward if end else 0.0, pose_obs(ep, t + 1),
                           terminated and end, truncated and end))


def test_end_poses_are_where_a_successful_episode_ended_and_masked_elsewhere():
    """``sample(end_pose=True)``: each row's episode's last TCP pose relative to its own (decimetres,
    yaw), labelled only where the episode ended in a paid success; a failure, a cut-short episode and
    one still running are masked out. The same through ``MixedReplay`` and its staging."""
    from robot_rl.replay.buffer import END_POSE, END_POSE_MASK

    def fill(buf):
        add_pose_episode(buf, 0, 4, 1.0)  # a success: reward 1, terminated
        add_pose_episode(buf, 1, 3, 0.0)  # ended, unpaid (a reflex stop)
        add_pose_episode(buf, 2, 3, 0.0, terminated=False, truncated=True)  # ran out of time
        add_pose_episode(buf, 3, 2, 0.0, close=False)  # still running

    buf = ReplayBuffer(64, POSE_SPEC, A, seed=0)
    fill(buf)
    batch = buf.sample(300, end_pose=True)
    ep = batch["obs"]["state"][:, 1].astype(int)
    t = np.round(batch["obs"]["state"][:, 0] / 0.01).astype(int)
    assert set(ep) == {0, 1, 2, 3}
    np.testing.assert_array_equal(batch[END_POSE_MASK], (ep == 0).astype(np.float32))
    ok = ep == 0
    np.testing.assert_allclose(batch[END_POSE][ok], np.stack([0.1 * (4 - t[ok]), 0 * t[ok], 0 * t[ok], 0 * t[ok]], 1),
                               atol=1e-5)
    assert END_POSE not in buf.sample(8)  # only when asked

    mixed_replay = MixedReplay(ReplayBuffer(64, POSE_SPEC, A, seed=1), ReplayBuffer(64, POSE_SPEC, A, seed=2), 0.5)
    fill(mixed_replay.online)
    add_pose_episode(mixed_replay.demo, 7, 3, 1.0)
    mixed_replay.end_pose = True
    for batch in (mixed_replay.sample(64), mixed_replay.sample(64, staging=BatchStaging(POSE_SPEC, A, 64,
                                                                                           end_pose=True))):
        ep = np.asarray(batch["obs"]["state"][:, 1]).astype(int)
        np.testing.assert_array_equal(np.asarray(batch[END_POSE_MASK]), np.isin(ep, (0, 7)).astype(np.float32))

    with pytest.raises(ValueError, match="the end pose is read from the robot state, and this buffer has no 'state'"):
        no_state = ReplayBuffer(16, {"front": (IMG, np.uint8)}, A, seed=0)
        no_state.add(Transition({"front": np.zeros(IMG, np.uint8)}, np.zeros(A, np.float32), 1.0,
                                {"front": np.zeros(IMG, np.uint8)}, True, False))
        no_state.sample(4, end_pose=True)
