"""The operator console moves a robot: who may drive it. A real HTTP client (httpx) against the
real uvicorn server on 127.0.0.1 with an in-process backend that records every press, then
once through the real teleop node over ROS 2 (where the token must not leak: /rosout,
parameters)."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import threading

import httpx
import pytest

from robot_rl.teleop.console import (CONSOLE_TOKEN_ENV, MAX_BODY_BYTES, ConsoleError, ConsoleGuard, ConsoleServer,
                                     console_token)
from robot_rl.teleop import console as console_module
from tests.helpers.console import RecordingBackend
from tests.helpers.common import free_port  # noqa: E402

TOKEN = "the-operators-own-token"
COMMANDS = [("/api/event/success", None), ("/api/event/pause", None), ("/api/intervene/hold", None),
            ("/api/keys", {"keys": ["w"]})]
READS = ["/", "/api/state", "/api/camera/front"]


@pytest.fixture
def console():
    backend = RecordingBackend()
    server = ConsoleServer(backend, "127.0.0.1", 0, TOKEN)
    server.start()
    client = httpx.Client(base_url=server.address, timeout=30)
    try:
        yield server, backend, client
    finally:
        client.close()
        server.stop()


def test_cross_origin_commands_are_refused_and_not_acted_on(console):
    server, backend, client = console
    auth = {"X-Console-Token": TOKEN}
    own = server.address.rstrip("/")
    foreign = ["http://evil.example", "null", f"http://127.0.0.1:{free_port()}", f"https://127.0.0.1:{server.port}",
               f"http://localhost:{server.port}"]  # the Host below is 127.0.0.1: localhost is another origin
    for origin in foreign:
        for path, body in COMMANDS:
            r = client.post(path, json=body, headers={**auth, "Origin": origin})
            assert r.status_code == 403 and "cross-origin" in r.json()["detail"], (origin, path)
    for site in ("cross-site", "same-site"):  # what a browser says of a page of another site / another port
        assert client.post("/api/event/success", headers={**auth, "Sec-Fetch-Site": site}).status_code == 403
    assert client.post("/api/event/success", headers={"Origin": "http://evil.example"}).status_code == 403
    assert backend.calls == []
    # reading is no command, and a foreign page cannot read the answer: no CORS grant
    read = client.get("/api/state", headers={**auth, "Origin": "http://evil.example"})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers
    # the console's own page, and a client that sends no Origin (curl with the token), are served
    for path, body in COMMANDS:
        r = client.post(path, json=body, headers={**auth, "Origin": own, "Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 200, path
    assert client.post("/api/event/failure", headers=auth).status_code == 200
    assert backend.calls == [("press", "success"), ("press", "pause"), ("intervene", "hold"), ("keys", ["w"]),
                             ("press", "failure")]


def test_a_foreign_host_is_refused_so_a_rebinding_page_reads_nothing(console):
    server, backend, client = console
    auth = {"X-Console-Token": TOKEN}
    port = server.port
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}", f"127.0.0.1.evil.example:{port}",
                 f"localhost.:{port}"):
        for path in READS:
            r = client.get(path, params={"token": TOKEN}, headers={"Host": host})
            assert r.status_code == 400 and "Host" in r.json()["detail"], (host, path)
            assert "front" not in r.text
        assert client.post("/api/event/success", headers={**auth, "Host": host}).status_code == 400
    assert backend.calls == []
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        assert client.get("/api/state", headers={**auth, "Host": host}).status_code == 200, host


def test_every_route_needs_the_token(console):
    server, backend, client = console
    wrong = [{}, {"params": {"token": "wrong"}}, {"params": {"token": ""}}, {"headers": {"X-Console-Token": "wrong"}},
             {"headers": {"Cookie": f"robot_rl_console_{server.port}=wrong"}},
             {"headers": {"Cookie": f"robot_rl_console_{server.port + 1}={TOKEN}"}},  # another console's cookie
             {"params": {"token": TOKEN[:-1]}}, {"params": {"token": TOKEN + "x"}}]
    for how in wrong:
        for path in READS:
            r = client.get(path, **how)
            assert r.status_code == 401 and "token" in r.json()["detail"], (how, path)
        for path, body in COMMANDS:
            assert client.post(path, json=body, **how).status_code == 401, (how, path)
    assert backend.calls == []
    for how in ({"params": {"token": TOKEN}}, {"headers": {"X-Console-Token": TOKEN}},
                {"headers": {"Cookie": f"robot_rl_console_{server.port}={TOKEN}"}}):
        assert client.get("/api/state", **how).status_code == 200, how


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_oversized_bodies_get_413_and_are_not_read(console):
    server, backend, client = console
    auth = {"X-Console-Token": TOKEN, "Content-Type": "application/json"}
    big = b'{"keys": ["' + b"w" * MAX_BODY_BYTES + b'"]}'
    assert client.post("/api/keys", content=big, headers=auth).status_code == 413  # by its Content-Length
    total, sent = 300 * 2**20, [0]

    def stream():  # 300 MB, chunked: no Content-Length to go by
        chunk = b" " * 2**16
        while sent[0] < total:
            sent[0] += len(chunk)
            yield chunk

    before = rss_bytes()
    r = client.post("/api/keys", content=stream(), headers=auth)
    assert r.status_code == 413 and r.headers["connection"] == "close"
    assert sent[0] < total // 10  # the server stopped reading at the cap and hung up
    assert rss_bytes() - before < 64 * 2**20  # (it was 850 MB more, and kept)
    assert backend.calls == []
    assert client.post("/api/keys", json={"keys": ["w", "c"]}, headers=auth).status_code == 200
    assert backend.calls == [("keys", ["w", "c"])]


def test_the_guard_stops_reading_a_streamed_body_at_the_cap():
    """ASGI level: the guard pulls no more than the cap (plus the chunk that crossed it) from
    the server before answering 413, and the app never runs."""
    pulled, sent, app_calls = [0], [], []

    async def receive():
        pulled[0] += 1000
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        app_calls.append(scope)

    guard = ConsoleGuard(app, TOKEN, "127.0.0.1")
    scope = {"type": "http", "method": "POST", "path": "/api/keys", "query_string": b"", "server": ("127.0.0.1", 8080),
             "headers": [(b"host", b"127.0.0.1:8080"), (b"x-console-token", TOKEN.encode()),
                         (b"transfer-encoding", b"chunked")]}
    asyncio.run(guard(scope, receive, send))
    assert sent[0]["status"] == 413 and MAX_BODY_BYTES < pulled[0] <= MAX_BODY_BYTES + 1000 and app_calls == []
    sent.clear()
    asyncio.run(guard({**scope, "headers": scope["headers"][:2] + [(b"content-length", b"12x")]}, receive, send))
    assert sent[0]["status"] == 400 and app_calls == []


def _websocket_scope(host=b"127.0.0.1:8080", origin=None, token=TOKEN, extensions=True):
    headers = [(b"host", host), (b"upgrade", b"websocket"), (b"connection", b"Upgrade")]
    headers += [(b"origin", origin)] if origin else []
    query = f"token={token}".encode() if token else b""
    return {"type": "websocket", "path": "/ws", "query_string": query, "server": ("127.0.0.1", 8080),
            "headers": headers, "extensions": {"websocket.http.response": {}} if extensions else {}}


def test_the_guard_checks_websocket_upgrades_and_refuses_other_kinds_of_connection():
    """ASGI level: an upgrade gets the guard's Host, Origin and token checks before the app sees it."""
    sent, app_calls = [], []

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        app_calls.append(scope["type"])

    guard = ConsoleGuard(app, TOKEN, "127.0.0.1")
    for scope, status in ((_websocket_scope(host=b"evil.example:8080"), 400),
                          (_websocket_scope(origin=b"http://evil.example"), 403),
                          (_websocket_scope(token=None), 401)):
        sent.clear()
        asyncio.run(guard(scope, receive, send))
        assert sent[0]["type"] == "websocket.http.response.start" and sent[0]["status"] == status
        assert app_calls == []
    sent.clear()  # a server without the denial-response extension: the upgrade is closed unaccepted
    asyncio.run(guard(_websocket_scope(host=b"evil.example:8080", extensions=False), receive, send))
    assert sent == [{"type": "websocket.close", "code": 1008}] and app_calls == []
    asyncio.run(guard(_websocket_scope(origin=b"http://127.0.0.1:8080"), receive, send))
    assert app_calls == ["websocket"]  # its own page, its token: through to the app
    with pytest.raises(ValueError, match="HTTP only"):
        asyncio.run(guard({"type": "telepathy"}, receive, send))


