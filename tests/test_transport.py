"""Tests for robot_rl.runtime.transport (pickle-free actor <-> learner messaging).

The child-process helpers below are module-level functions so the "spawn" start
method can import them in the child: pytest's default (prepend) import mode puts
tests/ on sys.path, and spawn hands the parent's sys.path to the child.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import struct
import threading
import time

import numpy as np
import pytest

from robot_rl.runtime.transport import (
    Mailbox,
    Message,
    PipeEndpoint,
    inprocess_pair,
    pack,
    pipe_pair,
    unpack,
)
from tests.helpers.common import wait_until  # noqa: E402

pytestmark = pytest.mark.timeout(60)  # hang guard; every test is meant to take well under 5 s

SPAWN_READY_S = 30.0  # generous: spawning an interpreter on a loaded 2-core box


# --------------------------------------------------------------------------------------
# child-process helpers (must be importable by "spawn")
# --------------------------------------------------------------------------------------


def _echo_child(conn) -> None:
    """Announce readiness, then echo every message back as kind "echo" until "stop"."""
    ep = PipeEndpoint(conn, maxsize=64, close_timeout=2.0)
    deadline = time.monotonic() + 60.0
    try:
        ep.send("status", meta={"ready": True})
        while time.monotonic() < deadline and not ep.peer_closed:
            for msg in ep.receive(timeout=0.2):
                if msg.kind == "stop":
                    return
                ep.send("echo", msg.arrays, {**msg.meta, "orig_kind": msg.kind})
    finally:
        ep.close()


def _weights_child(conn, n: int) -> None:
    """Send n weights versions then a status message, flush, and exit."""
    ep = PipeEndpoint(conn, close_timeout=5.0)
    try:
        for v in range(n):
            ep.send("weights", {"w": np.full((256, 256), v, np.float32)}, {"version": v})
        ep.send("status", meta={"sent": n})
    finally:
        ep.close()  # flushes, then the parent sees EOF


@contextlib.contextmanager
def _spawned(target, *args):
    ctx = multiprocessing.get_context("spawn")
    parent_conn, child_conn = pipe_pair(ctx)
    proc = ctx.Process(target=target, args=(child_conn, *args), daemon=True)
    proc.start()
    child_conn.close()  # so the parent notices when the child goes away
    ep = PipeEndpoint(parent_conn, close_timeout=0.5)
    try:
        yield proc, ep
    finally:
        ep.close()
        proc.join(5.0)
        if proc.is_alive():
            proc.terminate()
            proc.join(2.0)
        if proc.is_alive():
            proc.kill()
            proc.join(2.0)


def _collect(ep, until, timeout: float) -> list[Message]:
    """Receive until ``until(messages)`` is true or ``timeout`` passes."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while not until(got) and time.monotonic() < deadline:
        got.extend(ep.receive(timeout=0.1))
    return got


# --------------------------------------------------------------------------------------
# pack / unpack
# --------------------------------------------------------------------------------------


def test_pack_roundtrip_numpy_dtypes_and_meta():
    rng = np.random.default_rng(0)
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    arrays = {
        "obs/state": rng.standard_normal((3, 21)).astype(np.float32),
        "obs/front": rng.integers(0, 256, (2, 8, 8, 3), dtype=np.uint8),
        "done": np.array([True, False, True]),
        "step": np.array([1, -2, 2**40], dtype=np.int64),
        "reward": np.array(1.5),  # 0-d
        "scalar32": np.float32(2.25),  # numpy scalar -> 0-d array
        "empty": np.zeros((0, 3), np.float32),
        "strided": base[:, ::2],  # non-contiguous
        "transposed": base.T,  # non-contiguous (Fortran order)
        "bigendian": np.arange(5, dtype=">i4"),
    }
    meta = {"episode": 3, "note": "ok", "nested": {"a": [1, 2.5, None]}, "np_scalar": np.int64(7)}
    out_arrays, out_meta = unpack(pack(arrays, meta))

    assert set(out_arrays) == set(arrays)
    for key, value in arrays.items():
        expected = np.asarray(value)
        got = out_arrays[key]
        assert got.shape == expected.shape, key
        assert got.dtype == expected.dtype.newbyteorder("="), key
        np.testing.assert_array_equal(got, expected, err_msg=key)
    assert out_arrays["reward"].ndim == 0 and out_arrays["reward"].item() == 1.5
    assert out_arrays["done"].dtype == np.bool_
    assert out_meta == {"episode": 3, "note": "ok", "nested": {"a": [1, 2.5, None]}, "np_scalar": 7}
    out_arrays["obs/state"][0, 0] = 123.0  # results are writable, independent copies


