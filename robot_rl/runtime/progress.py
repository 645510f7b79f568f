"""Progress lines for long loops, made for a log file as much as a terminal: one plain line
at most every ``every_s`` seconds (and at the end), with the count, the rate, the ETA and
whatever figures the loop adds (latest loss, success rate)::

    classifier: step 1200/4000 (30%), 10.4 steps/s, ETA 4.5 min, loss 0.0234

The first line comes after ``every_s`` too, so a loop that ends sooner says nothing but its
last line. While a loop waits on one thing that does not come (a hung env's reset),
``WaitLines`` keeps the lines coming, saying what it waits for::

    train: waiting 15 s for env gym_hil/PandaPickCubeBase-v0's reset at env step 1200 (limit 60 s)

Time is ``clock()`` (monotonic seconds), given by tests."""

from __future__ import annotations

import time
from typing import Callable

EVERY_S = 15.0  # well under the 30 s a user should wait for a line


class ProgressLines:
    def __init__(self, label: str, total: int, unit: str = "steps", every_s: float = EVERY_S,
                 log: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic, first: int = 0):
        """``first``: the count at the start (a resumed loop), so the rate counts only this run's."""
        self.label, self.total, self.unit, self.every_s, self.first = label, int(total), unit, every_s, first
        self.log, self.clock = log, clock
        self.start = self.last = clock()

    def due(self, done: int) -> bool:
        """Whether ``update(done)`` would print: compute costly figures only then."""
        return self.clock() - self.last >= self.every_s or done >= self.total

    def update(self, done: int, force: bool = False, **figures) -> bool:
        """Say where the loop is if ``every_s`` passed since the last line, ``done`` is the
        total or ``force``; ``figures`` (name=value) follow the rate. True when a line was printed."""
        now = self.clock()
        if now - self.last < self.every_s and done < self.total and not force:
            return False
        self.last = now
        self.log(self.line(done, now, figures))
        return True

    def line(self, done: int, now: float, figures: dict) -> str:
        share = f" ({done / self.total:.0%})" if self.total > 0 else ""
        text = f"{self.label}: {self.unit[:-1] if self.unit.endswith('s') else self.unit} {done}/{self.total}{share}"
        elapsed = now - self.start
        if done > self.first and elapsed >= 1:  # a rate over less than a second says nothing
            rate = (done - self.first) / elapsed
            text += f", {_rate(rate)} {self.unit}/s"
            if done < self.total:
                text += f", ETA {_duration((self.total - done) / rate)}"
            else:
                text += f", took {_duration(elapsed)}"
        for name, value in figures.items():
            text += f", {name} {value:.4g}" if isinstance(value, float) else f", {name} {value}"
        return text


class WaitLines:
    """A line at most every ``every_s`` while a loop waits: what for, how long so far and the limit.
    ``last_line()``: when the loop's own last line came (``clock`` seconds; None: none yet), so
    that with the loop's lines there is one at least every ``every_s``; without them the first
    comes ``every_s`` into the wait."""

    def __init__(self, label: str, log: Callable[[str], None] = print, every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic, last_line: Callable[[], float | None] | None = None):
        self.label, self.log, self.every_s, self.clock, self.last_line = label, log, every_s, clock, last_line
        self.said: float | None = None  # when this said its last line

    def tick(self, what: str, waited_s: float, limit_s: float | None = None) -> bool:
        """Called while waiting (often); says ``what`` it waits for when a line is due. True when it did."""
        now = self.clock()
        said = [t for t in (self.said, self.last_line() if self.last_line else None) if t is not None]
        if now - max(said, default=now - waited_s) < self.every_s:
            return False
        self.said = now
        limit = f" (limit {_duration(limit_s)})" if limit_s else ""
        self.log(f"{self.label}: waiting {_duration(waited_s)} for {what}{limit}")
        return True


def _rate(rate: float) -> str:
    return f"{rate:.1f}" if rate >= 1 else f"{rate:.2f}"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
