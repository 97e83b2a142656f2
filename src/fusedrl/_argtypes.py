"""argparse value types and the `--set FIELD=VALUE` parser shared by the command-line tools.

`fusedrl train` and `fusedrl sweep` both read `--set` with `parse_overrides`, so a value one
command accepts the other accepts too, with the same message when it is wrong.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import json
import os
import re
import sys
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fusedrl._suggest import close_names


class UsageError(Exception):
    """A bad command line: printed as `fusedrl COMMAND: error: ...` with exit status 2."""


def add_import_option(parser: argparse.ArgumentParser) -> None:
    """`--import MODULE` (repeatable): modules that register custom envs, imported first."""
    parser.add_argument("--import", action="append", default=[], dest="imports", metavar="MODULE",
                        help="import MODULE first (repeatable), e.g. one that registers your own envs "
                             "with fusedrl.register; looked up from the current directory too")


def import_modules(names: Sequence[str], *, source: str = "--import") -> None:
    """Imports `--import` modules (the current directory first on the path, as `python -m` has it,
    while they are imported: `sys.path` is as before afterwards); a module that cannot be found, or
    a file name given for one, is a UsageError naming it. `source` names where the module names came
    from in those messages. Callers that read the names from a file check first that the user
    trusts it (`fusedrl.trust`)."""
    for name in names:
        if error := module_name_error(name):
            raise UsageError(f"{source} {name}: {error}")
    cwd = os.getcwd()
    added = bool(names) and cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        for name in names:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as e:
                if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                    raise  # the module was found, and itself imports something missing
                raise UsageError(
                    f"{source} {name}: no module named {e.name!r} here ({cwd}) or on the Python path; "
                    f"run from the folder that holds it, or install its package."
                ) from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def check_network(config, error: type[Exception], env=None) -> list[str]:
    """A config's own network (`network="module:function"`), imported (the current directory on the
    path, as for --import) and built once to check it, before anything trains; a failure raises
    `error` with the reason. Returns the module to record with the run's imports ([] without one).
    `env`: the run's (env, env_params), if built already: the check builds no other."""
    if config.network is None:
        return []
    from fusedrl.networks import BUILTIN_NETWORKS, network_module  # start-up time: networks loads JAX

    builtin = config.network in BUILTIN_NETWORKS  # checked too: "cnn" needs image observations
    module = None if builtin else network_module(config.network)
    if module is not None:
        import_modules([module], source=f"network {config.network}")
    from fusedrl.learners import make_train  # start-up time: the CLI's usage checks load no JAX

    try:
        make_train(config, env=env)
    except (TypeError, ValueError) as e:
        raise error(f"invalid configuration: {e}") from None
    return [] if module is None else [module]


def module_name_error(name: Any) -> str | None:
    """Why `name` is not a module name as `import` takes it (None: it is one)."""
    if not isinstance(name, str) or not name:
        return f"expected a module name (a non-empty string), got {name!r}."
    if name.endswith(".py") or "/" in name or os.sep in name or name.startswith("."):
        module = os.path.splitext(os.path.basename(name))[0]
        return (f"give a module name as `import` takes it (--import {module}, run from the folder that "
                f"holds {module}.py), not a file name or path.")
    return None


def positive_int(text: str) -> int:
    """An argparse `type` accepting integers >= 1, with a message naming the bad value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


# jax.random.key(s) keeps s modulo 2**32 (without jax_enable_x64), so seeds s and s + 2**32 (or s - 2**32,
# a negative one) are the same run; a run also uses seed + 1 (its greedy evaluation's key).
MAX_SEED = 2**32 - 2
# A seed given to jax.random.key as it is (`fusedrl evaluate --seed`, `evaluate_run(seed=)`): the default,
# a run's seed + 1, is up to this.
MAX_KEY_SEED = 2**32 - 1


def seed_error(value: Any, maximum: int = MAX_SEED) -> str | None:
    """Why `value` is not a seed fusedrl accepts (None if it is): an int from 0 to `maximum`."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"expected an integer seed, got {value!r}"
    if not 0 <= value <= maximum:
        why = " (and a run's evaluation uses seed + 1)" if maximum == MAX_SEED else ""
        return (f"expected a seed from 0 to {maximum}, got {value}: JAX keys take 32-bit seeds{why}, so a "
                f"negative or larger seed would repeat another seed's keys")
    return None


