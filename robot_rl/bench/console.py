"""``robot-rl bench console``: whether idle sockets can take the operator console away.

The console (``ConsoleServer``, uvicorn in a thread of this process, a static backend) on
127.0.0.1. The operator's polls, as the page sends them (``GET /api/state`` with the token over
one keep-alive connection, back to back): latency p50/p99 and 503s, first alone, then while
``IDLE`` sockets are held open (80 that send nothing, 20 that send half a request head). Then
``CONCURRENT`` requests with the token sent at once on their own connections (503s among them),
and how long until the server closed the idle sockets (its request timeout). Figures end in
``_ms`` (milliseconds) or ``_s`` (seconds); every socket is closed at the end.
"""

from __future__ import annotations

import http.client
import selectors
import socket
import time

import numpy as np

IDLE, HALF_HEADER = 80, 20  # held sockets: silent, and half a request head
CONCURRENT = 100  # requests with the token sent at once


class StaticBackend:
    """The console's backend with nothing behind it: the same state every poll."""

    def state(self) -> dict:
        return {"linked": True, "intervening": False, "cameras": [], "step": {"episode": 0, "step": 0}}

    def camera_jpeg(self, name: str) -> None:
        return None

    def press(self, event: str) -> None:
        pass

    def intervene(self, how: str) -> None:
        pass

    def set_keys(self, keys: list[str]) -> None:
        pass


def _polls(port: int, token: str, count: int) -> tuple[list[float], int]:
    """``count`` polls over one keep-alive connection (http.client reconnects after a close):
    each one's latency in ms, and how many got 503."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies, refused = [], 0
    try:
        for _ in range(count):
            t0 = time.perf_counter()
            conn.request("GET", "/api/state", headers={"X-Console-Token": token})
            response = conn.getresponse()
            response.read()
            latencies.append((time.perf_counter() - t0) * 1000)
            refused += response.status == 503
    finally:
        conn.close()
    return latencies, refused


def _open(port: int, payload: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if payload:
        sock.sendall(payload)
    return sock


def _concurrent_refused(port: int, token: str, count: int) -> int:
    """``count`` requests with the token, each on its own connection, all sent before any answer
    is read: how many got 503."""
    request = (f"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Console-Token: {token}\r\n"
               "Connection: close\r\n\r\n").encode()
    socks = []
    try:
        for _ in range(count):
            socks.append(_open(port, request))
        heads = []
        for sock in socks:
            data = b""
            while b"\r\n" not in data and (chunk := sock.recv(4096)):
                data += chunk
            heads.append(data.split(b"\r\n", 1)[0])
    finally:
        for sock in socks:
            sock.close()
    return sum(b" 503 " in head for head in heads)


def _closed_after(socks: list[socket.socket], opened: float, limit_s: float) -> list[float]:
    """Seconds from ``opened`` until the server closed each socket (EOF), for those it closed
    within ``limit_s``."""
    closed = []
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        end = time.monotonic() + limit_s
        while selector.get_map() and time.monotonic() < end:
            for key, _ in selector.select(timeout=max(0.0, end - time.monotonic())):
                try:
                    data = key.fileobj.recv(4096)
                except ConnectionError:
                    data = b""
                if not data:
                    closed.append(time.monotonic() - opened)
                    selector.unregister(key.fileobj)
    return closed


def _ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


def run(quick: bool = False, log=print) -> dict:
    from robot_rl.teleop.console import REQUEST_TIMEOUT_S

    return measure(100 if quick else 1000, REQUEST_TIMEOUT_S, log)


def measure(polls: int, request_timeout_s: float, log=print) -> dict:
    """The figures, with ``polls`` polls each way and the server's request timeout (a short one
    makes a quick check: ``bench faults`` holds idle sockets this way)."""
    from robot_rl.teleop.console import MAX_CONNECTIONS, ConsoleServer, new_token

    token = new_token()
    server = ConsoleServer(StaticBackend(), "127.0.0.1", 0, token, request_timeout_s=request_timeout_s)
    server.start()
    held: list[socket.socket] = []
    try:
        port = server.port
        alone, alone_refused = _polls(port, token, polls)
        log(f"console: {polls} polls alone, p50 {_ms(alone, 50)} ms, {alone_refused} refused")
        half = f"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode()
        opened = time.monotonic()
        held = [_open(port, b"") for _ in range(IDLE)] + [_open(port, half) for _ in range(HALF_HEADER)]
        loaded, loaded_refused = _polls(port, token, polls)
        log(f"console: {polls} polls beside {len(held)} idle sockets, p50 {_ms(loaded, 50)} ms, "
            f"{loaded_refused} refused")
        concurrent_refused = _concurrent_refused(port, token, CONCURRENT)
        log(f"console: {CONCURRENT} concurrent requests with the token, {concurrent_refused} refused")
        closed = _closed_after(held, opened, 3 * request_timeout_s + 5)
        log(f"console: the server closed {len(closed)} of {len(held)} idle sockets")
    finally:
        for sock in held:
            sock.close()
        server.stop()
    return {
        "console_poll_ms_p50_alone": _ms(alone, 50), "console_poll_ms_p99_alone": _ms(alone, 99),
        "console_poll_503s_alone": alone_refused,
        "console_poll_ms_p50_idle_sockets": _ms(loaded, 50), "console_poll_ms_p99_idle_sockets": _ms(loaded, 99),
        "console_poll_503s_idle_sockets": loaded_refused, "console_polls": polls,
        "console_idle_sockets": IDLE + HALF_HEADER, "console_concurrent_requests": CONCURRENT,
        "console_concurrent_503s": concurrent_refused,
        "console_idle_sockets_closed": len(closed),
        "console_idle_closed_after_s_max": round(max(closed), 2) if closed else None,
        "console_request_timeout_s": request_timeout_s, "console_max_connections": MAX_CONNECTIONS,
        "notes": [
            "server: ConsoleServer (uvicorn, h11) in a thread of the benchmark's process, on 127.0.0.1, a static "
            "backend; client: http.client polls of /api/state with the token over one keep-alive connection, back "
            "to back (the page polls every 200 ms)",
            f"idle sockets: {IDLE} that send nothing and {HALF_HEADER} that send half a request head, held while "
            "the second set of polls and the concurrent requests run; 503s must be 0 in both (the operator's "
            "requests carry the token, for which only running requests count, not open connections)",
            f"console_idle_closed_after_s_max: from opening the idle sockets to the server closing the last of "
            f"them (its request timeout, {request_timeout_s} s); null if it closed none",
        ],
    }