def test_pack_copies_data():
    a = np.zeros(4, np.float32)
    data = pack({"a": a})
    a[:] = 9.0
    np.testing.assert_array_equal(unpack(data)[0]["a"], np.zeros(4, np.float32))


def test_pack_torch_tensors():
    torch = pytest.importorskip("torch")
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    arrays = {
        "f32": torch.randn(5, 2),
        "grad": torch.ones(3, requires_grad=True) * 2.0,
        "bool": torch.tensor([True, False]),
        "i64": torch.tensor([1, 2, 3], dtype=torch.int64),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "zero_d": torch.tensor(3.5),
        "noncontig": base.t(),
        "bf16": torch.tensor([1.0, 2.0], dtype=torch.bfloat16),
    }
    out, meta = unpack(pack(arrays, {"version": 4}))
    assert meta == {"version": 4}
    np.testing.assert_array_equal(out["f32"], arrays["f32"].numpy())
    np.testing.assert_array_equal(out["grad"], np.full(3, 2.0, np.float32))
    assert out["bool"].dtype == np.bool_ and out["bool"].tolist() == [True, False]
    assert out["i64"].dtype == np.int64 and out["i64"].tolist() == [1, 2, 3]
    assert out["u8"].dtype == np.uint8 and out["u8"].tolist() == [0, 255]
    assert out["zero_d"].shape == () and out["zero_d"].item() == 3.5
    np.testing.assert_array_equal(out["noncontig"], base.t().numpy())
    assert out["bf16"].dtype == np.float32 and out["bf16"].tolist() == [1.0, 2.0]


def test_pack_empty():
    assert unpack(pack({})) == ({}, {})
    assert unpack(pack()) == ({}, {})
    assert unpack(pack({}, {"only": "meta"})) == ({}, {"only": "meta"})


def test_pack_rejects_bad_input():
    with pytest.raises(TypeError):
        pack({"o": np.array([object(), 1], dtype=object)})
    with pytest.raises(TypeError):
        pack({"s": np.array(["a", "b"])})
    with pytest.raises(TypeError):
        pack({1: np.zeros(2)})
    with pytest.raises(ValueError):
        pack({"__metadata__": np.zeros(2)})
    with pytest.raises(TypeError):
        pack({}, {"x": object()})


def test_unpack_garbage_raises_value_error():
    good = pack({"x": np.arange(100, dtype=np.float32)}, {"k": 1})
    header_len = struct.unpack("<Q", good[:8])[0]
    bad_meta = bytearray(good)
    i = bytes(bad_meta).index(b'"meta":"') + len(b'"meta":"')
    bad_meta[i] = ord("[")  # the meta string is no longer a JSON object
    cases = [
        b"",
        b"garbage",
        b"definitely not a safetensors blob at all",
        np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        struct.pack("<Q", 2**40) + b"{}",  # header length beyond the data
        good[:-4],  # truncated
        good + b"trailing",
        good[: 8 + header_len],  # header only, data missing
        bytes(bad_meta),
    ]
    for data in cases:
        with pytest.raises(ValueError, match="corrupt message"):
            unpack(data)


# --------------------------------------------------------------------------------------
# no pickle on the wire
# --------------------------------------------------------------------------------------


