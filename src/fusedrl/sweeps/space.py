"""The search space of a sweep: which fields can be swept, their values, and the runs' layout.

Only traced numbers can be swept: the `Hyperparams` fields (the config's `traced_fields()`) and
any scalar field of the env's params dataclass (e.g. CartPole's `gravity`). Modes (the keyword arguments of
`fusedrl.sweep` after `**` are the axes):
- "grid" (default): the Cartesian product; each field is a dimension of the result.
- "zip": the i-th values of every field form trial i (all lists of the same length); dims
  ("seed", "trial").
- "random": `num_samples` trials, each field drawn independently from its spec; dims
  ("seed", "trial"). A spec is `(low, high)`: uniform, but log-uniform for `lr` (the only field
  whose natural scale is logarithmic), integer-uniform (inclusive) for integer env params;
  `LogUniform(low, high)` / `Uniform(low, high)` to choose explicitly; a list: uniform choice
  among its values. Draws come from `key` (folded with a constant, so they do not correlate with
  the seeds' keys) and are reproducible.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl._numbers import is_int
from fusedrl.envs import make
from fusedrl.envs.registry import check_env_param
from fusedrl.sweeps.result import as_python, values_match
from fusedrl.train import OnPolicyConfig

MODES = ("grid", "zip", "random")
LOG_UNIFORM_FIELDS = ("lr",)  # (low, high) ranges of these are drawn log-uniformly in random mode
_RANDOM_SALT = 0x5EED  # folded into `key` for random-search draws


@dataclasses.dataclass(frozen=True)
class Uniform:
    """Random-search spec: uniform on [low, high] (integers: inclusive, for integer fields)."""

    low: float
    high: float


@dataclasses.dataclass(frozen=True)
class LogUniform:
    """Random-search spec: log-uniform on [low, high], both > 0."""

    low: float
    high: float


@dataclasses.dataclass(frozen=True)
class Choice:
    """Random-search spec: uniform choice among `values`."""

    values: tuple



# --------------------------------------------------------------------------------- axis specs
def env_param_fields(config: OnPolicyConfig) -> dict[str, Any]:
    """The env's params fields and their values for `config` (defaults with overrides)."""
    params = make(config.env_id, **config.env_params)[1]
    if params is None:  # a multi-agent env (JaxMARL's contract) has no params
        return {}
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}


def check_axes(config: OnPolicyConfig, axes: Mapping[str, Any]) -> dict[str, Any]:
    """Validates axis names; returns the env params fields (name -> default value)."""
    env_fields = env_param_fields(config)
    traced = config.traced_fields()
    static = [f.name for f in dataclasses.fields(type(config)) if f.name not in traced]
    valid = list(traced) + [f for f in env_fields if f not in traced]
    for name in axes:
        if name in env_fields and name not in traced and np.shape(env_fields[name]) != ():
            shape = np.shape(env_fields[name])
            raise ValueError(
                f"cannot sweep {name!r}: it is an array-valued env param (shape {shape}), and a sweep "
                f"axis takes one number per run. Vmap train over it instead: hp = config.hparams(); "
                f"hps = hp.replace(env_params=hp.env_params.replace({name}=VALUES)) with VALUES of shape "
                f"[runs, *{shape}], and in_axes (keys, a tree of None with 0 at env_params.{name}), as the "
                f"README's learning-rate example does for lr."
            )
        if name in traced or name in env_fields:
            continue
        if name in ("seed", "seeds", "trial"):
            raise ValueError(
                f"{name!r} is not a hyperparameter: seeds are set with num_seeds=..., and 'trial' "
                f"is the dimension of zip/random sweeps."
            )
        if name in static:
            raise ValueError(
                f"cannot sweep {name!r}: it is a static field of {type(config).__name__} (it sets array "
                f"shapes, the structure of the program or its initial parameters), so runs with different "
                f"values are different compiled programs and cannot be vmapped together. Run one "
                f"sweep per value, e.g. "
                f"`[fusedrl.sweep(config.replace({name}=v), ...) for v in values]`, or separate "
                f"runs. Sweepable (traced) names for {config.env_id}: {', '.join(valid)}."
            )
        close = difflib.get_close_matches(name, valid + static, n=3)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown sweep axis {name!r}.{hint} Sweepable (traced) names for {config.env_id}: "
            f"{', '.join(valid)}."
        )
    return env_fields


