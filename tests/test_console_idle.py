"""Idle sockets must not lock the operator out of the console (issue 44, item 8): real sockets
on 127.0.0.1 against the real uvicorn server, every one closed at the end."""

from __future__ import annotations

import contextlib
import socket

import httpx

from robot_rl.teleop.console import MAX_CONNECTIONS, ConsoleServer
from tests.helpers.console import RecordingBackend

TOKEN = "the-operators-own-token"
IDLE, HALF_HEADER = 80, 20


@contextlib.contextmanager
def serving(**kwargs):
    server = ConsoleServer(RecordingBackend(), "127.0.0.1", 0, TOKEN, **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def held_sockets(port: int, payloads: list[bytes]):
    """One loopback connection per payload, each sent and then held open (closed at the end)."""
    socks = []
    try:
        for payload in payloads:
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            socks.append(sock)
            if payload:
                sock.sendall(payload)
        yield socks
    finally:
        for sock in socks:
            sock.close()


def read_to_eof(sock: socket.socket) -> bytes:
    """All the server sends until it closes the connection (recv's 30 s timeout is only a bound)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_idle_and_half_header_sockets_do_not_lock_the_operator_out():
    # the request timeout far off, so the held sockets stay open however loaded the machine: the
    # operator's reserve, not the timeout, is what serves the operator here
    with serving(request_timeout_s=120) as server:
        half = f"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Slow: ".encode()
        with held_sockets(server.port, [b""] * IDLE + [half] * HALF_HEADER):
            auth = {"X-Console-Token": TOKEN}
            with httpx.Client(base_url=server.address, timeout=30) as browser:  # one keep-alive connection
                polls = [browser.get("/api/state", headers=auth).status_code for _ in range(20)]
                # the server accepted every held socket before the browser's (accepts keep their order)
                held = len(server.server.server_state.connections)
                command = browser.post("/api/event/success", headers=auth).status_code
            fresh = [httpx.get(f"{server.address}api/state", headers=auth, timeout=30).status_code for _ in range(5)]
            anonymous = httpx.get(f"{server.address}api/state", timeout=30)
    assert held >= IDLE + HALF_HEADER > MAX_CONNECTIONS
    assert polls == [200] * 20 and command == 200 and fresh == [200] * 5
    # without the token the old limit still holds: too many connections, 503
    assert anonymous.status_code == 503 and anonymous.headers["connection"] == "close"


def test_many_concurrent_requests_with_the_token_are_all_served():
    with serving() as server:
        request = (f"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Console-Token: {TOKEN}\r\n"
                   "Connection: close\r\n\r\n").encode()
        with held_sockets(server.port, [request] * 100) as socks:
            heads = [read_to_eof(sock).split(b"\r\n", 1)[0] for sock in socks]
    assert heads == [b"HTTP/1.1 200 OK"] * 100


def test_a_connection_that_never_completes_its_request_is_closed():
    with serving(request_timeout_s=0.5, keep_alive_s=30) as server:
        host = f"Host: 127.0.0.1:{server.port}\r\nX-Console-Token: {TOKEN}\r\n"
        served = f"GET /api/state HTTP/1.1\r\n{host}\r\n"
        payloads = [b"",  # nothing at all
                    f"GET /api/state HTTP/1.1\r\n{host}".encode(),  # half a header
                    f"POST /api/keys HTTP/1.1\r\n{host}Content-Length: 100\r\n\r\n{{\"keys\"".encode(),  # half a body
                    f"{served}GET /api/state HTTP/1.1\r\nHost".encode()]  # served once, then half a header
        with held_sockets(server.port, payloads) as socks:
            got = [read_to_eof(sock) for sock in socks]  # EOF: the server closed it
    assert got[:3] == [b"", b"", b""]
    assert got[3].startswith(b"HTTP/1.1 200") and got[3].count(b"HTTP/1.1") == 1
    assert server.server.server_state.connections == set()


def test_the_console_bench_serves_every_poll_beside_idle_sockets_and_closes_them():
    from robot_rl.bench import BENCHMARKS
    from robot_rl.bench.console import measure

    assert BENCHMARKS["console"].module == "robot_rl.bench.console"
    figures = measure(polls=50, request_timeout_s=0.5, log=lambda msg: None)  # bench console, its wait short
    assert figures["console_idle_sockets"] == 100 and figures["console_polls"] == 50
    assert figures["console_poll_503s_alone"] == 0 and figures["console_request_timeout_s"] == 0.5
    assert figures["console_poll_503s_idle_sockets"] == 0 and figures["console_concurrent_503s"] == 0
    assert 0 < figures["console_poll_ms_p50_idle_sockets"] <= figures["console_poll_ms_p99_idle_sockets"]
    assert figures["console_idle_sockets_closed"] == 100
    assert 0.5 <= figures["console_idle_closed_after_s_max"] < 30
