"""The actor node's ROS-side parts: the teleop layer's action as the loop's human, operator
events and the arm's mode from their topics, and the recorder topic as the episode recorder's
store. Callbacks run on the node's executor thread; the actor loop reads from its own."""

from __future__ import annotations

import json
import threading
import time

import numpy as np

from robot_rl.contract import ARM_STOPPED_BY_REFLEX, OPERATOR_EVENTS, OperatorTakeover
from robot_rl.drivers import messages as msgs
from robot_rl.runtime.wire import encode


class EpisodeSink:
    """Where ``EpisodeRecorder`` commits: here a ROS topic instead of a store. Each episode
    carries its ``sender`` (this actor process) and ``seq`` (0, 1, ...), which the recorder
    reports back once it has committed or refused it (``RecorderReceipts``)."""

    def __init__(self, publisher, fields: dict, sender: str = ""):
        self.publisher, self.fields, self.sender = publisher, fields, sender
        self.sent = 0

    def add_episode(self, episode: dict) -> int:
        meta = {"sender": self.sender, "seq": self.sent}
        self.publisher.publish(msgs.payload_msg(encode("episode", episode, meta)))
        self.sent += 1
        return self.sent - 1


class RecorderReceipts:
    """The recorder's word on one actor's episodes: its latched ``recorder/status`` says, per
    sender, the last episode it has handled (committed, or refused and counted). An actor that
    stops on its own (its step or episode count reached) waits for it before it exits, since its
    supervisor then stops the recorder: an episode still on the wire would be lost."""

    def __init__(self, sender: str):
        self.sender = sender
        self.handled = -1  # the last seq handled
        self._changed = threading.Condition()

    def on_status(self, msg) -> None:
        try:
            seq = json.loads(msg.data).get("handled", {}).get(self.sender)
        except (ValueError, AttributeError):
            return
        if isinstance(seq, int):
            with self._changed:
                self.handled = max(self.handled, seq)
                self._changed.notify_all()

    def wait_for(self, sent: int, timeout_s: float, cancelled=lambda: False) -> bool:
        """True once the first ``sent`` episodes are handled; False when ``cancelled()`` turns
        true (checked every 0.1 s: the node is shutting down) or after ``timeout_s`` (a failsafe
        for a recorder that is gone)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self.handled < sent - 1:
                left = deadline - time.monotonic()
                if left <= 0 or cancelled():
                    return False
                self._changed.wait(min(0.1, left))
            return True


class Teleop:
    """The newest human action and whether the human holds the controls (a takeover ends with
    its episode: ``reset()``, which the actor loop calls as each episode starts; ``OperatorTakeover``)."""

    def __init__(self, max_age_s: float):
        self.max_age_s = max_age_s
        self.takeover = OperatorTakeover()
        self.action: np.ndarray | None = None
        self.stamp = 0.0

    def reset(self) -> None:
        self.takeover.episode_start()
        self.action = None

    def on_intervening(self, msg) -> None:
        self.takeover.set(bool(msg.data))

    def on_action(self, msg) -> None:
        values = np.asarray(msg.data, np.float64)
        if values.shape == (7,) and np.all(np.isfinite(values)):
            self.action, self.stamp = np.clip(values, -1, 1).astype(np.float32), time.monotonic()

    def __call__(self, raw: dict) -> np.ndarray | None:
        if self.takeover.on and self.action is not None and time.monotonic() - self.stamp <= self.max_age_s:
            return self.action
        return None


class OperatorEvents:
    """``teleop/events`` queued for the actor loop (unknown names are logged and ignored)."""

    def __init__(self, logger):
        self.logger = logger
        self._events: list[str] = []
        self._lock = threading.Lock()
        self._arrived = threading.Event()

    def on_event(self, msg) -> None:
        event = msg.data.strip().lower()
        if event not in OPERATOR_EVENTS:
            self.logger.warning(f"ignoring unknown teleop event {msg.data!r}; known: {', '.join(OPERATOR_EVENTS)}")
            return
        with self._lock:
            self._events.append(event)
            self._arrived.set()

    def take(self) -> list[str]:
        with self._lock:
            events, self._events = self._events, []
            self._arrived.clear()
        return events

    def wait(self, timeout: float) -> bool:
        return self._arrived.wait(timeout)


class ArmMode:
    """The arm driver's mode from ``arm/status``: while it holds, commands are not executed."""

    def __init__(self, logger):
        self.logger = logger
        self.mode = ""
        self.backend_fault = False
        self.fault_kind: str | None = None  # the backend's last fault: reflex, command, connection, ...
        self.faults = 0  # the backend's faults so far (its counts)
        self._reflex_told: int | None = None  # the fault count of the last reflex said (the first status's: before us)

    def on_status(self, msg) -> None:
        try:
            status = json.loads(msg.data)
            self.mode = str(status.get("mode", ""))
            self.backend_fault = bool(status.get("backend_fault", False))
            backend = status.get("backend") or {}
            self.fault_kind = (backend.get("last_fault") or {}).get("kind")
            self.faults = int((backend.get("counts") or {}).get("faults", 0))
            if self._reflex_told is None:  # faults before the actor's first status are not its episodes
                self._reflex_told = self.faults
        except (ValueError, TypeError, AttributeError):
            self.logger.warning(f"ignoring a malformed arm status {msg.data[:80]!r}")

    def holds(self) -> str:
        """The mode if the arm ignores commands (e-stop, or its operator is gone), "backend_fault"
        while its backend stands faulted (a servo silent, the connection lost: it sends nothing to
        the robot), else "": what the actor sends is then not what happens, so nothing of it may
        be learned or recorded. A new collision reflex (a Franka's, the twin's) is said once, as
        ``contract.ARM_STOPPED_BY_REFLEX``, even where the arm had recovered by the status the actor
        read (the fault count grew): the actor ends its episode there as a failure; while the
        backend recovers from it, "backend_fault"."""
        if self.mode in ("estop", "operator_lost"):
            return self.mode
        if (self.fault_kind == ARM_STOPPED_BY_REFLEX and self._reflex_told is not None
                and self.faults != self._reflex_told):
            self._reflex_told = self.faults
            return ARM_STOPPED_BY_REFLEX
        return "backend_fault" if self.backend_fault else ""
