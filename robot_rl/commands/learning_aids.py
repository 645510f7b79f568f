"""What helps a ``robot-rl train`` run learn besides its agent, each decided once from the config
and the env: the simulated human who takes over (what it judges, and who it is), and hindsight
goals (where the goal lies in the state, and the share of each batch relabelled)."""

from __future__ import annotations

from robot_rl.config import TrainConfig
from robot_rl.errors import InputError


HINDSIGHT_SHARE = 0.8  # HER's k = 4 future goals per real one (docs/CALIBRATION.md: panda-gym, 2026-11-30)


def hindsight_goals(cfg: TrainConfig, cell):
    """(where the goal lies in the state, the share of each batch relabelled): the env map's
    ``goal:`` and ``--goal-relabel``, or by default ``HINDSIGHT_SHARE`` wherever the map declares a
    goal and the run can relabel (state observations: a camera frame would still show the old
    goal; one-step returns; the env's own reward), else none."""
    env_map = getattr(cell.unwrapped, "map", None)
    layout = getattr(env_map, "goal", None)
    if cfg.goal_relabel is None:
        can = layout is not None and cfg.obs == "state" and cfg.n_step == 1 and cfg.reward_classifier is None
        return (layout, HINDSIGHT_SHARE) if can else (None, 0.0)
    if cfg.goal_relabel > 0 and layout is None:
        source = getattr(env_map, "source", "the default map")
        raise InputError(f"--goal-relabel {cfg.goal_relabel:g}: the env map ({source}) declares no goal: (where the "
                         "goal and the achieved goal lie in the state, and the reward at success; docs/your-env.md)")
    return (layout, cfg.goal_relabel) if cfg.goal_relabel > 0 else (None, 0.0)


def human_watches(cfg: TrainConfig, cell=None) -> str | None:
    """What the run's simulated human judges: ``progress`` (the twin's experts; a Gymnasium env's
    scripted policy with ``progress(obs)``) or ``clock`` (an episode running long); None: no human."""
    if cfg.human_eagerness <= 0:
        return None
    if not cfg.env:
        return "progress"
    has_progress = cell.unwrapped.has_expert_progress
    if cfg.human_watches == "progress" and not has_progress:
        raise InputError(f"--human-watches progress: the scripted policy {cfg.env_expert} has no progress(obs) "
                         "(docs/your-env.md, 'The simulated human'); give it one, or watch the clock")
    return "progress" if has_progress and cfg.human_watches != "clock" else "clock"


def make_human(cfg: TrainConfig, cell=None):
    """The simulated human: the twin's (its scripted expert judges progress), or on a Gymnasium env
    the env's scripted policy (``--env-expert``) driving, judged by its own progress or, without
    one, by the ``ScriptedOperator``'s clock (``human_watches``). Either stands by once the env says
    the episode has succeeded (the twin's ground truth, the map's success), also where the
    classifier's reward missed it and runs the episode on."""
    watches = human_watches(cfg, cell)
    if watches is None:
        return None
    from robot_rl.foreign.env import ScriptedExpert
    from robot_rl.teleop.simulated_human import ScriptedOperator, SimulatedHuman, SimulatedHumanConfig

    config = SimulatedHumanConfig(eagerness=cfg.human_eagerness, takeover_steps=cfg.human_takeover_steps,
                                  max_takeovers=cfg.human_max_takeovers, guard=cfg.human_guards)
    env = cell.unwrapped if cell is not None else None  # the twin or a mapped env: each says `succeeded`
    succeeded = (lambda: env.succeeded) if hasattr(env, "succeeded") else None  # from then on the human stands by
    if not cfg.env:
        return SimulatedHuman(cfg.task, config, seed=cfg.seed, succeeded=succeeded)
    if watches == "progress":
        return SimulatedHuman(cfg.env, config, expert=ScriptedExpert(env), succeeded=succeeded)
    return ScriptedOperator(env.expert_action, env.max_episode_steps, config, succeeded=succeeded)
