"""Checking and reading configuration values, for every config dataclass (``robot_rl.config``
declares them): YAML / JSON configs and maps checked against a dataclass (``check_values``:
unknown keys and wrong types are one ``ConfigError`` line naming the file and the field), YAML
files read with one line for an unreadable file or invalid YAML, ``KEY=VALUE`` options, a run's
``config.json`` written whole.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from pathlib import Path

from robot_rl.agents.settings import DERIVED, AgentSettings
from robot_rl.errors import UserFacingError


class ConfigError(UserFacingError):
    """A config value that does not fit its dataclass; the message names where it came from and the field."""


def field_default(f: dataclasses.Field):
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


class _Mismatch(Exception):
    """A value is not of its field's type; ``args[0]`` says what was expected."""


def _convert(kind, value):
    """``value`` as the type ``kind``: lists become tuples, integers become floats where a float is
    expected; nothing else is coerced."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):  # X | None
        if value is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch("true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch("an integer")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _Mismatch("a number")
    if kind is str:
        if isinstance(value, str):
            return value
        raise _Mismatch("a string")
    if origin is tuple:
        variable = len(args) == 2 and args[1] is Ellipsis
        what = f"a list of {_NAMES.get(args[0], args[0])}s" if variable else f"a list of {len(args)} values"
        if not isinstance(value, (list, tuple)) or (not variable and len(value) != len(args)):
            raise _Mismatch(what)
        kinds = [args[0]] * len(value) if variable else list(args)
        try:
            return tuple(_convert(k, v) for k, v in zip(kinds, value))
        except _Mismatch:
            raise _Mismatch(what) from None
    if kind is dict or origin is dict:
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return dict(value)
        raise _Mismatch("a mapping of KEY: VALUE")
    raise TypeError(f"no conversion for config type {kind!r}")


_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean"}


# keys a run's config.json adds for its readers (not fields): a config file may carry them back
DERIVED_KEYS = ("demo_source",)


def demo_source(cfg) -> str:
    """Where a run's demonstrations come from, in words (``config.json``'s ``demo_source``)."""
    if getattr(cfg, "demo_store", None):
        if (Path(cfg.demo_store) / "meta" / "info.json").is_file():
            return f"LeRobotDataset {cfg.demo_store} (imported for the run)"
        return f"episode store {cfg.demo_store}"
    if getattr(cfg, "demos", 0) and getattr(cfg, "env", None):
        return f"{cfg.demos} demonstrations by the scripted policy {cfg.env_expert}, recorded at the start"
    if getattr(cfg, "demos", 0):
        return f"{cfg.demos} scripted expert demonstrations (action noise {cfg.demo_noise}), recorded at the start"
    return "none"


def check_values(cls, data: dict, source: str) -> dict:
    """``data`` (field -> value, e.g. from YAML or JSON) checked against the dataclass ``cls``:
    every key a field, every value of its field's type (converted: lists to tuples, integers to
    floats), in its ``choices``; a field that is itself a dataclass (``agent``) takes a mapping
    of its fields, checked in turn and kept a mapping (the keys given, for merging). Anything
    else is one ``ConfigError`` line naming ``source`` and the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of {cls.__name__} fields (KEY: VALUE), "
                          f"got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    checked = {}
    for key, value in data.items():
        if key in DERIVED_KEYS and key not in fields:
            continue
        if key not in fields and cls is AgentSettings and key in DERIVED:
            raise ConfigError(f"{source}: {key} is not an agent setting; the run takes it from {DERIVED[key]}")
        if key not in fields:
            near = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f" ({cls.__name__} has no such field)"
            raise ConfigError(f"{source}: unknown key {key!r}{hint}")
        if dataclasses.is_dataclass(hints[key]):
            if isinstance(value, hints[key]):
                value = dataclasses.asdict(value)
            elif not isinstance(value, dict):
                raise ConfigError(f"{source}: {key} must be a mapping of KEY: VALUE, got {value!r}")
            value = check_values(hints[key], value, f"{source}: {key}")
            checked[key] = value
            continue
        try:
            value = _convert(hints[key], value)
        except _Mismatch as expected:
            raise ConfigError(f"{source}: {key} must be {expected.args[0]}, got {value!r}") from None
        choices = fields[key].metadata.get("choices")
        if choices is not None and value not in choices and not (value is None and field_default(fields[key]) is None):
            raise ConfigError(f"{source}: {key} must be one of {', '.join(choices)}; got {value!r}")
        checked[key] = value
    return checked


def config_from_dict(cls, data: dict, source: str):
    """A ``cls`` from checked ``data`` (fields not in it keep their defaults)."""
    return cls(**check_values(cls, data, source))


def read_config_file(path: str | Path, cls) -> dict:
    """The fields a YAML config file sets (``yaml.safe_load``), checked against ``cls``: one
    ``ConfigError`` line naming the file and the field for an unknown key or a wrong type."""
    data = read_yaml_file(path, ConfigError, "config file")
    return check_values(cls, {} if data is None else data, str(path))


def read_yaml_file(path: str | Path, error=ConfigError, what: str = "file"):
    """``yaml.safe_load`` of a file; an unreadable file or invalid YAML is one ``error`` naming it
    (and the line)."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise error(f"{what} {path}: {err.strerror or err}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise error(f"{path}: not valid YAML{where} ({getattr(err, 'problem', None) or err})") from None


def read_map_file(path: str | Path, cls, error) -> dict:
    """A YAML file of some of ``cls``'s fields (a dataset's or a bag's map), as a dict: not a
    mapping, or a key that is no field, is one ``error`` naming the file."""
    data = read_yaml_file(path, error, "map")
    fields = sorted(f.name for f in dataclasses.fields(cls))
    if not isinstance(data, dict):
        raise error(f"map {path}: expected a mapping of {', '.join(fields)}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise error(f"map {path}: unknown key {unknown[0]!r} (keys: {', '.join(fields)})")
    return data


def parse_key_values(items, source: str) -> dict:
    """``["KEY=VALUE", ...]`` (``--agent`` options, the ``agent`` ROS parameter) -> a dict; each
    VALUE is JSON where it parses as JSON (numbers, true/false, lists), else the text."""
    values = {}
    for item in items:
        key, sep, text = str(item).partition("=")
        if not sep or not key:
            raise ConfigError(f"{source}: takes KEY=VALUE, got {item!r}")
        try:
            values[key] = json.loads(text)
        except json.JSONDecodeError:
            values[key] = text
    return values


def write_config_json(path: str | Path, cfg) -> Path:
    """The whole resolved config as JSON at ``path`` (written aside, then renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(cfg), indent=1))
    tmp.replace(path)
    return path
