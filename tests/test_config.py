"""One configuration source: the dataclasses of robot_rl/config.py give the ``robot-rl train``
options, the YAML config files' checks and the ROS nodes' parameters; shared fields are
declared once."""

import dataclasses
import json
import typing

import numpy as np
import pytest

from robot_rl.commands.cli import _train_overrides, build_parser, main
from robot_rl.config import CellConfig, LearningConfig, PolicyConfig, TrainConfig
from robot_rl.node_config import ActorNodeConfig, LearnerNodeConfig
from robot_rl.config_values import ConfigError, field_default
from robot_rl.agents.settings import AgentSettings
from robot_rl.config_cli import option
from robot_rl.errors import InputError

CONFIGS = (TrainConfig, ActorNodeConfig, LearnerNodeConfig)
# same name, different job: each config declares its own (total steps vs "0: until shut down", a
# run folder made per run vs a fixed one, a learner node's small agent-only checkpoints more often, the
# actor node's acting copy on the CPU of a robot PC vs the learner's GPU when there is one)
OWN_PER_CONFIG = {"run_dir", "env_steps", "checkpoint_every_s", "device", "priority"}  # priority: the control path's, the learner's


def train_overrides(*argv: str) -> dict:
    return _train_overrides(build_parser().parse_args(["train", *argv]))


def declared_by(cls, name: str) -> type:
    return next(c for c in reversed(cls.__mro__) if name in c.__dict__.get("__annotations__", {}))


def other_value(f: dataclasses.Field, kind) -> tuple[list[str], object]:
    """Options that set field ``f`` to a value other than its default, and that value."""
    default = field_default(f)
    flag = option(f.name)
    if type(None) in typing.get_args(kind):  # X | None
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if "choices" in f.metadata:
        value = next(c for c in f.metadata["choices"] if c != default)
        return [flag, value], value
    if kind is bool:
        return [f"--no-{f.name.replace('_', '-')}" if default else flag], not default
    if kind is int:
        value = (default or 0) + 3
        return [flag, str(value)], value
    if kind is float:
        value = (default or 0.0) + 0.25
        return [flag, str(value)], value
    if kind is str:
        return [flag, "some/where"], "some/where"
    if kind is AgentSettings:
        return ([flag, "critic_actor_ratio=2", flag, "hidden=[32,32]"],
                AgentSettings(critic_actor_ratio=2, hidden=(32, 32)))
    if kind == tuple[int, int]:
        return [flag, "32", "48"], (32, 48)
    if kind == tuple[str, ...]:
        return [flag, "side"], ("side",)
    raise AssertionError(f"no test value for {f.name}: {kind}")


# ------------------------------------------------------------------------------ the CLI
def test_every_train_config_field_is_an_option_that_arrives():
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        argv, value = other_value(f, hints[f.name])
        assert value != field_default(f), f.name
        cfg = TrainConfig(**train_overrides(*argv))
        assert getattr(cfg, f.name) == value, (f.name, argv)
        others = {g.name: getattr(cfg, g.name) for g in dataclasses.fields(TrainConfig) if g.name != f.name}
        expected = {g.name: field_default(g) for g in dataclasses.fields(TrainConfig) if g.name != f.name}
        if f.name == "demos":  # --demos N also says: not from a store
            expected["demo_store"] = None
        assert others == expected, f.name


def test_options_not_given_are_not_overrides_and_the_old_spellings_keep_working(tmp_path):
    assert train_overrides() == {}  # a resumed run keeps its own value of every option not given
    weights = tmp_path / "resnet18.pt"
    given = train_overrides("--steps", "500", "--demos", "3", "--image-size", "32", "--simulated-human", "0.5",
                            "--num-critics", "4", "--image-encoder", "resnet18", "--pretrained", str(weights),
                            "--freeze-backbone", "--agent", "actor_lr=0.001", "--no-progress", "--run-dir", "r")
    assert given == {"env_steps": 500, "demos": 3, "demo_store": None, "image_size": (32, 32), "human_eagerness": 0.5,
                     "progress": False, "run_dir": "r",
                     "agent": {"actor_lr": 0.001, "num_critics": 4, "image_encoder": "resnet18",
                               "pretrained_path": str(weights), "freeze_backbone": True}}
    assert train_overrides("--demos", "demos.zarr") == {"demos": 0, "demo_store": "demos.zarr"}
    assert train_overrides("--eval-episodes", "5")["eval_episodes"] == 5
    assert TrainConfig().eval_episodes == 50  # one default: what the command line had


