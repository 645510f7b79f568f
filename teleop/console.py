"""The operator's console: a FastAPI app the teleop node serves.

One page: live camera views, the episode's step, reward and classifier confidence, buttons
(and keyboard shortcuts) for intervene (hold and toggle), success, failure, reset, pause,
re-record, and charts of success rate, intervention rate and episode return. The page polls
``/api/state`` and the camera JPEGs; buttons POST to ``/api/...``. Everything the page needs
is in this file: nothing is loaded from the internet.

Binding: 127.0.0.1 by default. Bound to any other address the console refuses to start
without a token, and every request must carry it (``?token=``, an ``X-Console-Token`` header
or the cookie the page sets), else 401.

The backend (``ConsoleBackend``) is whatever holds the live state: the teleop node over ROS 2,
or an in-process session.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
from typing import Protocol

from robot_rl.drivers.topics import TELEOP_EVENT_NAMES as BUTTON_EVENTS  # ROS-free names
from robot_rl.errors import UserFacingError

INTERVENE = ("hold", "release", "toggle")


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
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_app(backend: ConsoleBackend, token: str | None = None):
    from fastapi import Body, FastAPI, HTTPException, Request, Response
    from fastapi.responses import HTMLResponse, JSONResponse

    app = FastAPI(title="robot_rl operator console", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def require_token(request: Request, call_next):
        if token is not None:
            given = (request.query_params.get("token") or request.headers.get("x-console-token")
                     or request.cookies.get("console_token") or "")
            if not hmac.compare_digest(given.encode(), token.encode()):
                return JSONResponse({"detail": "this console needs its token (?token=...)"}, status_code=401)
        response = await call_next(request)
        if token is not None and request.url.path == "/":
            response.set_cookie("console_token", token, httponly=True, samesite="strict")
        return response

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
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})

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

    return app


class ConsoleServer:
    """uvicorn in a background thread; ``url`` once started (port 0 picks a free one)."""

    def __init__(self, backend: ConsoleBackend, host: str = "127.0.0.1", port: int = 8080, token: str | None = None):
        if not is_loopback(host) and not token:
            raise ConsoleError(f"the console is bound to {host}, not loopback: give it a token (console_token) so "
                               "that only the operator can drive the robot")
        import uvicorn

        self.host, self.token = host, token
        config = uvicorn.Config(create_app(backend, token), host=host, port=port, log_level="warning",
                                access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="console")

    def start(self, timeout_s: float = 10.0) -> str:
        import time

        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise ConsoleError(f"the console did not start on {self.host} (port taken?)")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.port = port
        return self.url

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


def new_token() -> str:
    return secrets.token_urlsafe(16)


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
    const r = await fetch("/api/state", {headers}); state = await r.json();
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
