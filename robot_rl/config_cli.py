"""Command-line options generated from a config dataclass (``robot_rl.config``).

Each field is ``--field-name`` (plus the field's own ``flags``, e.g. ``--steps`` for
``env_steps``), typed from its annotation, with the field's help and default in ``--help``:
booleans are ``--x / --no-x``, tuples take several values (a fixed-length tuple given one value
repeats it: ``--image-size 64`` is 64x64), the ``agent`` settings take repeated ``--agent KEY=VALUE``.
Every option defaults to ``None``, so ``config_overrides`` returns only what was given: a resumed
run keeps its own value of every option not given.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

from robot_rl.config_values import ConfigError, check_values, field_default, parse_key_values

# shortcuts for SAC settings of ``agent``, kept from before the generator (the docs and
# scripts use them): option -> (SACConfig key, argparse keywords)
AGENT_FLAGS = {
    "--num-critics": ("num_critics", dict(type=int, metavar="N", help="critics in the ensemble (REDQ: the target "
                                                                       "is the min over num_target_critics of them)")),
    "--image-encoder": ("image_encoder", dict(choices=["drq", "resnet18"], help="the camera encoder")),
    "--pretrained": ("pretrained_path", dict(metavar="FILE", help="local file with ResNet-18 weights (torchvision "
                                                                  "names; .pt or .safetensors)")),
    "--freeze-backbone": ("freeze_backbone", dict(action="store_const", const=True,
                                                  help="keep the pretrained encoder's weights fixed")),
}


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _sections(cls) -> list[tuple[type, list[dataclasses.Field]]]:
    """The fields of ``cls`` grouped by the dataclass that declares them, the shared parts first."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    sections, seen = [], set()
    for owner in reversed(cls.__mro__):
        own = [fields[n] for n in owner.__dict__.get("__annotations__", {}) if n in fields and n not in seen]
        seen.update(f.name for f in own)
        if own:
            sections.append((owner, own))
    return sections


def _help(f: dataclasses.Field) -> str:
    """The field's help for argparse, with its default; '%' escaped (argparse formats help with %)."""
    default = field_default(f)
    text = f.metadata["help"]
    if default not in (None, ()) and not dataclasses.is_dataclass(default):
        if isinstance(default, tuple):
            default = " ".join(map(str, default))
        text = f"{text} (default {default})"
    return text.replace("%", "%%")


def _kind_options(kind, f: dataclasses.Field) -> dict:
    """argparse keywords for a field of type ``kind``."""
    if f.metadata.get("parse") is not None:
        return {}
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if type(None) in args:  # X | None
        (kind,) = [a for a in args if a is not type(None)]
        origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is tuple:
        return {"type": args[0], "nargs": "*" if args[-1] is Ellipsis else "+"}
    if dataclasses.is_dataclass(kind):  # --agent KEY=VALUE, repeatable
        return {"action": "append"}
    return {"type": kind}


def add_config_options(parser: argparse.ArgumentParser, cls) -> None:
    """One option per field of ``cls`` (see the module's doc), in a group per shared part; for a
    config with an ``agent`` dict also the ``AGENT_FLAGS`` shortcuts."""
    hints = typing.get_type_hints(cls)
    for owner, fields in _sections(cls):
        group = parser.add_argument_group(owner.__name__, (owner.__doc__ or "").strip().splitlines()[0].replace("``", ""))
        for f in fields:
            extra = {k: f.metadata[k] for k in ("choices", "metavar") if k in f.metadata}
            if f.metadata.get("positional"):  # the words after the options (after --)
                group.add_argument(f.name, nargs="*", default=None, help=_help(f), **extra)
                continue
            group.add_argument(option(f.name), *f.metadata.get("flags", ()), dest=f.name, default=None,
                               help=_help(f), **extra, **_kind_options(hints[f.name], f))
            if f.name == "agent":
                for flag, (key, kwargs) in AGENT_FLAGS.items():
                    group.add_argument(flag, dest=f"agent:{key}", default=None, **kwargs)


def config_overrides(args: argparse.Namespace, cls, source: str = "command line") -> dict:
    """The fields of ``cls`` the parsed command line gives, checked and converted (``check_values``)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    given: dict = {}
    for name, f in fields.items():
        value, kind = getattr(args, name, None), hints[name]
        if value is None or (f.metadata.get("positional") and not value):  # an absent positional is []
            continue
        parse = f.metadata.get("parse")
        if parse is not None:  # an option that sets more than its field
            for key, parsed in parse(value).items():
                if key != name and getattr(args, key, None) is not None:
                    raise ConfigError(f"{option(name)} {value} and {option(key)} both set {key}: give one of them")
                given[key] = parsed
        elif dataclasses.is_dataclass(kind):
            given[name] = parse_key_values(value, option(name))
        elif typing.get_origin(kind) is tuple and Ellipsis not in typing.get_args(kind) and len(value) == 1:
            given[name] = value * len(typing.get_args(kind))  # one value for all: e.g. a square image
        else:
            given[name] = value
    shortcuts = {key: getattr(args, f"agent:{key}") for key, _ in AGENT_FLAGS.values()
                 if getattr(args, f"agent:{key}", None) is not None}
    if shortcuts:
        given["agent"] = {**given.get("agent", {}), **shortcuts}
    for name, value in given.items():  # the --agent settings: their errors name the option
        if dataclasses.is_dataclass(hints[name]):
            check_values(hints[name], value, option(name))
    return check_values(cls, given, source)


def merge_overrides(base: dict, over: dict) -> dict:
    """``over`` on top of ``base`` (both as ``config_overrides`` gives them: the ``agent``
    settings a mapping of the keys given); their ``agent`` settings are merged key by key."""
    merged = {**base, **over}
    if "agent" in base and "agent" in over:
        merged["agent"] = {**base["agent"], **over["agent"]}
    return merged
