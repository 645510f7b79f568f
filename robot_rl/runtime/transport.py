"""Actor <-> learner message transport, with no pickle on the wire.

Wire format
-----------
Every message is one frame of ``wire.py`` (safetensors arrays + JSON metadata, never
pickle), moved with ``Connection.send_bytes`` / ``recv_bytes``, so a ROS 2 (or socket,
or file) transport can carry exactly the same bytes. ``pack``, ``unpack`` and
``Message`` are re-exported here.

Endpoints
---------
:class:`Endpoint` is one side of a duplex link.  The interface is deliberately
tiny so that other transports (ROS 2) can implement it:

* ``send(kind, arrays=None, meta=None) -> bool`` never blocks on the link.  The
  outgoing queue is bounded (``maxsize``); when it is full, or the peer is gone,
  the message is dropped, ``dropped`` is incremented and ``False`` is returned.
* ``receive(timeout=0.0) -> list[Message]`` returns every message available now,
  oldest first, waiting up to ``timeout`` seconds for the first one (``None``:
  until a message arrives or the link closes).  It never waits once the link is
  closed.
* "Latest wins" kinds (``latest_only``, by default ``("weights",)``): a newer
  message of such a kind replaces an older unread one, wherever it is queued
  (outgoing or incoming), and it takes its place at the back of the queue.  At
  most one message per latest-only kind is queued per direction, so these kinds
  are not counted against ``maxsize`` and are never dropped for lack of room:
  the learner's newest weights always get through.
* ``close()`` flushes what was already accepted for a bounded time and releases
  the link; the other side then sees ``peer_closed``.

Both keep their queues in a :class:`Mailbox` (bounded, "latest wins" kinds), which other
transports reuse (``drivers/ros_transport.py`` receives into one).  Two implementations live
here:

* :func:`inprocess_pair` - both endpoints in one process (tests, single-process
  runs), linked by bounded in-memory queues; frames still go through
  :func:`pack`/:func:`unpack`, so behaviour matches the wire.
* :class:`PipeEndpoint` over a :func:`pipe_pair` connection - for two processes.
  A daemon sender thread drains the bounded outgoing queue into
  ``conn.send_bytes`` and a daemon receiver thread reads ``conn.recv_bytes``
  into a bounded inbox, so ``send()`` never touches the pipe and a slow or dead
  peer cannot stall the caller.  When the inbox is full, the receiver thread
  stops reading (back-pressure), the peer's sender then stalls and *its*
  bounded outgoing queue fills up and drops - so a slow learner costs the actor
  dropped (counted) transitions, never a blocked control loop.

Typical two-process use (``spawn`` context)::

    ctx = multiprocessing.get_context("spawn")
    learner_conn, actor_conn = pipe_pair(ctx)
    proc = ctx.Process(target=learner_main, args=(learner_conn,), daemon=True)
    proc.start()
    learner_conn.close()            # the parent must drop its copy of the child's end,
                                    # or it never notices the child dying
    actor = PipeEndpoint(actor_conn)
    ...
    # in the child:  def learner_main(conn): ep = PipeEndpoint(conn); ...

Handing the raw ``Connection`` to the child as a ``Process`` argument happens
once, at process setup (the file descriptor is passed by the multiprocessing
machinery); nothing after that is pickled.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any

from robot_rl.runtime.wire import Message, decode, encode, pack, unpack
from robot_rl.errors import InputError

__all__ = [
    "Endpoint",
    "Mailbox",
    "Message",
    "PipeEndpoint",
    "inprocess_pair",
    "pack",
    "pipe_pair",
    "unpack",
]

log = logging.getLogger(__name__)



# --------------------------------------------------------------------------------------
# Bounded mailbox with "latest wins" kinds
# --------------------------------------------------------------------------------------


class _Slot:
    """Queue entry; compares by identity so ``deque.remove`` finds exactly this one."""

    __slots__ = ("kind", "payload")

    def __init__(self, kind: str, payload: Any) -> None:
        self.kind = kind
        self.payload = payload


class Mailbox:
    """A thread-safe, bounded FIFO of ``(kind, payload)`` items: the queue behind every
    :class:`Endpoint` (other transports, e.g. ``drivers/ros_transport.py``, use it as their inbox).

    * Items of ordinary kinds are bounded: at most ``maxsize`` are queued; ``put`` of one
      more returns False (the caller counts the drop), ``put_wait`` waits for room.
    * For each kind in ``latest_only`` at most one item (the newest) is queued: a newer one
      replaces it and goes to the back of the queue.  These never count against ``maxsize``.
    * ``get_one`` / ``get_all`` take items oldest first, as objects with ``.kind`` and
      ``.payload``, waiting up to ``timeout`` seconds for the first (``None``: until one
      arrives or the mailbox closes).
    * ``close()`` ends the stream: puts fail, waiting getters wake up, queued items can
      still be taken.
    """

    def __init__(self, maxsize: int, latest_only: Iterable[str]) -> None:
        if maxsize < 1:
            raise InputError("maxsize must be >= 1")
        self.maxsize = int(maxsize)
        self.latest_only = frozenset(latest_only)
        self._cond = threading.Condition()
        self._queue: collections.deque[_Slot] = collections.deque()
        self._latest: dict[str, _Slot] = {}
        self._bounded = 0  # queued items of ordinary (bounded) kinds
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def _try_put(self, kind: str, payload: Any) -> bool:  # caller holds the lock
        if self._closed:
            return False
        slot = _Slot(kind, payload)
        if kind in self.latest_only:
            old = self._latest.get(kind)
            if old is not None:
                self._queue.remove(old)
            self._latest[kind] = slot
        else:
            if self._bounded >= self.maxsize:
                return False
            self._bounded += 1
        self._queue.append(slot)
        self._cond.notify_all()
        return True

    def put(self, kind: str, payload: Any) -> bool:
        """Non-blocking; False when full (ordinary kinds only) or closed."""
        with self._cond:
            return self._try_put(kind, payload)

    def put_wait(self, kind: str, payload: Any, stop: threading.Event, poll: float = 0.1) -> bool:
        """Block until there is room, the mailbox closes or ``stop`` is set."""
        with self._cond:
            while not stop.is_set():
                if self._try_put(kind, payload):
                    return True
                if self._closed:
                    return False
                self._cond.wait(poll)
            return False

    def _pop(self) -> _Slot:  # caller holds the lock, queue non-empty
        slot = self._queue.popleft()
        if self._latest.get(slot.kind) is slot:
            del self._latest[slot.kind]
        elif slot.kind not in self.latest_only:
            self._bounded -= 1
        return slot

    def _wait_nonempty(self, timeout: float | None) -> None:  # caller holds the lock
        if timeout is not None and timeout <= 0:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._queue and not self._closed:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            self._cond.wait(remaining)

    def get_one(self, timeout: float | None = None) -> _Slot | None:
        """The oldest item, or None when none came within ``timeout`` s or the mailbox is closed and empty."""
        with self._cond:
            self._wait_nonempty(timeout)
            if not self._queue:
                return None
            slot = self._pop()
            self._cond.notify_all()
            return slot

    def get_all(self, timeout: float | None = 0.0) -> list[_Slot]:
        """Every queued item, oldest first (empty when none came within ``timeout`` s)."""
        with self._cond:
            self._wait_nonempty(timeout)
            out = [self._pop() for _ in range(len(self._queue))]
            if out:
                self._cond.notify_all()
            return out

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


# --------------------------------------------------------------------------------------
# Endpoint interface
# --------------------------------------------------------------------------------------


class Endpoint(ABC):
    """One side of a duplex, message-oriented link (transport-neutral interface).

    Attributes:
        dropped: messages this side failed to send (outgoing queue full, endpoint
            closed, or peer gone); each such ``send`` returned False.
        corrupt: incoming frames that could not be decoded and were discarded.
        latest_only: kinds for which only the newest unread message is kept.
    """

    def __init__(self, latest_only: Iterable[str] = ("weights",)) -> None:
        if isinstance(latest_only, str):
            latest_only = (latest_only,)
        self.latest_only = frozenset(latest_only)
        self.dropped = 0
        self.corrupt = 0
        self._counter_lock = threading.Lock()

    def _count_drop(self) -> bool:
        with self._counter_lock:
            self.dropped += 1
        return False

    def _count_corrupt(self, err: Exception) -> None:
        with self._counter_lock:
            self.corrupt += 1
        log.warning("discarding undecodable message: %s", err)

    def _decode_all(self, slots) -> list[Message]:
        """Queued frames -> messages; undecodable ones are counted in ``corrupt`` and skipped."""
        out = []
        for slot in slots:
            try:
                out.append(decode(slot.payload))
            except ValueError as e:
                self._count_corrupt(e)
        return out

    @abstractmethod
    def send(
        self,
        kind: str,
        arrays: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> bool:
        """Queue a message without blocking; False (and ``dropped += 1``) if it was dropped.

        Invalid input (bad kind, non-serialisable meta, unsupported dtype) raises."""

    @abstractmethod
    def receive(self, timeout: float | None = 0.0) -> list[Message]:
        """All messages available now, oldest first (waiting up to ``timeout`` s for the
        first; ``None`` waits until one arrives or the link closes).  For latest-only
        kinds only the newest is returned."""

    @abstractmethod
    def close(self) -> None:
        """Flush (bounded in time) and release the link.  Idempotent."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once ``close()`` was called on this endpoint."""

    @property
    @abstractmethod
    def peer_closed(self) -> bool:
        """True once the other side is known to be closed or gone."""

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------
# In-process pair
# --------------------------------------------------------------------------------------