def _dtype_of(name: str, env_fields: Mapping[str, Any], traced: Sequence[str]):
    if name in traced:
        return np.float32
    default = np.asarray(env_fields[name])
    if np.issubdtype(default.dtype, np.bool_):
        return np.bool_
    if np.issubdtype(default.dtype, np.integer):
        return np.int32
    return np.float32


def _as_values(name: str, values, dtype) -> np.ndarray:
    if isinstance(values, Uniform | LogUniform | Choice):
        raise TypeError(f"{name}: {type(values).__name__} is a random-search spec; use mode='random'.")
    arr = np.asarray(values)
    if arr.ndim == 0:
        raise ValueError(
            f"{name}={values!r}: an axis needs a list of values; to fix one value for every run, "
            f"set it in the config (config.replace({name}=...), or env_params={{...}} for env params)."
        )
    return _numbers(name, values, dtype)


def _numbers(name: str, values, dtype, what: str = "values") -> np.ndarray:
    """A non-empty 1-D list of numbers as a `dtype` array (grid and zip values, random choices),
    refusing what the cast would change silently: anything but numbers (strings such as '1e-3'
    too) and, for an integer field, numbers that are not whole."""
    arr = np.asarray(values)  # an object array for ints beyond 64 bits (2**70)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D list of {what}, got shape {arr.shape}.")
    if arr.dtype.kind not in "biuf" and not (
            arr.dtype.kind == "O" and all(isinstance(v, numbers.Real) for v in arr.tolist())):
        raise ValueError(
            f"{name}: {what} must be numbers, got {arr.tolist()!r}; write them as numbers "
            f"(1e-3, not '1e-3'), as the config field takes them."
        )
    _check_cast(name, arr.tolist(), dtype, what)
    return arr.astype(dtype)


def _check_cast(name: str, values: Sequence, dtype, what: str = "values") -> None:
    """Refuses numbers that a cast to `dtype` (int32, bool or float32: `_dtype_of`) would not keep:
    for an integer field anything but whole numbers in its range (numpy wraps 2**32 + 5 around to
    5 and turns 3e9 into -2**31), for a boolean one anything but 0 and 1, for a float32 one finite
    numbers that overflow to inf or underflow below its smallest normal number (0 or a subnormal,
    which XLA may flush to 0). NaN and inf stay NaN and inf in float32: the range checks of the
    config (`_validate_values`) and of env params decide about them."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        wrong = [v for v in values if not isinstance(v, numbers.Integral) and not math.isfinite(v)]
        if wrong:
            raise ValueError(f"{name} is an integer field; got {wrong[0]} among its {what} {list(values)}: "
                             f"give whole numbers in [{info.min}, {info.max}].")
        if not all(isinstance(v, numbers.Integral) or float(v).is_integer() for v in values):
            raise ValueError(f"{name} is an integer field; got non-integer {what} {list(values)}: give "
                             f"whole numbers.")
        wrong = [v for v in values if not info.min <= v <= info.max]
        if wrong:
            raise ValueError(
                f"{name}: {what} {wrong} out of range: {name} is an {np.dtype(dtype).name} field, whose "
                f"valid range is [{info.min}, {info.max}] (a cast would wrap them around)."
            )
    elif np.issubdtype(dtype, np.bool_):
        wrong = [v for v in values if not (v == 0 or v == 1)]
        if wrong:
            raise ValueError(f"{name} is a boolean field; got {wrong} among its {what}: give True/False "
                             f"(or 1/0).")
    else:
        tiny, big = float(np.finfo(dtype).smallest_normal), float(np.finfo(dtype).max)  # Python floats:
        # compared with a numpy float32, a Python float is cast to float32 (NEP 50), 1e39 to inf.

        def fits(v) -> bool:
            try:
                m = abs(float(v))
            except OverflowError:  # an int beyond a float64
                return False
            return not math.isfinite(m) or m == 0 or tiny <= m <= big

        wrong = [v for v in values if not fits(v)]
        if wrong:
            kind = np.dtype(dtype).name
            raise ValueError(
                f"{name}: {what} {wrong} out of {kind}'s range (values are cast to {kind}, where they "
                f"would become inf, or 0 or lose their precision): give 0 or magnitudes in "
                f"[{tiny:.4g}, {big:.4g}]."
            )


def _validate_values(config: OnPolicyConfig, name: str, values: np.ndarray, default: Any) -> None:
    """Runs on each value the checks its field gets outside a sweep: the config's range checks of a
    traced field (lr > 0, gamma in (0, 1], ...), `fusedrl.make`'s of an env param (`default`: its
    value in the config; NaN and a time limit below 1 are refused, inf may be a limit that never
    binds, e.g. CartPole's x_threshold)."""
    for v in np.unique(values):
        try:
            if name in config.traced_fields():
                config.replace(**{name: float(v)})
            else:
                check_env_param(config.env_id, name, v.item(), default)
        except (TypeError, ValueError) as e:
            got = "" if name in config.traced_fields() else f"got {v.item()}: "  # the config's message has it
            raise ValueError(f"sweep axis {name}: {got}{e}") from None