def seed_arg(text: str, maximum: int = MAX_SEED) -> int:
    """An argparse `type` for --seed: an int from 0 to `maximum` (`seed_error`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if (error := seed_error(value, maximum)) is not None:
        raise argparse.ArgumentTypeError(error)
    return value


def key_seed_arg(text: str) -> int:
    """`seed_arg` for a seed used as a key's seed as it is: up to MAX_KEY_SEED."""
    return seed_arg(text, MAX_KEY_SEED)


# ------------------------------------------------------------------------------- --set values
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def _config_class(config_cls: type | None) -> type:
    """`config_cls`, or PPOConfig when it is None (the `--set` fields' default class)."""
    if config_cls is not None:
        return config_cls
    from fusedrl.train.config import PPOConfig  # start-up time: the config module loads JAX

    return PPOConfig


def field_types(config_cls: type | None = None) -> dict[str, Any]:
    """{field: its type} of the config class `config_cls` (`PPOConfig`, `A2CConfig`,
    `ReinforceConfig`; default PPOConfig): what `--set FIELD=VALUE` converts VALUE to."""
    config_cls = _config_class(config_cls)
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls)}


def env_param_defaults(env_params: Any) -> dict[str, Any] | None:
    """{name: default value} of a JAX env's params (`fusedrl.make(env_id)[1]`); None when the env
    has no params dataclass (a "gymnasium:" host env, whose env params go to gymnasium.make)."""
    if env_params is None or not dataclasses.is_dataclass(env_params):
        return None
    return {f.name: getattr(env_params, f.name) for f in dataclasses.fields(env_params)}