class _InProcessEndpoint(Endpoint):
    def __init__(self, inbox: Mailbox, outbox: Mailbox, latest_only: Iterable[str]) -> None:
        super().__init__(latest_only)
        self._inbox = inbox  # peer -> us
        self._outbox = outbox  # us -> peer (the peer's inbox)
        self._closed = False
        self._peer: _InProcessEndpoint | None = None

    def send(self, kind, arrays=None, meta=None) -> bool:
        data = encode(kind, arrays, meta)
        if self._closed or not self._outbox.put(kind, data):
            return self._count_drop()
        return True

    def receive(self, timeout: float | None = 0.0) -> list[Message]:
        return self._decode_all(self._inbox.get_all(timeout))

    def close(self) -> None:
        self._closed = True
        self._outbox.close()  # the peer receives what is queued, then sees the end
        self._inbox.close()  # the peer's further sends fail

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def peer_closed(self) -> bool:
        return self._peer is not None and self._peer._closed


def inprocess_pair(
    maxsize: int = 1024, latest_only: Iterable[str] = ("weights",)
) -> tuple[Endpoint, Endpoint]:
    """Two linked endpoints in one process; each direction is a bounded queue of
    ``maxsize`` messages.  Frames go through :func:`pack`/:func:`unpack` exactly as on
    the wire (packed on ``send``, unpacked on ``receive``)."""
    a_to_b = Mailbox(maxsize, latest_only)
    b_to_a = Mailbox(maxsize, latest_only)
    a = _InProcessEndpoint(inbox=b_to_a, outbox=a_to_b, latest_only=latest_only)
    b = _InProcessEndpoint(inbox=a_to_b, outbox=b_to_a, latest_only=latest_only)
    a._peer, b._peer = b, a
    return a, b