def _same_every_trial(name: str, spec, value) -> None:
    raise ValueError(
        f"{name}={spec!r}: a random-search axis with one value gives every trial {value}. Fix it in "
        f"the config instead (config.replace({name}=...); --set {name}=V in `fusedrl sweep`), or give "
        f"a range (low, high) or two or more values to choose from."
    )


def _sample(name: str, spec, dtype, num: int, key: jax.Array) -> np.ndarray:
    """`num` random-search draws of field `name` from `spec` (see the module docstring)."""
    if isinstance(spec, Choice) or (isinstance(spec, list | np.ndarray) and not isinstance(spec, tuple)):
        given = spec.values if isinstance(spec, Choice) else spec
        choices = _numbers(name, given, dtype, "choices")
        if np.unique(choices).size < 2:
            given = np.asarray(given).tolist()  # as given (choices are float32)
            _same_every_trial(name, given, given[0])
        idx = np.asarray(jax.random.randint(key, (num,), 0, choices.size))
        return choices[idx]
    if isinstance(spec, tuple) and len(spec) == 2:
        spec = (LogUniform if name in LOG_UNIFORM_FIELDS else Uniform)(*spec)
    if not isinstance(spec, Uniform | LogUniform):
        raise ValueError(
            f"{name}={spec!r}: in random mode give (low, high), Uniform(low, high), "
            f"LogUniform(low, high), or a list of values to choose from."
        )
    if not all(isinstance(b, numbers.Real) and not isinstance(b, bool) for b in (spec.low, spec.high)):
        raise ValueError(f"{name}={spec!r}: low and high must be numbers (1e-3, not '1e-3').")
    try:
        low, high = float(spec.low), float(spec.high)
    except OverflowError:  # an int beyond a float64
        low, high = math.inf, math.inf
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name}: low and high must be finite, got ({spec.low}, {spec.high}).")
    if not low <= high:
        raise ValueError(f"{name}: low must be <= high, got ({low}, {high}).")
    if np.issubdtype(dtype, np.bool_):
        raise ValueError(f"{name} is a boolean field: give the values to choose from, [False, True].")
    if np.issubdtype(dtype, np.integer):
        if isinstance(spec, LogUniform):
            raise ValueError(f"{name} is an integer field: use Uniform(low, high), not LogUniform.")
        if not (low.is_integer() and high.is_integer()):
            raise ValueError(
                f"{name} is an integer field: its bounds (both inclusive) must be whole numbers, got "
                f"({spec.low}, {spec.high}); e.g. Uniform({math.ceil(low)}, {math.floor(high)}), or a "
                f"list of the values to choose from."
            )
        low, high = int(spec.low), int(spec.high)  # exact (a float of 2**53 + 1 is not)
        _check_cast(name, [low, high], dtype, "bounds")
        if low == high:
            _same_every_trial(name, spec, spec.low)
        info = np.iinfo(dtype)
        if (low, high) == (info.min, info.max):  # every value: what randint's span cannot hold
            return np.asarray(jax.random.bits(key, (num,), jnp.uint32)).view(np.int32).astype(dtype)
        # randint's bounds are parsed as `dtype`: its exclusive maxval must fit too.
        shift = int(high == info.max)
        draws = jax.random.randint(key, (num,), low - shift, high + 1 - shift, dtype) + shift
        return np.asarray(draws).astype(dtype)
    _check_cast(name, [low, high], dtype, "bounds")
    if np.float32(low) == np.float32(high):  # as drawn: float32
        _same_every_trial(name, spec, spec.low)
    u = np.asarray(jax.random.uniform(key, (num,), jnp.float32), np.float64)
    if isinstance(spec, LogUniform):
        if low <= 0:
            raise ValueError(f"{name}: LogUniform needs low > 0, got {low}.")
        return np.exp(np.log(low) + u * (np.log(high) - np.log(low))).astype(dtype)
    return (low + u * (high - low)).astype(dtype)


