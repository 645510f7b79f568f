"""The operator's console: a FastAPI app the teleop node serves.

One page: live camera views, the episode's step, reward and classifier confidence, buttons
(and keyboard shortcuts) for intervene (hold and toggle), success, failure, reset, pause,
re-record, and charts of success rate, intervention rate and episode return. The page polls
``/api/state`` and the camera JPEGs; buttons POST to ``/api/...``. Everything the page needs
is in this file: nothing is loaded from the internet.

The console moves a robot, so every request passes :class:`ConsoleGuard` (a plain ASGI
middleware in front of the app), in this order:

1. ``Host`` must name this console: 127.0.0.1, localhost, [::1] or the bound address (bound
   elsewhere than loopback also the address the request arrived on and the machine's host
   name), with the console's port; else 400 (a DNS-rebinding page names its own host).
2. POST (any method but GET/HEAD/OPTIONS): an ``Origin`` header, when there is one, must be
   the console's own (``http://`` + that Host), and ``Sec-Fetch-Site`` must not say
   cross-site; else 403. Browsers send ``Origin`` on every POST; a client without one
   (curl) passes this step and still needs the token.
3. The token: every request carries it (``?token=``, an ``X-Console-Token`` header, or the
   cookie the page's own response sets: HttpOnly, SameSite=Strict); else 401. It is a random
   token per start on loopback too, or ``ROBOT_RL_CONSOLE_TOKEN`` from the environment
   (required when bound elsewhere than loopback). It is never a ROS parameter nor logged.
4. Bodies: at most ``MAX_BODY_BYTES``; a larger ``Content-Length``, or a streamed body that
   grows past it, gets 413 and is not read further.

A WebSocket upgrade passes the same Host, Origin (when there is one, and browsers always send it
on an upgrade) and token checks (400, 403, 401), though the app has no WebSocket route; any
other kind of connection is refused.

Connections: one that has not sent a complete request (head and body) within ``REQUEST_TIMEOUT_S`` of
opening, or of its last response, is closed (:func:`console_protocol`; uvicorn's keep-alive timeout
only runs between requests and stops at the next request's first byte), and an idle one after
``KEEP_ALIVE_S``. Before the checks above, a request without the token gets 503 while
``MAX_CONNECTIONS`` connections are open or as many requests run; the operator's (with the token)
only beyond ``MAX_OPERATOR_REQUESTS`` requests at once, so idle or half-sent connections never
lock the operator out.

The backend (``ConsoleBackend``) is whatever holds the live state: the teleop node over ROS 2,
or an in-process session.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import socket
import threading
from http.cookies import CookieError, SimpleCookie
from typing import Protocol
from urllib.parse import parse_qs

from robot_rl.contract import OPERATOR_EVENTS as BUTTON_EVENTS
from robot_rl.errors import InputError, UserFacingError

INTERVENE = ("hold", "release", "toggle")
CONSOLE_TOKEN_ENV = "ROBOT_RL_CONSOLE_TOKEN"
MIN_TOKEN_CHARS = 16
MAX_BODY_BYTES = 16 * 1024  # the largest request the page sends (held keys) is a few hundred bytes
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
KEEP_ALIVE_S = 5  # an idle connection is closed after this (the page polls every few hundred ms)
REQUEST_TIMEOUT_S = 5  # a connection that has not sent a complete request within this is closed
MAX_CONNECTIONS = 64  # without the token: beyond this many open connections or running requests, 503
MAX_OPERATOR_REQUESTS = 256  # with the token: beyond this many running requests, 503 (idle sockets do not count)
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"content-security-policy", b"default-src 'self'; script-src 'self' 'unsafe-inline'; "
                                 b"style-src 'self' 'unsafe-inline'; img-src 'self'; frame-ancestors 'none'"),
]


class ConsoleError(UserFacingError):
    pass


class ConsoleBackend(Protocol):
    def state(self) -> dict: ...

    def camera_jpeg(self, name: str) -> bytes | None: ...

    def press(self, event: str) -> None: ...

    def intervene(self, how: str) -> None: ...

    def set_keys(self, keys: list[str]) -> None: ...


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(16)


def console_token(host: str, environ=None) -> str:
    """The console's token: ``ROBOT_RL_CONSOLE_TOKEN`` when set, else, on loopback only, a new
    random one (printed with the console's address on the operator's terminal)."""
    environ = os.environ if environ is None else environ
    given = environ.get(CONSOLE_TOKEN_ENV, "").strip()
    if given:
        if len(given) < MIN_TOKEN_CHARS:
            raise ConsoleError(f"{CONSOLE_TOKEN_ENV} is {len(given)} characters: give at least {MIN_TOKEN_CHARS} "
                               "(python -c 'import secrets; print(secrets.token_urlsafe(16))')")
        return given
    if not is_loopback(host):
        raise ConsoleError(f"the console is bound to {host}, not loopback: set {CONSOLE_TOKEN_ENV} (robot-rl session "
                           "--console-token) so that only the operator can drive the robot")
    return new_token()


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class ConsoleGuard:
    """Host, Origin, token and body-size checks in front of an ASGI app (see the module's doc)."""

    def __init__(self, app, token: str, bound_host: str = "127.0.0.1", max_body_bytes: int = MAX_BODY_BYTES):
        if not token:
            raise ConsoleError("the console needs a token")
        self.app, self.token, self.max_body_bytes = app, token.encode(), max_body_bytes
        self.bound_host = bound_host
        self.load = None  # the server's open connections and running requests (uvicorn's ServerState), once served
        names = {"127.0.0.1", "localhost", "[::1]", _bracketed(bound_host).lower()}
        if not is_loopback(bound_host):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        self.names = names

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":  # the server's own start and stop: no request in it
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await self._guard_websocket(scope, receive, send)
        if scope["type"] != "http":
            raise InputError(f"the console serves HTTP only, not {scope['type']!r} connections")
        headers = _headers(scope)
        operator = self._token_given(scope, headers)
        if self._overloaded(operator):
            return await _respond(send, 503, "the console is busy: too many connections", close=True)
        host = self._host(scope, headers)
        if host is None:
            return await _respond(send, 400, "this console answers only to its own address (Host header)")
        if scope["method"] not in SAFE_METHODS and not self._same_origin(headers, host):
            return await _respond(send, 403, "cross-origin request refused: only the console's own page may "
                                             "send commands")
        if not operator:
            return await _respond(send, 401, "this console needs its token: open the address the teleop node "
                                             "printed (.../?token=...)")
        length = headers.get("content-length", ["0"])
        if len(length) != 1 or not length[0].isdigit():
            return await _respond(send, 400, "bad Content-Length")
        if int(length[0]) > self.max_body_bytes:
            return await _respond(send, 413, f"request body over {self.max_body_bytes} bytes", close=True)
        body = await self._read_body(receive)
        if body is None:  # too large (413) or the client went away
            return await _respond(send, 413, f"request body over {self.max_body_bytes} bytes", close=True)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        cookie = self._cookie_header(scope) if scope["path"] == "/" else None

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS) + ([cookie] if cookie and message["status"] == 200 else [])
                message = {**message, "headers": list(message.get("headers", [])) + extra}
            await send(message)

        await self.app(scope, replay, send_with_headers)

    async def _guard_websocket(self, scope, receive, send):
        """The same Host, Origin and token checks before a WebSocket upgrade reaches the app. A
        browser always sends ``Origin`` on an upgrade, so a foreign one is refused, as on POST."""
        headers = _headers(scope)
        host = self._host(scope, headers)
        if host is None:
            return await _deny_websocket(scope, receive, send, 400, "this console answers only to its own address "
                                                                   "(Host header)")
        if not self._same_origin(headers, host):
            return await _deny_websocket(scope, receive, send, 403, "cross-origin connection refused")
        if not self._token_given(scope, headers):
            return await _deny_websocket(scope, receive, send, 401, "this console needs its token")
        return await self.app(scope, receive, send)

    def _overloaded(self, operator: bool) -> bool:
        """Whether to answer 503: uvicorn's limit for a request without the token, and for the
        operator's only a bound on running requests, so that idle connections never count."""
        if self.load is None:
            return False
        running = len(self.load.tasks) - 1  # this request's own task is in it
        if operator:
            return running >= MAX_OPERATOR_REQUESTS
        return len(self.load.connections) >= MAX_CONNECTIONS or running >= MAX_CONNECTIONS

    def _host(self, scope, headers) -> str | None:
        """The request's Host when it names this console, else None."""
        values = headers.get("host", [])
        server = scope.get("server")
        if len(values) != 1 or not server:
            return None
        host, port = values[0].lower(), server[1]
        names = self.names | ({_bracketed(str(server[0])).lower()} if not is_loopback(self.bound_host) else set())
        allowed = {f"{name}:{port}" for name in names} | (names if port == 80 else set())
        return host if host in allowed else None

    def _same_origin(self, headers, host: str) -> bool:
        origins = headers.get("origin", [])
        if len(origins) > 1 or (origins and origins[0].lower() != f"http://{host}"):
            return False
        return headers.get("sec-fetch-site", ["same-origin"])[0].lower() in ("same-origin", "none")

    def _cookie_name(self, scope) -> str:
        return f"robot_rl_console_{scope['server'][1]}"  # cookies ignore ports: one name per console

    def _token_given(self, scope, headers) -> bool:
        given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [])
        given += headers.get("x-console-token", [])
        for raw in headers.get("cookie", []):
            try:
                morsel = SimpleCookie(raw).get(self._cookie_name(scope))
            except CookieError:
                continue
            if morsel is not None:
                given.append(morsel.value)
        return any(hmac.compare_digest(g.encode(), self.token) for g in given)

    def _cookie_header(self, scope) -> tuple[bytes, bytes]:
        value = f"{self._cookie_name(scope)}={self.token.decode()}; HttpOnly; SameSite=Strict; Path=/"
        return b"set-cookie", value.encode()

    async def _read_body(self, receive) -> bytes | None:
        """The whole body, or None as soon as it grows past the cap (the rest is never read)."""
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)