# --------------------------------------------------------------------------------------
# Pipe (two processes)
# --------------------------------------------------------------------------------------


def pipe_pair(context=None) -> tuple[Any, Any]:
    """A duplex ``multiprocessing`` pipe: ``(conn_a, conn_b)``.

    Give one end to the child process as a ``Process`` argument, close the parent's
    copy of it after ``start()``, and wrap each end with :class:`PipeEndpoint` in the
    process that uses it.  ``context`` is a multiprocessing context (default: the
    ``"spawn"`` context)."""
    import multiprocessing

    ctx = context if context is not None else multiprocessing.get_context("spawn")
    return ctx.Pipe(duplex=True)


def _shutdown_socket(conn) -> None:
    """Wake threads blocked in send/recv on ``conn`` (a socketpair on POSIX)."""
    try:
        s = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, ValueError, TypeError):
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()


class PipeEndpoint(Endpoint):
    """:class:`Endpoint` over a ``multiprocessing`` ``Connection`` (see :func:`pipe_pair`).

    Create it in the process that uses it.  Two daemon threads move frames between the
    bounded queues and the connection (``send_bytes``/``recv_bytes`` only), so the
    caller never blocks on the pipe.  When the peer closes or dies, ``peer_closed``
    becomes True, ``send`` returns False and ``receive`` returns what is left.  No
    exception escapes the threads.

    Args:
        conn: one end of :func:`pipe_pair`; the endpoint owns it and closes it.
        maxsize: bound on queued ordinary messages, per direction.
        latest_only: kinds for which only the newest unread message is kept.
        close_timeout: how long ``close()`` keeps trying to flush accepted messages.
    """

    _POLL_S = 0.05

    def __init__(
        self,
        conn,
        maxsize: int = 1024,
        latest_only: Iterable[str] = ("weights",),
        close_timeout: float = 1.0,
        name: str = "pipe",
    ) -> None:
        super().__init__(latest_only)
        self._conn = conn
        self._close_timeout = max(0.0, float(close_timeout))
        self._outbox = Mailbox(maxsize, self.latest_only)
        self._inbox = Mailbox(maxsize, self.latest_only)
        self._stop = threading.Event()
        self._peer_gone = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        self._sender = threading.Thread(target=self._send_loop, name=f"{name}-send", daemon=True)
        self._receiver = threading.Thread(target=self._recv_loop, name=f"{name}-recv", daemon=True)
        self._sender.start()
        self._receiver.start()

    # -- public ------------------------------------------------------------------------

    def send(self, kind, arrays=None, meta=None) -> bool:
        data = encode(kind, arrays, meta)
        if self._closed or self._peer_gone.is_set() or not self._outbox.put(kind, data):
            return self._count_drop()
        return True

    def receive(self, timeout: float | None = 0.0) -> list[Message]:
        return [slot.payload for slot in self._inbox.get_all(timeout)]

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def peer_closed(self) -> bool:
        return self._peer_gone.is_set()

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._outbox.close()  # sender drains what was accepted, then exits
        self._sender.join(self._close_timeout)
        self._stop.set()
        if self._sender.is_alive():  # stuck writing to a peer that does not read
            log.warning("pipe endpoint: peer not reading; discarding unsent messages")
            _shutdown_socket(self._conn)
        self._receiver.join(max(1.0, 4 * self._POLL_S))
        if self._receiver.is_alive():  # stuck inside recv_bytes on a partial frame
            _shutdown_socket(self._conn)
        self._sender.join(1.0)
        self._receiver.join(1.0)
        self._inbox.close()
        if self._sender.is_alive() or self._receiver.is_alive():
            # Never close an fd another thread may still be using (fd reuse hazard);
            # the threads are daemons and die with the process.
            log.warning("pipe endpoint: I/O threads did not stop; leaving connection open")
            return
        try:
            self._conn.close()
        except OSError:
            pass

    # -- threads -----------------------------------------------------------------------

    def _send_loop(self) -> None:
        try:
            while not self._stop.is_set():
                slot = self._outbox.get_one(timeout=None)
                if slot is None:  # outbox closed and drained
                    return
                self._conn.send_bytes(slot.payload)
        except (OSError, EOFError, ValueError) as e:  # broken pipe / reset / closed handle
            if not self._stop.is_set():  # (after close() it is our own shutdown)
                log.debug("pipe endpoint: send failed, peer gone: %r", e)
                self._peer_gone.set()
        except Exception:  # never let an exception escape a thread
            log.exception("pipe endpoint: sender thread failed")
            self._peer_gone.set()
        finally:
            self._outbox.close()

    def _recv_loop(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._conn.poll(self._POLL_S):
                    continue
                data = self._conn.recv_bytes()
                try:
                    msg = decode(data)
                except ValueError as e:
                    self._count_corrupt(e)
                    continue
                # Back-pressure: wait for room rather than dropping what the peer sent.
                if not self._inbox.put_wait(msg.kind, msg, self._stop, self._POLL_S):
                    return
        except (OSError, EOFError, ValueError) as e:  # EOF: the peer closed or died
            if not self._stop.is_set():  # (after close() it is our own shutdown)
                log.debug("pipe endpoint: receive ended, peer gone: %r", e)
                self._peer_gone.set()
        except Exception:
            log.exception("pipe endpoint: receiver thread failed")
            self._peer_gone.set()
        finally:
            self._inbox.close()  # nothing more will arrive: wake receive(); queued stays readable