@pytest.mark.parametrize("argv, named", [
    (["--agent", "no_such_key=1"], "--agent: unknown key 'no_such_key'"),
    (["--agent", "critic_actor_ratio"], "--agent: takes KEY=VALUE"),
    (["--agent", "actor_lr=fast"], "--agent: actor_lr must be a number"),
    (["--demos", "3", "--demo-store", "d.zarr"], "--demos 3 and --demo-store both set demo_store"),
    (["--image-size", "32", "32", "3"], "image_size must be a list of 2 values"),
])
def test_bad_options_are_one_clear_line(argv, named, tmp_path, capsys):
    assert main(["train", *argv, "--steps", "10", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------ YAML config files
def test_a_yaml_config_sets_fields_and_options_override_it(tmp_path):
    path = tmp_path / "pick.yaml"
    path.write_text("task: PegInsert\nutd: 1\nimage_size: [32, 32]\ncameras: [front]\neval_episodes: 3\n"
                    "agent:\n  num_critics: 4\n  hidden: [64, 64]\n")
    given = train_overrides("--config", str(path), "--utd", "0.5", "--agent", "actor_lr=0.001")
    assert given == {"task": "PegInsert", "utd": 0.5, "image_size": (32, 32), "cameras": ("front",),
                     "eval_episodes": 3, "agent": {"num_critics": 4, "hidden": (64, 64), "actor_lr": 0.001}}
    assert isinstance(train_overrides("--config", str(path))["utd"], float)  # "1" in YAML is an integer
    path.write_text("")
    assert train_overrides("--config", str(path)) == {}  # an empty file sets nothing


@pytest.mark.parametrize("text, named", [
    ("utdd: 2\n", "unknown key 'utdd' (did you mean 'utd'?)"),
    ("utd: fast\n", "utd must be a number, got 'fast'"),
    ("env_steps: 2.5\n", "env_steps must be an integer"),
    ("progress: maybe\n", "progress must be true or false"),
    ("image_size: [1, 2, 3]\n", "image_size must be a list of 2 values"),
    ("cameras: front\n", "cameras must be a list of strings"),
    ("obs: rgb\n", "obs must be one of state, pixels"),
    ("agent: {num_critic: 3}\n", "agent: unknown key 'num_critic' (did you mean 'num_critics'?)"),
    ("agent: 3\n", "agent must be a mapping"),
    ("- utd: 2\n", "expected a mapping of TrainConfig fields"),
    ("utd: [1\n", "not valid YAML"),
])
def test_yaml_config_errors_are_one_line_naming_the_file_and_the_field(text, named, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{path}: " in err and named in err, err
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError):
        train_overrides("--config", str(path))


def test_a_missing_config_file_is_one_line(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nope.yaml" in err and "No such file" in err


# ------------------------------------------------------------------------------ one declaration
def test_shared_fields_are_declared_once_with_one_default():
    names = [{f.name for f in dataclasses.fields(c)} for c in CONFIGS]
    for base, users in ((CellConfig, CONFIGS), (PolicyConfig, CONFIGS), (LearningConfig, (TrainConfig, LearnerNodeConfig))):
        for cls in users:
            assert issubclass(cls, base)
    for cls in CONFIGS:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
    for a in CONFIGS:
        for b in CONFIGS:
            fields_a, fields_b = ({f.name: f for f in dataclasses.fields(c)} for c in (a, b))
            for name in (set(fields_a) & set(fields_b)) - OWN_PER_CONFIG:
                assert declared_by(a, name) is declared_by(b, name), (a.__name__, b.__name__, name)
                assert field_default(fields_a[name]) == field_default(fields_b[name])
    assert names[1] & names[2] >= {"task", "obs", "cameras", "image_size", "seed", "demo_store", "agent"}
    assert {f.name for f in dataclasses.fields(LearningConfig)} <= names[2]


def test_critic_actor_ratio_is_an_agent_setting_only():
    from robot_rl.agents.sac import SACConfig

    assert "critic_actor_ratio" not in {f.name for f in dataclasses.fields(TrainConfig)}
    assert "critic_actor_ratio" in {f.name for f in dataclasses.fields(SACConfig)}
    with pytest.raises(ValueError, match="critic_actor_ratio"):
        TrainConfig(agent={"critic_actor_ratio": 0}).validate()


# ------------------------------------------------------------------------------ the learner
def test_the_learner_setup_travels_as_json_and_comes_back_typed(tmp_path):
    from robot_rl.agents.sac import SACConfig
    from robot_rl.runtime.learner import LearnerSetup

    cfg = TrainConfig(agent={"critic_actor_ratio": 2, "hidden": (32, 32)}, image_size=(32, 48), stop_at_success=0.9)
    spec = {"state": ((27,), np.dtype(np.float32)), "front": ((32, 48, 3), np.dtype(np.uint8))}
    setup = LearnerSetup(cfg, SACConfig(critic_actor_ratio=2, hidden=(32, 32)), spec, str(tmp_path), None)
    back = LearnerSetup.from_json(setup.to_json())
    assert back == setup and back.agent.critic_actor_ratio == 2 and back.config.image_size == (32, 48)
    assert back.obs_spec["front"] == ((32, 48, 3), np.dtype(np.uint8))
    bad = json.loads(setup.to_json())
    bad["config"]["utd"] = "fast"
    with pytest.raises(ConfigError, match="the learner's setup: utd must be a number"):
        LearnerSetup.from_json(json.dumps(bad))


def test_critic_actor_ratio_from_the_command_line_paces_the_learner(tmp_path, monkeypatch, capsys):
    """``--agent critic_actor_ratio=2`` (with a YAML config for the rest): the learner updates
    the actor on every second update, and the checkpoint's agent keeps the setting."""
    from robot_rl.agents.sac import SACAgent
    from robot_rl.runtime.checkpoint import latest_checkpoint, load_agent

    actor_turns: list[bool] = []
    update = SACAgent.update
    monkeypatch.setattr(SACAgent, "update", lambda self, batch, update_actor=True: (
        actor_turns.append(update_actor), update(self, batch, update_actor=update_actor))[1])
    path = tmp_path / "tiny.yaml"
    path.write_text("task: PickCube\ndemos: 1\nutd: 1\nbatch_size: 16\npretrain_steps: 2\ncritic_warmup_steps: 0\n"
                    "eval_every: 100000\neval_episodes: 1\nfinal_eval_episodes: 1\nlearner: inline\n"
                    "progress: false\n")
    run = tmp_path / "run"
    assert main(["train", "--config", str(path), "--agent", "critic_actor_ratio=2", "--steps", "12",
                 "--run-dir", str(run)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == 12
    assert actor_turns[:12] == [True, False] * 6
    assert load_agent(latest_checkpoint(run) / "agent.safetensors").config.critic_actor_ratio == 2
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["agent"] == {**dataclasses.asdict(AgentSettings(critic_actor_ratio=2)), "hidden": [256, 256]}
    assert recorded["batch_size"] == 16
    assert recorded["env_steps"] == 12 and "critic_actor_ratio" not in recorded


# ------------------------------------------------------------------------------ ROS parameters
@pytest.fixture
def ros_context():
    rclpy = pytest.importorskip("rclpy")
    from rclpy.context import Context

    from tests.helpers.ros import free_domain_id

    context = Context()
    rclpy.init(context=context, domain_id=free_domain_id())
    nodes = []
    yield context, nodes
    for node in nodes:
        node.destroy_node()
    rclpy.shutdown(context=context)


def ros_value(default):
    if default is None:
        return ""
    if isinstance(default, AgentSettings):
        return []  # KEY=VALUE overrides of the settings' defaults: none
    return list(default) if isinstance(default, tuple) else default


@pytest.mark.ros
@pytest.mark.parametrize("config_cls", [ActorNodeConfig, LearnerNodeConfig])
def test_every_node_config_field_is_a_ros_parameter_with_its_default_and_help(config_cls, ros_context):
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from robot_rl.drivers.node import declare_config

    context, nodes = ros_context
    node = Node(f"defaults_{config_cls.__name__.lower()}", context=context)
    nodes.append(node)
    assert declare_config(node, config_cls) == config_cls()
    for f in dataclasses.fields(config_cls):
        assert node.has_parameter(f.name), f.name
        assert node.get_parameter(f.name).value == ros_value(field_default(f)), f.name
        assert node.describe_parameter(f.name).description == f.metadata["help"], f.name

    overrides = [Parameter("agent", value=["critic_actor_ratio=2", "hidden=[32,32]"]), Parameter("utd", value=1),
                 Parameter("image_size", value=[32, 48]), Parameter("demo_store", value="demos.zarr"),
                 Parameter("cameras", value=["front"])]
    given = Node(f"given_{config_cls.__name__.lower()}", context=context,
                 parameter_overrides=[p for p in overrides if p.name in {f.name for f in dataclasses.fields(config_cls)}])
    nodes.append(given)
    cfg = declare_config(given, config_cls)
    assert cfg.agent == AgentSettings(critic_actor_ratio=2, hidden=(32, 32))
    assert cfg.image_size == (32, 48) and cfg.demo_store == "demos.zarr" and cfg.cameras == ("front",)
    if config_cls is LearnerNodeConfig:
        assert cfg.utd == 1.0 and isinstance(cfg.utd, float)

    bad = Node(f"bad_{config_cls.__name__.lower()}", context=context,
               parameter_overrides=[Parameter("agent", value=["num_critic=3"])])
    nodes.append(bad)
    with pytest.raises(ConfigError, match="parameter agent: unknown key 'num_critic'"):
        declare_config(bad, config_cls)

    # a field's choices are checked where the parameters are read, for every node alike
    field, wrong = ("keep", "failures") if config_cls is ActorNodeConfig else ("obs", "rgb")
    outside = Node(f"outside_{config_cls.__name__.lower()}", context=context,
                   parameter_overrides=[Parameter(field, value=wrong)])
    nodes.append(outside)
    with pytest.raises(InputError, match=f"parameter {field} must be one of .*; got '{wrong}'"):
        declare_config(outside, config_cls)


@pytest.mark.ros
def test_the_learner_node_writes_its_config_and_resumes_from_its_checkpoint(ros_context, tmp_path):
    from rclpy.parameter import Parameter

    from robot_rl.drivers.learner_node import LearnerNode

    context, nodes = ros_context
    params = [Parameter("run_dir", value=str(tmp_path / "run")), Parameter("batch_size", value=16),
              Parameter("agent", value=["critic_actor_ratio=3"]), Parameter("device", value="cpu")]
    first = LearnerNode(context=context, parameter_overrides=params)
    nodes.append(first)
    written = json.loads((tmp_path / "run" / "learner_config.json").read_text())
    assert written == json.loads(json.dumps(dataclasses.asdict(first.cfg)))
    assert written["batch_size"] == 16 and written["agent"]["critic_actor_ratio"] == 3
    assert first.learner.agent.config.critic_actor_ratio == 3 and not first.learner.started
    first.learner.agent.num_updates = 7  # as if it had trained
    first.checkpoint(announce=False)

    second = LearnerNode(context=context, parameter_overrides=params)
    nodes.append(second)
    learner = second.learner
    assert learner.started and learner.normalizer_fitted and learner.agent.num_updates == 7
    assert learner.agent.config.critic_actor_ratio == 3
    assert learner.agent.config.device == "cpu" and {p.device.type for p in learner.agent.parameters()} == {"cpu"}


@pytest.mark.ros
def test_the_actor_node_writes_its_config_and_builds_its_policy_from_the_same_fields(ros_context, tmp_path):
    from rclpy.parameter import Parameter

    from robot_rl.drivers.actor_node import ActorNode

    context, nodes = ros_context
    node = ActorNode(context=context, parameter_overrides=[
        Parameter("run_dir", value=str(tmp_path / "run")), Parameter("agent", value=["hidden=[32,32]"]),
        Parameter("demo_store", value="demos.zarr"), Parameter("residual", value=False)])
    nodes.append(node)
    written = json.loads((tmp_path / "run" / "actor_config.json").read_text())
    assert written == json.loads(json.dumps(dataclasses.asdict(node.cfg)))
    assert written["agent"]["hidden"] == [32, 32] and written["residual"] is False
    assert node.policy.config.hidden == (32, 32)
    assert node.policy.config.residual_scale == 0.0  # with demos, residual unless residual:=false
    assert written["device"] == "cpu" and node.policy.config.device == "cpu"  # acts on the robot PC's CPU


@pytest.mark.ros
@pytest.mark.parametrize("node, parameter, says", [
    ("learner_node", "agent:=[num_critic=3]", "parameter agent: unknown key 'num_critic'"),
    ("learner_node", "priority:=urgent", "parameter priority must be one of idle, low, normal"),  # the learner's CPU priority beside the control path
    ("actor_node", "priority:=idle", "parameter priority must be one of realtime, normal"),  # the control path's
    ("arm_node", "priority:=urgent", "parameter priority must be one of realtime, normal"),
])
def test_a_node_refusing_its_parameters_is_one_line_and_exit_status_2(tmp_path, node, parameter, says):
    """Exit status 2, before the node builds anything: the stack supervisor does not respawn a node
    whose configuration is wrong."""
    pytest.importorskip("rclpy")
    import subprocess
    import sys

    from tests.helpers.ros import free_domain_id, ros_environment

    run_dir = [] if node == "arm_node" else ["-p", f"run_dir:={tmp_path / 'run'}"]
    result = subprocess.run([sys.executable, "-m", f"robot_rl.drivers.{node}", "--ros-args", *run_dir, "-p", parameter],
                            env=ros_environment(free_domain_id()), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{node}: error: {says}"), line
    assert not (tmp_path / "run").exists()