def _parse_bool(item: str, name: str, text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise UsageError(f"--set {item}: {name} expects true or false, got {text!r}.")


def _parse_int(item: str, name: str, text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        pass
    try:
        x = float(text)
    except ValueError:
        x = None
    if x is not None and x.is_integer():  # 1e5
        return int(x)
    raise UsageError(f"--set {item}: {name} expects an integer, got {text!r}.")


def _whole(text: str) -> int:
    """An integer literal such as 64 or 1_024 (no spaces inside, no sign): ValueError otherwise."""
    if not re.fullmatch(r"\d[\d_]*", text):
        raise ValueError(text)
    return int(text)


def _parse_float(item: str, name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--set {item}: {name} expects a number, got {text!r}.") from None


def _parse_env_param(item: str, name: str, text: str, default: Any) -> Any:
    """An env param's value, typed like its default (int, float or bool); with no default known
    (host envs), any JSON number or true/false."""
    kind = np.asarray(default).dtype.kind if default is not None else None
    if kind == "b":
        return _parse_bool(item, f"env param {name}", text)
    if kind in ("i", "u"):
        return _parse_int(item, f"env param {name}", text)
    if kind == "f":
        return _parse_float(item, f"env param {name}", text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, int | float | bool):
        return value
    raise UsageError(f"--set {item}: env param {name} expects a number, got {text!r}.")


def _unknown(item: str, name: str, env_defaults: Mapping[str, Any] | None, config_cls: type) -> UsageError:
    from fusedrl.train.config import CONFIGS  # start-up time: the config module loads JAX

    fields = list(field_types(config_cls))
    params = sorted(env_defaults or ())
    owners = [c for c in CONFIGS.values() if c is not config_cls and name in field_types(c)]
    if owners:  # another algorithm's field: say whose, and why this one has none
        note = config_cls._MISSING_FIELD_NOTES.get(name)
        return UsageError(f"--set {item}: {config_cls.__name__} has no field {name!r}: it is a field of "
                          f"{' and '.join(c.__name__ for c in owners)} (algorithm "
                          f"{' or '.join(c.algo for c in owners)}){'; ' + note if note else ''}. "
                          f"Valid fields: {', '.join(fields)}.")
    close = close_names(name, fields + params)  # other libraries' names too: learning_rate -> lr
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    env_note = f" Env params: {', '.join(params)}." if params else ""
    return UsageError(f"--set {item}: unknown field {name!r} ({config_cls.__name__} has no such field"
                      f"{', nor the env such a param' if params else ''}).{hint} "
                      f"Valid fields: {', '.join(fields)}.{env_note}")


def parse_value(field: str, text: str, env_defaults: Mapping[str, Any] | None = None, *,
                config_cls: type | None = None) -> Any:
    """`text` converted to the type of field `field` of `config_cls` (default PPOConfig), or of env
    param "env_params.NAME" (typed like its value in `env_defaults`; see `env_param_defaults`)."""
    return _parse(f"{field}={text}", field, text, env_defaults, _config_class(config_cls))


def _parse(item: str, field: str, text: str, env_defaults: Mapping[str, Any] | None, config_cls: type) -> Any:
    """`parse_value`, with `item` (the --set value as given) for the messages."""
    if field.startswith("env_params."):
        name = field.split(".", 1)[1]
        if env_defaults is not None and name not in env_defaults:
            close = difflib.get_close_matches(name, list(env_defaults), n=3)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise UsageError(f"--set {item}: the env has no param {name!r}.{hint} "
                             f"Valid env params: {', '.join(sorted(env_defaults))}.")
        return _parse_env_param(item, name, text, (env_defaults or {}).get(name))
    types = field_types(config_cls)
    if field not in types:
        raise _unknown(item, field, env_defaults, config_cls)
    kind = types[field]
    if set(typing.get_args(kind)) == {float, type(None)}:  # optional numbers (target_kl)
        if text.lower() in ("none", "off", ""):
            return None
        kind = float
    if set(typing.get_args(kind)) == {str, type(None)}:  # optional strings (network, recurrent)
        return None if text.lower() in ("none", "") else text
    if kind is bool:
        return _parse_bool(item, field, text)
    if kind is int:
        return _parse_int(item, field, text)
    if kind is float:
        return _parse_float(item, field, text)
    if typing.get_origin(kind) is tuple:
        # Commas only: "64 64" is not read as 6464, nor "64,,64" as two layers.
        parts = [p.strip() for p in text.strip("()[] ").split(",")]
        if parts and not parts[-1] and len(parts) > 1:  # a trailing comma, as in "(64,)"
            parts.pop()
        try:
            values = tuple(_whole(p) for p in parts)
        except ValueError:
            values = ()
        if not values:
            raise UsageError(f"--set {item}: {field} expects an integer per layer, comma-separated "
                             f"like 64,64; got {text!r}.")
        return values
    if kind is str:
        return text
    raise UsageError(f"--set {item}: this field cannot be set from the command line; "
                     f"use env_params.NAME=VALUE for env params, or --config FILE.")


def parse_overrides(items: Sequence[str], env_defaults: Mapping[str, Any] | None = None, *,
                    total_timesteps: int | None = None, config_cls: type | None = None) -> dict[str, Any]:
    """{"field": value} from ["field=value", ...]; env params collect under "env_params".

    Args:
      items: the `--set` values.
      env_defaults: the env's params with their defaults (`env_param_defaults`), or None if not
        known. With them, env params may also be given by their bare name (`gravity=12`), and
        their values are typed like the defaults.
      total_timesteps: the `--total-timesteps` flag, if given; a `--set total_timesteps` with
        another value is an error.
      config_cls: the config class whose fields these are (`PPOConfig`, `A2CConfig`,
        `ReinforceConfig`, e.g. `fusedrl.train.config.config_class(algo)`); default PPOConfig. Each value
        is converted to its field's type there, and another algorithm's field is refused by name.
    """
    config_cls = _config_class(config_cls)
    types = field_types(config_cls)
    out: dict[str, Any] = {}
    given: dict[str, tuple[str, Any]] = {}  # field -> (the first --set item, its value)
    for item in items:
        if "=" not in item:
            raise UsageError(f"--set expects FIELD=VALUE, got {item!r}.")
        field, text = (s.strip() for s in item.split("=", 1))
        if env_defaults is not None and field in env_defaults and field not in types:
            field = f"env_params.{field}"
        value = _parse(item.strip(), field, text, env_defaults, config_cls)
        if field in given and given[field][1] != value:
            raise UsageError(f"--set {given[field][0]} and --set {item.strip()} give {field} two "
                             f"values; give each field once.")
        given.setdefault(field, (item.strip(), value))
        if field.startswith("env_params."):
            out.setdefault("env_params", {})[field.split(".", 1)[1]] = value
        else:
            out[field] = value
    if total_timesteps is not None:
        if out.get("total_timesteps", total_timesteps) != total_timesteps:
            raise UsageError(
                f"--set total_timesteps={out['total_timesteps']} conflicts with --total-timesteps "
                f"{total_timesteps}; give the step budget once."
            )
        out["total_timesteps"] = total_timesteps
    return out