def _headers(scope) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for key, value in scope["headers"]:
        headers.setdefault(key.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return headers


async def _deny_websocket(scope, receive, send, status: int, detail: str) -> None:
    """Refuse an upgrade with the guard's own HTTP status where the server can send one (the ASGI
    denial-response extension), else close it (the server answers 403)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   *SECURITY_HEADERS]
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008})


async def _respond(send, status: int, detail: str, close: bool = False) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *SECURITY_HEADERS] + ([(b"connection", b"close")] if close else [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app(backend: ConsoleBackend, token: str, host: str = "127.0.0.1", max_body_bytes: int = MAX_BODY_BYTES):
    """The console's ASGI app behind its guard; ``host`` is the address it is bound to."""
    from fastapi import Body, FastAPI, HTTPException
    from fastapi.responses import HTMLResponse, Response

    app = FastAPI(title="robot_rl operator console", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def page():
        return PAGE

    @app.get("/api/state")
    def state():
        return backend.state()

    @app.get("/api/camera/{name}")
    def camera(name: str):
        jpeg = backend.camera_jpeg(name)
        if jpeg is None:
            raise HTTPException(404, f"no frame from camera {name!r} yet")
        return Response(jpeg, media_type="image/jpeg")

    @app.post("/api/event/{name}")
    def event(name: str):
        if name not in BUTTON_EVENTS:
            raise HTTPException(404, f"unknown event {name!r}; known: {', '.join(BUTTON_EVENTS)}")
        backend.press(name)
        return {"ok": True, "event": name}

    @app.post("/api/intervene/{how}")
    def intervene(how: str):
        if how not in INTERVENE:
            raise HTTPException(404, f"unknown intervene action {how!r}; known: {', '.join(INTERVENE)}")
        backend.intervene(how)
        return {"ok": True, "intervene": how}

    @app.post("/api/keys")
    def keys(body: dict = Body(...)):
        held = body.get("keys")
        if not isinstance(held, list) or not all(isinstance(k, str) and len(k) <= 16 for k in held) or len(held) > 16:
            raise HTTPException(422, "keys: a list of at most 16 key names")
        backend.set_keys(held)
        return {"ok": True}

    return ConsoleGuard(app, token, host, max_body_bytes)


def console_protocol(request_timeout_s: float = REQUEST_TIMEOUT_S):
    """uvicorn's h11 protocol class, closing a connection that has not sent a complete request
    (head and body) within ``request_timeout_s`` of opening or of its last response."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ConsoleProtocol(H11Protocol):
        request_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._start_request_timer()

        def on_response_complete(self):
            super().on_response_complete()
            self._start_request_timer()

        def connection_lost(self, exc):
            self._stop_request_timer()
            super().connection_lost(exc)

        def handle_websocket_upgrade(self, event):
            self._stop_request_timer()  # the WebSocket protocol owns the connection from here
            super().handle_websocket_upgrade(event)

        def _start_request_timer(self):
            self._stop_request_timer()
            self.request_timer = self.loop.call_later(request_timeout_s, self._request_timed_out)

        def _stop_request_timer(self):
            if self.request_timer is not None:
                self.request_timer.cancel()

        def _request_timed_out(self):
            # IDLE: no complete request head since the connection opened or its last response;
            # SEND_BODY: the body is still coming. Other states: a request is being answered.
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
                self.transport.close()

    return ConsoleProtocol


class ConsoleServer:
    """uvicorn in a background thread; ``url`` (with the token) once started (port 0 picks a
    free one). ``token=None``: a new random one on loopback; elsewhere it must be given. An idle
    connection is closed after ``keep_alive_s``, one that has not sent a complete request after
    ``request_timeout_s``."""

    def __init__(self, backend: ConsoleBackend, host: str = "127.0.0.1", port: int = 8080, token: str | None = None,
                 keep_alive_s: float = KEEP_ALIVE_S, request_timeout_s: float = REQUEST_TIMEOUT_S):
        token = token or console_token(host, environ={})
        import uvicorn

        self.host, self.token = host, token
        app = create_app(backend, token, host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                                server_header=False, timeout_keep_alive=keep_alive_s,
                                http=console_protocol(request_timeout_s))
        self.server = uvicorn.Server(config)
        app.load = self.server.server_state  # the guard's limits count its connections and requests
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="console")

    def start(self, timeout_s: float = 10.0) -> str:
        import time

        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise ConsoleError(f"the console did not start on {self.host}:{self.server.config.port} (port taken? "
                                   "choose another with console_port)")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self.url

    @property
    def address(self) -> str:
        """Where it serves, without the token: safe to log."""
        return f"http://{_bracketed(self.host)}:{self.port}/"

    @property
    def url(self) -> str:
        """The operator's address, token included: print it on their terminal only, never log it."""
        return f"{self.address}?token={self.token}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>robot_rl console</title>
<style>
 body{font-family:system-ui,sans-serif;margin:0;background:#16181d;color:#e6e6e6}
 header{display:flex;gap:1.5em;align-items:center;padding:.6em 1em;background:#22252c}
 header b{font-size:1.1em} .pill{padding:.15em .6em;border-radius:1em;background:#333}
 .on{background:#c0392b;color:#fff} .paused{background:#b9770e;color:#fff}
 main{display:grid;grid-template-columns:auto 22em;gap:1em;padding:1em}
 #cams{display:flex;flex-wrap:wrap;gap:.6em} #cams figure{margin:0} #cams img{width:256px;height:256px;
 image-rendering:pixelated;background:#000;border:1px solid #444} figcaption{font-size:.8em;color:#aaa}
 button{font-size:1em;padding:.55em .8em;margin:.2em;border:0;border-radius:.3em;background:#3a3f4b;color:#eee;
 cursor:pointer} button:hover{background:#4a5060} #btn-success{background:#1e8449} #btn-failure{background:#922b21}
 #btn-hold.active,#btn-toggle.active{background:#c0392b}
 dl{display:grid;grid-template-columns:auto auto;gap:.2em 1em;margin:.5em 0} dt{color:#aaa}
 svg{background:#1d2026;border:1px solid #333;margin-top:.4em} kbd{background:#333;padding:0 .3em;border-radius:.2em}
 small{color:#999}
</style></head><body>
<header><b>robot_rl</b><span id="task" class="pill"></span><span id="intervening" class="pill">policy</span>
<span id="paused" class="pill">running</span><span id="link" class="pill">connecting...</span></header>
<main><section><div id="cams"></div>
<div><svg id="chart" width="560" height="170"></svg><br>
<small><span style="color:#2ecc71">success rate</span> &middot; <span style="color:#e74c3c">intervention rate</span>
&middot; <span style="color:#5dade2">episode return</span> (last 50 episodes)</small></div></section>
<aside>
<dl><dt>episode</dt><dd id="episode">-</dd><dt>step</dt><dd id="step">-</dd><dt>reward</dt><dd id="reward">-</dd>
<dt>return</dt><dd id="return">-</dd><dt>classifier</dt><dd id="confidence">-</dd>
<dt>episodes</dt><dd id="episodes">-</dd><dt>successes</dt><dd id="successes">-</dd>
<dt>devices</dt><dd id="devices">-</dd></dl>
<div><button id="btn-hold" title="hold: Space">Intervene (hold)</button>
<button id="btn-toggle" title="T">Intervene (toggle)</button></div>
<div><button id="btn-success" title="Enter">Success</button><button id="btn-failure" title="X">Failure</button></div>
<div><button id="btn-reset" title="Z">Reset</button><button id="btn-pause" title="P">Pause</button>
<button id="btn-rerecord" title="B">Re-record</button></div>
<p><small>Keys: <kbd>Space</kbd> hold to intervene, <kbd>T</kbd> toggle, <kbd>Enter</kbd> success, <kbd>X</kbd>
failure, <kbd>Z</kbd> reset, <kbd>P</kbd> pause/resume, <kbd>B</kbd> re-record. While intervening: <kbd>W</kbd>/<kbd>S</kbd>
x, <kbd>A</kbd>/<kbd>D</kbd> y, <kbd>R</kbd>/<kbd>F</kbd> z, <kbd>Q</kbd>/<kbd>E</kbd> yaw, <kbd>C</kbd> close,
<kbd>V</kbd> open.</small></p>
<p id="message"><small></small></p>
</aside></main>
<script>
const token = new URLSearchParams(location.search).get("token");
if (token) history.replaceState(null, "", location.pathname);  // off the address bar; the cookie serves a reload
const headers = token ? {"X-Console-Token": token} : {};
const q = token ? "?token=" + encodeURIComponent(token) + "&" : "?";
let state = {}, held = new Set(), paused = false;
function post(path, body){return fetch(path, {method:"POST", headers:{...headers, "Content-Type":"application/json"},
  body: body ? JSON.stringify(body) : null}).then(r => r.json()).then(j => {document.querySelector("#message small")
  .textContent = JSON.stringify(j); return j;});}
function press(name){ if(name === "pause" && paused) name = "resume"; return post("/api/event/" + name); }
function intervene(how){ return post("/api/intervene/" + how); }
function sendKeys(){ return post("/api/keys", {keys:[...held]}); }
for (const e of ["success","failure","reset","pause","rerecord"])
  document.getElementById("btn-" + e).addEventListener("click", () => press(e));
const hold = document.getElementById("btn-hold");
hold.addEventListener("pointerdown", () => {hold.classList.add("active"); intervene("hold");});
for (const ev of ["pointerup","pointerleave"]) hold.addEventListener(ev, () => {
  if (hold.classList.contains("active")) {hold.classList.remove("active"); intervene("release");}});
document.getElementById("btn-toggle").addEventListener("click", () => intervene("toggle"));
const motion = new Set(["w","a","s","d","r","f","q","e","c","v"]);
const shortcuts = {"enter":"success","x":"failure","z":"reset","p":"pause","b":"rerecord"};
document.addEventListener("keydown", ev => {
  const k = ev.key.toLowerCase(); if (ev.repeat) return;
  if (k === " ") {ev.preventDefault(); hold.classList.add("active"); intervene("hold");}
  else if (k === "t") intervene("toggle");
  else if (shortcuts[k]) press(shortcuts[k]);
  else if (motion.has(k)) {held.add(k); sendKeys();}
});
document.addEventListener("keyup", ev => {
  const k = ev.key.toLowerCase();
  if (k === " ") {hold.classList.remove("active"); intervene("release");}
  else if (motion.has(k)) {held.delete(k); sendKeys();}
});
function fmt(v, d){ return v === null || v === undefined ? "-" : (typeof v === "number" ? v.toFixed(d) : v); }
function line(points, color, max){
  if (points.length < 2) return "";
  const w = 560, h = 170, n = points.length;
  const xy = points.map((v, i) => `${(i / (n - 1) * (w - 10) + 5).toFixed(1)},${(h - 5 - v / max * (h - 10)).toFixed(1)}`);
  return `<polyline fill="none" stroke="${color}" stroke-width="2" points="${xy.join(" ")}"/>`;
}
function chart(history){
  const last = history.slice(-50), rate = [];
  let wins = 0; last.forEach((e, i) => {wins += e.success ? 1 : 0; rate.push(wins / (i + 1));});
  const returns = last.map(e => e.return || 0), top = Math.max(1, ...returns);
  document.getElementById("chart").innerHTML = line(rate, "#2ecc71", 1) +
    line(last.map(e => e.intervention_rate || 0), "#e74c3c", 1) + line(returns, "#5dade2", top);
}
function cams(names){
  const box = document.getElementById("cams");
  for (const n of names) {
    let img = document.getElementById("cam-" + n);
    if (!img) { const f = document.createElement("figure"); img = document.createElement("img"); img.id = "cam-" + n;
      img.alt = n; const c = document.createElement("figcaption"); c.textContent = n; f.append(img, c); box.append(f); }
    const next = new Image();
    next.onload = () => { img.src = next.src; };
    next.src = "/api/camera/" + n + q + "t=" + Date.now();
  }
}
async function poll(){
  try {
    const r = await fetch("/api/state", {headers});
    if (r.status === 401) { document.getElementById("link").textContent =
      "token refused: open the address the teleop node printed"; setTimeout(poll, 1000); return; }
    state = await r.json();
    document.getElementById("link").textContent = state.linked ? "stack live" : "waiting for the stack";
    document.getElementById("task").textContent = state.task || "";
    const iv = document.getElementById("intervening");
    iv.textContent = state.intervening ? "HUMAN (" + (state.intervention_source || "") + ")" : "policy";
    iv.className = "pill" + (state.intervening ? " on" : "");
    paused = !!state.paused; const p = document.getElementById("paused");
    p.textContent = paused ? "paused" : "running"; p.className = "pill" + (paused ? " paused" : "");
    document.getElementById("btn-pause").textContent = paused ? "Resume" : "Pause";
    document.getElementById("btn-toggle").classList.toggle("active", !!state.toggled);
    const s = state.step || {};
    for (const [id, key, d] of [["episode","episode",0],["step","step",0],["reward","reward",2],
                                ["return","episode_return",2],["confidence","confidence",3]])
      document.getElementById(id).textContent = fmt(s[key], d);
    document.getElementById("episodes").textContent = fmt(state.episodes, 0);
    document.getElementById("successes").textContent = fmt(state.successes, 0);
    document.getElementById("devices").textContent = (state.devices || []).join(", ") || "console only";
    chart(state.history || []); cams(state.cameras || []);
  } catch (e) { document.getElementById("link").textContent = "console unreachable"; }
  setTimeout(poll, 200);
}
poll();
</script></body></html>
"""
