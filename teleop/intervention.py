"""Who drives: the operator's inputs (devices, console buttons) folded into one intervention
state, as plain Python the teleop node and the console share.

Modes: ``hold`` - the operator intervenes while on the controls (a moved SpaceMouse, a held
gamepad LB, a held console key or the console's hold button) and hands back on letting go;
``toggle`` - the intervene button (or the console's toggle) switches intervention on and
off, and while on, the operator's action is executed even when it is zero (holding still).
Several inputs may be live at once; the first one in the list that is on the controls wins.

A takeover ends with its episode (``episode_over``): the toggle and the console's hold are
cleared, and an input still on the controls (a SpaceMouse held through the reset) takes over
again only once it has let go, so what the operator did for the last episode never drives the
next one's first steps. The arm and the actor read ``teleop/intervening`` by the same rule
(``robot_rl.contract.OperatorTakeover``): after a reset they take a takeover only once this
switch has said "not intervening" since, which also discards one that reached them late.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl.teleop.devices import TeleopInput
from robot_rl.errors import InputError

MODES = ("hold", "toggle")


@dataclass
class Decision:
    intervening: bool
    action: np.ndarray  # the operator's action (zeros when nobody is on the controls)
    source: str = ""


class InterventionSwitch:
    def __init__(self, mode: str = "hold"):
        if mode not in MODES:
            raise InputError(f"intervention mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.toggled = False
        self.held_by_console = False
        self.awaiting_release = False  # an episode ended: an input still on the controls lets go first

    def episode_over(self) -> None:
        """The actor's episode ended: every takeover ends with it."""
        self.toggled = self.held_by_console = False
        self.awaiting_release = True

    def toggle(self) -> bool:
        self.toggled = not self.toggled
        return self.toggled

    def decide(self, inputs: list[tuple[str, TeleopInput]]) -> Decision:
        for name, inp in inputs:
            if inp.toggle_intervention:
                self.toggle()
        active = [(name, inp) for name, inp in inputs if inp.active]
        if self.awaiting_release:
            if active and not self.toggled:  # still on the controls from the last episode: let go first
                return Decision(False, np.zeros(7, np.float32))
            self.awaiting_release = False
        action = active[0][1].action if active else np.zeros(7, np.float32)
        source = active[0][0] if active else ""
        on = self.toggled or self.held_by_console or (self.mode == "hold" and bool(active))
        return Decision(on, action, (source or "console") if on else "")
