"""What a run has done, typed: ``ActorCounts`` (an ``ActorLoop``'s own tally) and ``RunState``
(``robot-rl train``'s whole run, kept in every checkpoint's ``state.json`` and stated by summary.json).

Each thing is counted once, where it happens. The actor loop counts its steps, episodes, successes
and the human's takeovers into its ``ActorCounts`` (``ActorLoop.stats``). A run of ``robot-rl train``
is a list of rounds (its start, then each resume); each ``Round`` holds the ``ActorCounts`` of its
one actor loop, and the run's totals are the totals from before the round plus that round's counts.
What the trainer adds per step and per episode (the human's stretches at the controls, the
episodes' outcomes, the classifier's grades) and per evaluation goes in through the ``count_*`` and
``record_*`` methods below.

``RunState.to_json`` / ``RunState.from_json`` are state.json's format: the keys and values a
checkpoint has held since rounds were added (``env_steps``, ``episodes``, ``evals``,
``train_successes``, ...), so a run checkpointed before this class existed resumes as it was.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from robot_rl.runtime.checkpoint import CheckpointError
from robot_rl.runtime.logging import human_steps_in

CLASSIFIER_OUTCOMES = ("true_positive", "false_positive", "false_negative", "true_negative")


@dataclass
class ActorCounts:
    """What an ``ActorLoop`` did since it was built; a dropped episode (the arm held) counts in
    ``dropped_arm_held`` alone.

    steps               control steps executed and kept (the one that found the arm holding is not)
    episodes            episodes finished (by the env, the operator or a time limit)
    successes           of those, the ones that ended in success (as the env's reward said)
    interventions       the human's takeovers in the finished episodes (a takeover is a run of
                        steps the human drove; a new episode starts a new one)
    intervention_steps  the steps the human drove in the finished episodes
    recorded            finished episodes the recorder kept
    rerecorded          episodes the operator ended with "rerecord" (their recording dropped)
    dropped_arm_held    episodes dropped because the arm held (e-stop, operator gone, ...)
    reflex_stops        of the finished episodes, the ones the arm's collision reflex ended (failures)
    """

    steps: int = 0
    episodes: int = 0
    successes: int = 0
    interventions: int = 0
    intervention_steps: int = 0
    recorded: int = 0
    rerecorded: int = 0
    dropped_arm_held: int = 0
    reflex_stops: int = 0

    def count_step(self) -> None:
        self.steps += 1

    def count_episode(self, success: bool, interventions: int, intervention_steps: int) -> None:
        self.episodes += 1
        self.successes += bool(success)
        self.interventions += interventions
        self.intervention_steps += intervention_steps

    def plus(self, other: "ActorCounts") -> "ActorCounts":
        return ActorCounts(**{k: getattr(self, k) + getattr(other, k) for k in self.as_dict()})

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class Round:
    """One start or resume of a run: its env steps, wall time and tallies (summary.json's ``rounds``).

    resumed_from         the checkpoint it resumed from (None: the run's start)
    started_at           when it started (Unix seconds; summary.json states it as a local time)
    first_step           the run's env step it started at (its ``env_step_range`` is
                         [first_step, first_step + counts.steps])
    counts               its actor loop's counts (a past round's steps, episodes and takeovers as saved)
    wall_s               its wall time so far (``touch``)
    human_eagerness      the simulated human's eagerness (0: no human)
    reward_classifier    the reward classifier's folder, or None (ground-truth reward)
    classifier_episodes  with a classifier: its training episodes per outcome against the ground truth
    """

    resumed_from: str | None
    started_at: float
    first_step: int
    human_eagerness: float
    counts: ActorCounts = field(default_factory=ActorCounts)
    wall_s: float = 0.0
    reward_classifier: str | None = None
    classifier_episodes: dict[str, int] | None = None

    @property
    def env_step_range(self) -> list[int]:
        return [self.first_step, self.first_step + self.counts.steps]

    def touch(self) -> None:
        """Its wall time up to now (a checkpoint carries it as it was at the last touch)."""
        self.wall_s = round(time.time() - self.started_at, 1)

    def to_json(self) -> dict:
        this = {"resumed_from": self.resumed_from, "started_at": self.started_at, "env_step_range": self.env_step_range,
                "wall_s": self.wall_s, "episodes": self.counts.episodes, "interventions": self.counts.interventions,
                "intervention_steps": self.counts.intervention_steps, "human_eagerness": self.human_eagerness}
        if self.classifier_episodes is not None:
            this.update(reward_classifier=self.reward_classifier, classifier_episodes=dict(self.classifier_episodes))
        return this

    @classmethod
    def from_json(cls, this: dict, what: str = "round") -> "Round":
        """A round as ``to_json`` wrote it; ``what`` names it in the message of a bad value."""
        def get(key: str):
            return _field(this, key, what)

        span = get("env_step_range")
        if not isinstance(span, list) or len(span) != 2:
            raise _Bad(f"{what}.env_step_range is {span!r}, not a list of 2")
        first, last = (_count(n, f"{what}.env_step_range") for n in span)
        if last < first:
            raise _Bad(f"{what}.env_step_range {span!r} ends before it starts")
        tally = this.get("classifier_episodes")
        if tally is not None:
            if not isinstance(tally, dict) or set(tally) != set(CLASSIFIER_OUTCOMES):
                raise _Bad(f"{what}.classifier_episodes is {tally!r}, not a count per {', '.join(CLASSIFIER_OUTCOMES)}")
            tally = {k: _count(tally[k], f"{what}.classifier_episodes.{k}") for k in CLASSIFIER_OUTCOMES}
        counts = ActorCounts(steps=last - first, episodes=_count(get("episodes"), f"{what}.episodes"),
                             interventions=_count(get("interventions"), f"{what}.interventions"),
                             intervention_steps=_count(get("intervention_steps"), f"{what}.intervention_steps"))
        return cls(resumed_from=_optional(_text)(get("resumed_from"), f"{what}.resumed_from"),
                   started_at=_number(get("started_at"), f"{what}.started_at"), first_step=first,
                   human_eagerness=_number(get("human_eagerness"), f"{what}.human_eagerness"), counts=counts,
                   wall_s=_number(get("wall_s"), f"{what}.wall_s"),
                   reward_classifier=_optional(_text)(this.get("reward_classifier"), f"{what}.reward_classifier"),
                   classifier_episodes=tally)

    def summary(self) -> dict:
        """The round as summary.json states it: when it started as a local time, not Unix seconds."""
        this = self.to_json()
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(this.pop("started_at")))
        return {"started": started, **this}


@dataclass
class RunState:
    """What ``robot-rl train`` has done so far in a run, over all its rounds (start and resumes).

    counted_before           the run's steps, episodes and takeovers before the current round
                             (``totals`` are these plus the current round's, as its actor loop counts them)
    evals                    each evaluation's result (``rollout.evaluate``) with its ``env_steps``
    train_episodes           per finished training episode: [env step it ended at, success as the
                             run's reward said, solved by the ground truth (None where unknown)]
    episode_interventions    with a human, per finished training episode: [env step it ended at,
                             takeovers, steps the human drove, its length]
    human_stretches          [first, last] env step of each stretch under the human's control (a
                             new episode starts a new one), so figures per block of steps are exact
    demo_episodes            the demonstrations' episodes
    demo_steps               ... and their steps (None: not known, e.g. before demonstrations were sent)
    demo_steps_to_success    their mean steps over successful episodes (None: no demonstrations)
    demo_steps_to_success_median ... and the median (None: no demonstrations, or an older run's state)
    demo_successful_episodes their successful episodes
    success_source           on a Gymnasium env, what said an evaluation episode succeeded (None: the
                             sim's ground truth)
    rounds                   the run's rounds; the last is the current one once ``start_round`` ran
    """

    counted_before: ActorCounts = field(default_factory=ActorCounts)
    evals: list[dict] = field(default_factory=list)
    train_episodes: list[list] = field(default_factory=list)
    episode_interventions: list[list[int]] = field(default_factory=list)
    human_stretches: list[list[int]] = field(default_factory=list)
    demo_episodes: int = 0
    demo_steps: int | None = None
    demo_steps_to_success: float | None = None
    demo_steps_to_success_median: float | None = None
    demo_successful_episodes: int = 0
    success_source: str | None = None
    rounds: list[Round] = field(default_factory=list)
    _current: Round | None = field(default=None, init=False, repr=False, compare=False)  # start_round's

    # ---- the run's totals ------------------------------------------------------------------
    @property
    def totals(self) -> ActorCounts:
        """The run's counts: those from before the current round plus the round's (its steps are env steps;
        only ``steps``, ``episodes``, ``interventions`` and ``intervention_steps`` are kept across rounds)."""
        return self.counted_before.plus(self._current.counts) if self._current is not None else self.counted_before

    @property
    def env_steps(self) -> int:
        """The env steps of the run so far (after a step, that step's number)."""
        return self.counted_before.steps + (self._current.counts.steps if self._current is not None else 0)

    @property
    def round(self) -> Round:
        """The current round (``start_round``)."""
        if self._current is None:
            raise RuntimeError("no round started: call RunState.start_round first")
        return self._current

    @property
    def human(self) -> bool:
        """A human took part in the run (some round had one, or some step was the human's)."""
        return any(r.human_eagerness > 0 for r in self.rounds) or bool(self.human_stretches)

    def recent_successes(self, n: int) -> list[bool]:
        """The success (as the reward said) of the last ``n`` training episodes."""
        return [e[1] for e in self.train_episodes[-n:]]

    # ---- what the trainer counts -----------------------------------------------------------
    def start_round(self, resumed_from: str | None, human_eagerness: float,
                    reward_classifier: str | None = None) -> ActorCounts:
        """A start or resume of the run opens a round; returns the counts its actor loop counts into."""
        if self._current is not None:
            self.counted_before = self.totals
        this = Round(resumed_from=resumed_from, started_at=time.time(), first_step=self.env_steps,
                     human_eagerness=human_eagerness)
        if reward_classifier:
            this.reward_classifier = reward_classifier
            this.classifier_episodes = dict.fromkeys(CLASSIFIER_OUTCOMES, 0)
        self.rounds.append(this)
        self._current = this
        return this.counts

    def count_step(self, by_human: bool, episode_step: int) -> None:
        """After each env step (the actor loop has counted it: ``env_steps`` is this step's number):
        the round's clock, and the human's stretches at the controls, one per takeover as
        ``EpisodeTally`` counts them (a new episode starts a new one)."""
        self.round.touch()
        if by_human:
            step, stretches = self.env_steps, self.human_stretches
            if stretches and stretches[-1][1] == step - 1 and episode_step > 1:
                stretches[-1][1] = step
            else:
                stretches.append([step, step])

    def count_episode(self, episode: dict) -> None:
        """A finished training episode (``ActorLoop``'s record, which the actor loop has counted):
        its outcome, the classifier's grade against the ground truth (with a classifier's reward)
        and, with a human, its takeovers."""
        step = self.env_steps
        self.train_episodes.append([step, episode["success"], episode["ground_truth_solved"]])
        tally = self.round.classifier_episodes
        if tally is not None:
            said, truth = episode["success"], episode["ground_truth_solved"]
            key = {(True, True): "true_positive", (True, False): "false_positive",
                   (False, True): "false_negative", (False, False): "true_negative"}[bool(said), bool(truth)]
            tally[key] += 1
        if self.round.human_eagerness > 0:
            self.episode_interventions.append([step, episode["interventions"], episode["intervention_steps"],
                                               episode["episode_steps"]])

    def record_eval(self, result: dict, step: int) -> None:
        self.evals.append({"env_steps": step, **result})
        self.round.touch()  # the checkpoint after the final evaluation counts its time

    def record_demos(self, steps: int, cycle: dict, episodes: int | None = None) -> None:
        """The demonstrations' steps and their cycle time (``rollout.steps_to_success``'s figures)."""
        self.demo_steps = steps
        if episodes is not None:
            self.demo_episodes = episodes
        self.demo_steps_to_success, self.demo_successful_episodes = cycle["steps_to_success"], cycle["successful_episodes"]
        self.demo_steps_to_success_median = cycle["steps_to_success_median"]

    # ---- figures ---------------------------------------------------------------------------
    def classifier_total(self) -> dict | None:
        """The run's classifier tally: the sum over the rounds trained on a classifier's reward (None: none was)."""
        tallies = [r.classifier_episodes for r in self.rounds if r.classifier_episodes is not None]
        return {k: sum(t[k] for t in tallies) for k in CLASSIFIER_OUTCOMES} if tallies else None

    def per_block(self, human: bool, size: int = 1000) -> list[dict]:
        """The run per block of ``size`` env steps (lo, hi]: the training episodes that ended in it
        and their success (as the run's reward said, and by the sim's ground truth when recorded)
        and, with a ``human``, its takeovers (counted where each began) and its share of the block's
        env steps."""
        end, stretches = self.env_steps, self.human_stretches
        rows = []
        for lo in range(0, end, size):
            hi = min(lo + size, end)
            ended = [e for e in self.train_episodes if lo < e[0] <= hi]
            solved = [e[2] for e in ended if e[2] is not None]
            row = {"env_step_range": [lo, hi], "episodes": len(ended),
                   "success_rate": round(sum(e[1] for e in ended) / len(ended), 4) if ended else None,
                   "ground_truth_solved_rate": round(sum(solved) / len(solved), 4) if solved else None}
            if human:
                human_steps = human_steps_in(stretches, lo, hi)
                row.update(interventions=sum(lo < first <= hi for first, _ in stretches),
                           intervention_steps=human_steps, intervention_rate=round(human_steps / (hi - lo), 4))
            rows.append(row)
        return rows

    def intervention_rate_last(self, window: int) -> float | None:
        """The share of the run's last ``window`` env steps (all of them in a shorter run) under human control."""
        end = self.env_steps
        n = min(end, window)
        return round(human_steps_in(self.human_stretches, end - n, end) / n, 4) if n else None

    # ---- state.json ------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The state as a checkpoint's state.json holds it (JSON values only)."""
        totals = self.totals
        state = {"env_steps": totals.steps, "episodes": totals.episodes, "evals": self.evals,
                 "train_successes": [e[1] for e in self.train_episodes], "demo_episodes": self.demo_episodes,
                 "demo_steps_to_success": self.demo_steps_to_success,
                 "demo_successful_episodes": self.demo_successful_episodes, "interventions": totals.interventions,
                 "intervention_steps": totals.intervention_steps, "episode_interventions": self.episode_interventions,
                 "train_episodes": self.train_episodes, "human_stretches": self.human_stretches,
                 "rounds": [r.to_json() for r in self.rounds]}
        if self.demo_steps is not None:
            state["demo_steps"] = self.demo_steps
        if self.demo_steps_to_success_median is not None:  # (a state written before the median has none)
            state["demo_steps_to_success_median"] = self.demo_steps_to_success_median
        if self.success_source is not None:
            state["success_source"] = self.success_source
        return state

    @classmethod
    def from_json(cls, state: dict, source: str | Path = "state.json") -> "RunState":
        """The state a checkpoint's state.json holds (``to_json``'s keys; the others, such as the
        learner's ``updates`` and ``train_config``, are not the run state's). A key that is missing
        keeps its start value (``train_successes`` is read from ``train_episodes``); a value of the
        wrong kind raises ``CheckpointError``, one line naming ``source`` and the key."""
        def get(key: str, check, default):
            return check(state[key], key) if key in state else default

        try:
            if not isinstance(state, dict):
                raise _Bad(f"it holds a {type(state).__name__}, not an object")
            before = ActorCounts(steps=get("env_steps", _count, 0), episodes=get("episodes", _count, 0),
                                 interventions=get("interventions", _count, 0),
                                 intervention_steps=get("intervention_steps", _count, 0))
            return cls(counted_before=before, evals=get("evals", _evals, []),
                       train_episodes=get("train_episodes", _rows(3), []),
                       episode_interventions=get("episode_interventions", _rows(4), []),
                       human_stretches=get("human_stretches", _rows(2), []),
                       demo_episodes=get("demo_episodes", _count, 0),
                       demo_steps=get("demo_steps", _optional(_count), None),
                       demo_steps_to_success=get("demo_steps_to_success", _optional(_number), None),
                       demo_steps_to_success_median=get("demo_steps_to_success_median", _optional(_number), None),
                       demo_successful_episodes=get("demo_successful_episodes", _count, 0),
                       success_source=get("success_source", _optional(_text), None),
                       rounds=get("rounds", _rounds, []))
        except _Bad as err:
            raise CheckpointError(f"{source} is not a run's state: {err}; use an earlier checkpoint") from None


# ---- state.json's values, checked (each message names the key) -----------------------------
class _Bad(ValueError):
    """A value of the wrong kind in a state.json."""


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Bad(f"{what} is {value!r}, not a count")
    return value


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"{what} is {value!r}, not a number")
    return value


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} is {value!r}, not a string")
    return value


def _optional(check):
    return lambda value, what: None if value is None else check(value, what)


def _list(value, what: str) -> list:
    if not isinstance(value, list):
        raise _Bad(f"{what} is {value!r}, not a list")
    return value


def _rows(n: int):
    def check(value, what: str) -> list[list]:
        for i, row in enumerate(_list(value, what)):
            if not isinstance(row, list) or len(row) != n:
                raise _Bad(f"{what}[{i}] is {row!r}, not a list of {n}")
        return value
    return check


def _field(this: dict, key: str, what: str):
    if key not in this:
        raise _Bad(f"{what} has no {key}")
    return this[key]


def _evals(value, what: str) -> list[dict]:
    for i, e in enumerate(_list(value, what)):
        if not isinstance(e, dict):
            raise _Bad(f"{what}[{i}] is {e!r}, not an evaluation")
        for key in ("env_steps", "success_rate", "episodes"):
            _number(_field(e, key, f"{what}[{i}]"), f"{what}[{i}].{key}")
    return value


def _rounds(value, what: str) -> list[Round]:
    rounds = []
    for i, this in enumerate(_list(value, what)):
        if not isinstance(this, dict):
            raise _Bad(f"{what}[{i}] is {this!r}, not a round")
        rounds.append(Round.from_json(this, f"{what}[{i}]"))
    return rounds