def layout(config, num_seeds, mode, num_samples, key, axes, env_fields):
    """The sweep's dims, coordinates, and each swept field's value for every run (full shape)."""
    names = list(axes)
    dtypes = {n: _dtype_of(n, env_fields, config.traced_fields()) for n in names}
    seeds = np.arange(num_seeds)
    if mode == "grid":
        if num_samples is not None:
            raise ValueError("num_samples is for mode='random'; a grid has every combination.")
        coords = {n: _as_values(n, axes[n], dtypes[n]) for n in names}
        for n, c in coords.items():
            # Each grid value is a coordinate: a repeat would train the same runs twice and
            # `sel` could reach only the first.
            repeats = sorted({as_python(v) for i, v in enumerate(c) if values_match(c[:i], v).any()})
            if repeats:
                raise ValueError(
                    f"{n} lists {repeats} more than once; give each grid value once (num_seeds sets "
                    f"the repeats of every combination)."
                )
        dims = ("seed", *names)
        axes_out = {"seed": seeds, **coords}
        shape = tuple(len(axes_out[d]) for d in dims)
        values = {
            n: np.broadcast_to(coords[n].reshape([-1 if d == n else 1 for d in dims]), shape)
            for n in names
        }
    elif mode == "zip":
        if num_samples is not None:
            raise ValueError("num_samples is for mode='random'; zip takes the lists' common length.")
        coords = {n: _as_values(n, axes[n], dtypes[n]) for n in names}
        lengths = {n: len(v) for n, v in coords.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"mode='zip' pairs the i-th values of every axis, so all lists need the same length; "
                f"got lengths {lengths}. Use mode='grid' for every combination."
            )
        num_trials = next(iter(lengths.values()), 1)
        dims, axes_out = ("seed", "trial"), {"seed": seeds, "trial": np.arange(num_trials)}
        values = {n: np.broadcast_to(coords[n][None], (num_seeds, num_trials)) for n in names}
    elif mode == "random":
        if num_samples is None:
            raise ValueError("mode='random' needs num_samples >= 1 (the number of trials), got None.")
        if not is_int(num_samples):
            raise TypeError(f"num_samples must be an int (the number of random-search trials), got "
                            f"{num_samples!r} ({type(num_samples).__name__}).")
        if num_samples < 1:
            raise ValueError(
                f"mode='random' needs num_samples >= 1 (the number of trials), got {num_samples}."
            )
        if not names:
            raise ValueError(
                f"mode='random' needs at least one field spec to draw from, e.g. lr=(1e-5, 1e-3); "
                f"without one its {num_samples} trials would be the same run. To repeat the config "
                f"with different seeds, use num_seeds={num_samples} (in grid mode, with no axes)."
            )
        num_samples = int(num_samples)
        k = jax.random.fold_in(key, _RANDOM_SALT)
        draws = {n: _sample(n, axes[n], dtypes[n], num_samples, jax.random.fold_in(k, i))
                 for i, n in enumerate(names)}
        dims, axes_out = ("seed", "trial"), {"seed": seeds, "trial": np.arange(num_samples)}
        values = {n: np.broadcast_to(draws[n][None], (num_seeds, num_samples)) for n in names}
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
    for n in names:
        _validate_values(config, n, values[n], env_fields.get(n))
    return dims, axes_out, {n: np.ascontiguousarray(v) for n, v in values.items()}