def _raw_request(port: int, text: str) -> tuple[socket.socket, bytes]:
    """``text`` sent on a new loopback connection; the connection and the response's head."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(text.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return sock, head


def test_a_websocket_upgrade_with_a_foreign_host_gets_the_guards_400(console):
    server, backend, client = console
    sock, head = _raw_request(server.port, f"GET /ws?token={TOKEN} HTTP/1.1\r\nHost: evil.example:{server.port}\r\n"
                                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                                           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                           "Sec-WebSocket-Version: 13\r\n\r\n")
    sock.close()
    assert head.startswith(b"HTTP/1.1 400"), head[:200]


def test_an_idle_connection_is_closed_after_the_keep_alive():
    server = ConsoleServer(RecordingBackend(), "127.0.0.1", 0, TOKEN, keep_alive_s=0.5)
    server.start()
    try:
        sock, head = _raw_request(server.port, f"GET /api/state?token={TOKEN} HTTP/1.1\r\n"
                                               f"Host: 127.0.0.1:{server.port}\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        rest = b""
        while chunk := sock.recv(65536):  # the body, then the server's close: recv returns b"" (30 s cap)
            rest += chunk
        sock.close()
    finally:
        server.stop()
    assert console_module.KEEP_ALIVE_S <= 10 and console_module.MAX_CONNECTIONS >= 16


def test_the_page_with_its_token_sets_a_strict_cookie_and_its_own_requests_work(console):
    server, backend, _ = console
    own = server.address.rstrip("/")
    with httpx.Client(base_url=server.address, timeout=30) as browser:  # keeps cookies, as a browser does
        page = browser.get("/", params={"token": TOKEN})
        assert page.status_code == 200 and "Intervene (hold)" in page.text
        cookie = page.headers["set-cookie"]
        assert cookie.startswith(f"robot_rl_console_{server.port}=") and "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
        assert "history.replaceState" in page.text  # the page takes the token off the address bar
        assert browser.get("/api/state").status_code == 200  # the cookie alone, as after a reload
        assert browser.post("/api/event/success", headers={"Origin": own}).status_code == 200
    assert backend.calls == [("press", "success")]


def test_the_token_comes_from_the_environment_or_is_new_per_start():
    first, second = console_token("127.0.0.1", {}), console_token("localhost", {})
    assert first != second and len(first) >= 16
    assert console_token("127.0.0.1", {CONSOLE_TOKEN_ENV: TOKEN}) == TOKEN
    assert console_token("0.0.0.0", {CONSOLE_TOKEN_ENV: TOKEN}) == TOKEN
    with pytest.raises(ConsoleError, match="not loopback: set ROBOT_RL_CONSOLE_TOKEN"):
        console_token("0.0.0.0", {})
    with pytest.raises(ConsoleError, match="at least 16"):
        console_token("127.0.0.1", {CONSOLE_TOKEN_ENV: "short"})


def test_off_loopback_without_a_token_the_cli_says_one_line(capsys, monkeypatch):
    from robot_rl.commands.cli import main

    monkeypatch.delenv(CONSOLE_TOKEN_ENV, raising=False)
    assert main(["session", "--console-host", "0.0.0.0", "--devices"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("robot-rl: error: the console is bound to 0.0.0.0, not loopback: set ROBOT_RL_CONSOLE_TOKEN")
    assert err.count("\n") == 1
    assert main(["session", "--console-token", "short", "--devices"]) == 2
    assert "at least 16" in capsys.readouterr().err


@pytest.mark.ros
def test_off_loopback_without_a_token_the_node_says_one_line_and_its_stack_ends(tmp_path):
    """The teleop node exits 2 with one line (no traceback); its stack (where it respawns)
    ends with that status instead of restarting it forever."""
    pytest.importorskip("rclpy")
    from robot_rl.runtime.launcher import Supervisor, resolve
    from tests.helpers.ros import free_domain_id, ros_environment

    env = ros_environment(free_domain_id())
    env.pop(CONSOLE_TOKEN_ENV, None)
    direct = subprocess.run([sys.executable, "-m", "robot_rl.teleop.teleop_node", "--ros-args", "-p",
                             "console_host:=0.0.0.0", "-p", "devices:=[]"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert direct.returncode == 2 and direct.stdout == ""
    assert direct.stderr.startswith("teleop_node: error: the console is bound to 0.0.0.0, not loopback")
    assert direct.stderr.count("\n") == 1

    teleop = {n.name: n for n in resolve("session", {"console_host": "0.0.0.0", "devices": "[]"})}["teleop"]
    assert teleop.respawn
    lines: list[str] = []
    supervisor = Supervisor([teleop], log=lines.append, env=env, grace_s=5)
    result = []
    runner = threading.Thread(target=lambda: result.append(supervisor.run()), daemon=True)
    runner.start()
    runner.join(120)  # a failsafe: the node exits in seconds
    if runner.is_alive():
        supervisor.stopping.set()
        runner.join(30)
    assert result == [2] and supervisor.restarts["teleop"] == 0, lines
    said = [line for line in lines if line.startswith("[teleop]")]
    assert len(said) == 1 and "teleop_node: error: the console is bound to 0.0.0.0" in said[0]
    assert any("configuration error (2)" in line for line in lines)


@pytest.mark.ros
def test_the_token_is_neither_on_rosout_nor_a_parameter_and_the_operator_gets_the_url(tmp_path):
    """Through the real teleop node: the address with the token is on the node's standard
    output (the operator's terminal) only; /rosout and the node's parameters never hold it;
    its console refuses foreign origins and hosts like the in-process one."""
    pytest.importorskip("rclpy")
    from rcl_interfaces.msg import Log
    from rcl_interfaces.srv import GetParameters, ListParameters
    from rclpy.parameter import parameter_value_to_python
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from robot_rl.drivers import topics
    from tests.helpers.ros import Probe, free_domain_id, node_process

    domain, port = free_domain_id(), free_port()
    probe = Probe(domain)
    rosout = probe.subscribe(Log, "/rosout", QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                                                        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    events = probe.subscribe(String, topics.TELEOP_EVENTS, 10)
    log = tmp_path / "teleop.log"
    try:
        with node_process("robot_rl.teleop.teleop_node", {"devices": "[]", "cameras": "[]", "console_port": port},
                          domain, tmp_path, name="teleop"):
            printed = rf"operator console: (http://127\.0\.0\.1:{port}/\?token=(\S+))"
            probe.spin_until(lambda: re.search(printed, log.read_text()), 60, "the console's URL on the node's stdout")
            url, token = re.search(printed, log.read_text()).groups()
            probe.spin_until(lambda: any("operator console serving on" in m.msg for _, m in rosout), 60,
                             "the console's line on /rosout")

            def call(srv_type, name, request):
                client = probe.node.create_client(srv_type, name)
                probe.spin_until(client.service_is_ready, 30, name)
                future = client.call_async(request)
                probe.spin_until(future.done, 30, f"reply from {name}")
                return future.result()

            names = list(call(ListParameters, "/teleop/list_parameters", ListParameters.Request()).result.names)
            values = [v for name in names  # one by one: an empty array given as [] is a parameter without a value
                      for v in call(GetParameters, "/teleop/get_parameters", GetParameters.Request(names=[name])).values]
            assert "console_port" in names and "console_host" in names and len(values) >= len(names) - 2
            assert not any("token" in name for name in names)
            assert not any(token in str(parameter_value_to_python(v)) for v in values)
            assert not any(token in str(m) for _, m in rosout)

            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                assert client.get("/api/state").status_code == 401
                assert client.get(url).status_code == 200  # the page (its cookie serves the page's requests)
                auth, own = {"X-Console-Token": token}, {"Origin": f"http://127.0.0.1:{port}"}
                assert client.get("/api/state", headers={**auth, "Host": f"evil.example:{port}"}).status_code == 400

                def failure_posted() -> bool:  # until DDS has matched the probe: then it is delivered
                    assert client.post("/api/event/failure", headers={**auth, **own}).status_code == 200
                    probe.spin_for(0.1)
                    return bool(events)

                probe.spin_until(failure_posted, 60, "the operator's failure on teleop/events")
                mark = len(events)
                refused = client.post("/api/event/success", headers={**auth, "Origin": "http://evil.example"})
                assert refused.status_code == 403
                assert client.post("/api/event/reset", headers={**auth, **own}).status_code == 200
            probe.spin_until(lambda: len(events) > mark, 30, "the reset event")
            assert [m.data for _, m in events[mark:]] == ["reset"]  # the refused success never went out
    finally:
        probe.close()