@pytest.fixture
def pickle_forbidden(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used on the wire")

    for name in ("loads", "load", "dumps", "dump"):
        monkeypatch.setattr(pickle, name, forbidden)
    monkeypatch.setattr(pickle, "Pickler", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    from multiprocessing import reduction

    # Connection.send()/recv() go through ForkingPickler, which binds pickle.loads early.
    monkeypatch.setattr(reduction.ForkingPickler, "dumps", classmethod(lambda *a, **k: forbidden()))
    monkeypatch.setattr(reduction.ForkingPickler, "loads", staticmethod(forbidden))
    monkeypatch.setattr(reduction.ForkingPickler, "__init__", forbidden)
    return forbidden


def test_no_pickle_anywhere(pickle_forbidden):
    arrays = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array(True)}
    out, meta = unpack(pack(arrays, {"a": 1}))
    np.testing.assert_array_equal(out["x"], arrays["x"])
    assert meta == {"a": 1}

    a, b = inprocess_pair()
    assert a.send("transition", arrays, {"i": 0})
    (msg,) = b.receive(timeout=1.0)
    assert msg.kind == "transition" and msg.meta == {"i": 0}

    # A real OS pipe with both endpoints in this process: the I/O threads must not
    # pickle either (if they did, the forbidden functions would kill the link).
    conn_a, conn_b = pipe_pair()
    pa, pb = PipeEndpoint(conn_a, close_timeout=0.5), PipeEndpoint(conn_b, close_timeout=0.5)
    try:
        assert pa.send("transition", arrays, {"i": 1})
        assert pa.send("weights", {"w": np.ones(3, np.float32)}, {"version": 2})
        got = _collect(pb, lambda m: len(m) >= 2, timeout=5.0)
        assert [m.kind for m in got] == ["transition", "weights"]
        np.testing.assert_array_equal(got[0].arrays["x"], arrays["x"])
        assert got[1].meta == {"version": 2}
        assert not pa.peer_closed and not pb.peer_closed
    finally:
        pa.close()
        pb.close()


# --------------------------------------------------------------------------------------
# Mailbox (the bounded queue behind every endpoint, ROS included)
# --------------------------------------------------------------------------------------


def test_mailbox_bounds_ordinary_kinds_and_keeps_newest_latest_only():
    box = Mailbox(maxsize=2, latest_only=["weights"])
    assert box.put("transition", 0) and box.put("weights", "w0") and box.put("transition", 1)
    assert not box.put("transition", 2)  # full: ordinary kinds are bounded
    assert box.put("weights", "w1")  # latest-only: replaces w0, goes to the back, never refused
    assert len(box) == 3
    assert [(item.kind, item.payload) for item in box.get_all()] == [
        ("transition", 0), ("transition", 1), ("weights", "w1")]
    assert box.get_all() == [] and box.get_one(timeout=0) is None
    assert box.put("transition", 3)  # room again once drained


@pytest.mark.timeout(8)  # put_wait and get_one(None) below must wake on events, not run into this
def test_mailbox_put_wait_waits_for_room_and_close_wakes_everyone():
    box = Mailbox(maxsize=1, latest_only=())
    stop = threading.Event()
    assert box.put("transition", 0)
    results = []
    waiter = threading.Thread(target=lambda: results.append(box.put_wait("transition", 1, stop)))
    waiter.start()
    assert box.get_one(timeout=None).payload == 0  # frees room: the waiting put goes in
    waiter.join(5.0)
    assert results == [True]
    assert box.get_one(timeout=None).payload == 1

    getter = threading.Thread(target=lambda: results.append(box.get_one(timeout=None)))
    getter.start()
    box.put("transition", 2)
    getter.join(5.0)
    assert results[-1].payload == 2
    assert box.put("transition", 3)
    stop.set()
    assert not box.put_wait("transition", 4, stop)  # full and stopped: gives up
    box.close()
    assert box.closed and not box.put("transition", 5)
    assert box.get_one(timeout=None).payload == 3  # queued items survive close
    assert box.get_one(timeout=None) is None  # closed and empty: no waiting


def test_mailbox_rejects_a_size_below_one():
    with pytest.raises(ValueError, match="maxsize"):
        Mailbox(maxsize=0, latest_only=())


# --------------------------------------------------------------------------------------
# in-process pair
# --------------------------------------------------------------------------------------


def test_inprocess_roundtrip_preserves_order_and_content():
    a, b = inprocess_pair(maxsize=64)
    for i in range(20):
        assert a.send("transition", {"obs": np.full(3, i, np.float32)}, {"i": i})
    assert b.send("status", meta={"learner_step": 5})
    msgs = b.receive()
    assert [m.meta["i"] for m in msgs] == list(range(20))
    assert all(m.kind == "transition" for m in msgs)
    for m in msgs:
        np.testing.assert_array_equal(m.arrays["obs"], np.full(3, m.meta["i"], np.float32))
    assert b.receive() == []
    (status,) = a.receive()
    assert status == Message("status", {}, {"learner_step": 5})
    assert a.dropped == 0 and b.dropped == 0


@pytest.mark.timeout(30)  # a blocking send would hang here: the guard turns that into a failure
def test_inprocess_bounded_drops_without_blocking():
    a, b = inprocess_pair(maxsize=8)
    payload = {"obs": np.zeros((64, 64, 3), np.uint8)}
    results = [a.send("transition", payload, {"i": i}) for i in range(200)]
    assert results == [True] * 8 + [False] * 192
    assert a.dropped == 192
    # latest-only kinds are not subject to the bound: fresh weights always get through
    assert a.send("weights", {"w": np.ones(2, np.float32)}, {"version": 1})
    msgs = b.receive()
    assert [m.meta.get("i") for m in msgs[:8]] == list(range(8))
    assert msgs[8].kind == "weights" and len(msgs) == 9
    assert a.send("transition", payload, {"i": 999})  # room again once drained
    assert a.dropped == 192


def test_inprocess_weights_latest_wins():
    a, b = inprocess_pair()
    a.send("transition", meta={"i": 0})
    for v in range(3):
        assert a.send("weights", {"w": np.full(4, v, np.float32)}, {"version": v})
    a.send("transition", meta={"i": 1})
    msgs = b.receive()
    assert [(m.kind, m.meta) for m in msgs] == [
        ("transition", {"i": 0}),
        ("weights", {"version": 2}),
        ("transition", {"i": 1}),
    ]
    np.testing.assert_array_equal(msgs[1].arrays["w"], np.full(4, 2, np.float32))
    assert a.dropped == 0
    # only kinds named latest_only are coalesced
    a2, b2 = inprocess_pair(latest_only=())
    for v in range(3):
        a2.send("weights", meta={"version": v})
    assert [m.meta["version"] for m in b2.receive()] == [0, 1, 2]


@pytest.mark.timeout(8)  # receive(timeout=60) below must wake on arrival, well before this guard
def test_inprocess_receive_timeout_waits_then_wakes():
    a, b = inprocess_pair()
    assert b.receive(timeout=0.1) == []

    timer = threading.Timer(0.1, lambda: a.send("status", meta={"late": True}))
    timer.daemon = True
    timer.start()
    try:
        msgs = b.receive(timeout=60.0)
    finally:
        timer.cancel()
        timer.join(2.0)
    assert [m.meta for m in msgs] == [{"late": True}]


@pytest.mark.timeout(8)  # receive(timeout=10) on a closed link must return at once
def test_inprocess_close():
    a, b = inprocess_pair()
    a.send("transition", meta={"i": 0})
    a.close()
    assert a.closed and b.peer_closed and not a.peer_closed
    assert not a.send("transition")  # closed endpoint drops
    assert a.dropped == 1
    assert not b.send("status")  # peer gone
    assert b.dropped == 1
    assert [m.meta for m in b.receive(timeout=10.0)] == [{"i": 0}]  # what is left
    assert b.receive(timeout=10.0) == []  # no waiting on a closed link


def test_send_rejects_invalid_messages():
    a, _ = inprocess_pair()
    with pytest.raises(ValueError):
        a.send("", {})
    with pytest.raises(ValueError):
        a.send("status", meta={"_kind": "weights"})
    with pytest.raises(TypeError):
        a.send("status", meta={"x": object()})
    assert a.dropped == 0


# --------------------------------------------------------------------------------------
# pipe endpoints
# --------------------------------------------------------------------------------------


@pytest.mark.timeout(20)  # a blocking send or an unbounded close would hang: the guard fails it
def test_pipe_backpressure_drops_instead_of_blocking():
    """The reader never reads: its inbox fills, the pipe fills, then the writer's
    bounded outgoing queue fills and sends are dropped - all without blocking."""
    conn_a, conn_b = pipe_pair()
    writer = PipeEndpoint(conn_a, maxsize=4, close_timeout=0.2)
    reader = PipeEndpoint(conn_b, maxsize=4, close_timeout=0.2)
    try:
        payload = {"img": np.zeros(64 * 1024, np.uint8)}
        results = []
        for i in range(300):
            results.append(writer.send("transition", payload, {"i": i}))
            if i % 50 == 49:
                time.sleep(0.02)  # give the I/O threads a chance to fill everything up
        assert results[0] is True
        assert results.count(False) > 0
        assert writer.dropped == results.count(False)
        # latest-only messages still get accepted while the queue is full of transitions
        assert writer.send("weights", {"w": np.ones(2, np.float32)}, {"version": 1})

        got = reader.receive()
        assert 1 <= len(got) <= 4
        idx = [m.meta["i"] for m in got]
        assert idx == sorted(idx) and idx[0] == 0
    finally:
        writer.close()  # its sender is stuck on a full pipe: close must still be bounded
        reader.close()


@pytest.mark.timeout(9)  # a receive that waited its 10 s on a closed link would trip this
def test_pipe_close_flushes_and_peer_sees_it():
    conn_a, conn_b = pipe_pair()
    a = PipeEndpoint(conn_a, close_timeout=2.0)
    b = PipeEndpoint(conn_b, close_timeout=0.5)
    try:
        for i in range(10):
            assert a.send("transition", {"x": np.full(1000, i, np.int64)}, {"i": i})
        assert a.send("stop")
        a.close()
        assert not a.send("transition")
        wait_until(lambda: b.peer_closed, "the peer to close", 5.0)
        msgs = b.receive()
        assert [m.kind for m in msgs] == ["transition"] * 10 + ["stop"]
        assert [m.meta.get("i") for m in msgs[:10]] == list(range(10))
        assert b.receive(timeout=10.0) == []  # closed link: returns at once (timeout guard below)
        assert not b.send("status")
    finally:
        a.close()
        b.close()


def test_pipe_child_process_echo_with_large_arrays():
    rng = np.random.default_rng(2)
    big = rng.integers(0, 256, 4 * 1024 * 1024, dtype=np.uint8)  # 4 MB
    with _spawned(_echo_child) as (proc, ep):
        ready = _collect(ep, lambda m: any(x.kind == "status" for x in m), SPAWN_READY_S)
        assert any(m.kind == "status" and m.meta == {"ready": True} for m in ready), ready

        n = 20
        for i in range(n):
            arrays = {
                "obs/state": np.full(21, i, np.float32),
                "done": np.array(i == n - 1),
                "action": np.arange(7, dtype=np.float64) * i,
            }
            assert ep.send("transition", arrays, {"i": i})
        assert ep.send("transition", {"big": big}, {"i": n})
        echoes = _collect(ep, lambda m: len(m) >= n + 1, timeout=20.0)

        assert [m.kind for m in echoes] == ["echo"] * (n + 1)
        assert [m.meta["i"] for m in echoes] == list(range(n + 1))
        assert all(m.meta["orig_kind"] == "transition" for m in echoes)
        for m in echoes[:n]:
            i = m.meta["i"]
            np.testing.assert_array_equal(m.arrays["obs/state"], np.full(21, i, np.float32))
            assert m.arrays["done"].dtype == np.bool_ and bool(m.arrays["done"]) == (i == n - 1)
            np.testing.assert_array_equal(m.arrays["action"], np.arange(7, dtype=np.float64) * i)
        assert echoes[n].arrays["big"].dtype == np.uint8
        np.testing.assert_array_equal(echoes[n].arrays["big"], big)

        assert ep.send("stop")
        proc.join(10.0)
        assert proc.exitcode == 0
        wait_until(lambda: ep.peer_closed, "the peer to close", 5.0)
        assert ep.dropped == 0


def test_pipe_child_process_weights_latest_wins():
    with _spawned(_weights_child, 5) as (proc, ep):
        # The child sends 5 weights and a status, flushes and exits; once we see the
        # EOF every frame is in our inbox and only the newest weights must be there.
        wait_until(lambda: ep.peer_closed, "the peer to close", SPAWN_READY_S)
        msgs = ep.receive()
        assert [(m.kind, m.meta) for m in msgs] == [
            ("weights", {"version": 4}),
            ("status", {"sent": 5}),
        ]
        np.testing.assert_array_equal(msgs[0].arrays["w"], np.full((256, 256), 4, np.float32))
        proc.join(10.0)
        assert proc.exitcode == 0


@pytest.mark.timeout(SPAWN_READY_S + 25)  # two 60 s receives on a dead peer must not wait
def test_pipe_child_killed_parent_does_not_block():
    with _spawned(_echo_child) as (proc, ep):
        ready = _collect(ep, lambda m: any(x.kind == "status" for x in m), SPAWN_READY_S)
        assert any(m.kind == "status" for m in ready)
        assert ep.send("transition", {"x": np.ones(3, np.float32)}, {"i": 0})
        assert _collect(ep, lambda m: len(m) >= 1, timeout=10.0)  # link works

        proc.kill()
        proc.join(5.0)
        assert not proc.is_alive()

        payload = {"img": np.zeros(256 * 1024, np.uint8)}
        results = []
        for _ in range(1000):  # a send that blocked on the dead pipe would hang here
            results.append(ep.send("transition", payload))
            if len(results) >= 20 and not any(results[-10:]):
                break
            time.sleep(0.005)
        assert not any(results[-10:])  # ...and, once the death is noticed, as dropped
        assert ep.peer_closed
        assert ep.dropped >= 10

        ep.receive(timeout=60.0)  # must not wait on a dead peer (the timeout guard fails it)
        ep.receive(timeout=60.0)
        ep.close()
