"""`make` and `register`: environment ids to (env, params)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from fusedrl._warnings import warn_user
from fusedrl.envs import suites
from fusedrl.envs._gymnax import environment
from fusedrl.envs.host import GYMNASIUM_PREFIX, is_host_env_id, make_host_env
from fusedrl.envs.multiagent import check_multi_agent_env, is_multi_agent

GYMNAX_PREFIX = "gymnax:"

_REGISTRY: dict[str, Callable[..., Any]] = {}

#: Called with the env id whenever `register` adds or replaces an env: modules that cache compiled
#: programs per `PPOConfig` (which names the env by id only) drop them, so that a replaced env is
#: never trained or evaluated through a program built from the env it replaced.
_ON_REGISTER: list[Callable[[str], None]] = []


def on_register(hook: Callable[[str], None]) -> Callable[[str], None]:
    """Adds `hook(env_id)`, called after every `register` (see `_ON_REGISTER`); returns it."""
    _ON_REGISTER.append(hook)
    return hook


def register(env_id: str, factory: Callable[[], Any], *, overwrite: bool = False) -> None:
    """Registers `factory() -> env` under `env_id`, for `fusedrl.make(env_id, **overrides)`.

    `factory` takes no arguments: `make`'s keyword arguments change the env's params (fields of
    its `default_params`), not how it is built. The env must follow the gymnax contract (`reset`,
    `step`, `default_params`, spaces): a subclass of gymnax's `Environment`, see `check_env_interface`;
    or JaxMARL's multi-agent contract (`agents`, `reset(key)`, `step_env(key, state, actions)`, per-agent
    spaces; see `fusedrl.envs.multiagent`), whose agents the learners train as rows of one batch.
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id must be a non-empty string, got {env_id!r}.")
    reserved = [(GYMNAX_PREFIX, "gymnax"), (GYMNASIUM_PREFIX, "Gymnasium (the host bridge)")]
    reserved += [(f"{p}:", f"the {p} suite") for p in suites.SUITES]
    for prefix, owner in reserved:
        if env_id.startswith(prefix):
            raise ValueError(f"ids starting with {prefix!r} are reserved for {owner} environments; "
                             f"register {env_id[len(prefix):]!r} instead.")
    if not callable(factory):
        if hasattr(factory, "step_env") or hasattr(factory, "reset_env"):  # an env built already
            hint = (f" register the class, not an instance: fusedrl.register({env_id!r}, "
                    f"{type(factory).__name__}) (make builds it with {type(factory).__name__}()).")
        elif isinstance(factory, str):
            hint = f" register the class (or a function that builds the env), not its name {factory!r}."
        else:
            hint = " register the env's class (or a function with no arguments that builds the env)."
        raise TypeError(f"factory for {env_id!r} must be callable, got {type(factory).__name__}:{hint}")
    if env_id in _REGISTRY and not overwrite:
        raise ValueError(f"{env_id!r} is already registered; pass overwrite=True to replace it.")
    _REGISTRY[env_id] = factory
    for hook in _ON_REGISTER:
        hook(env_id)


# What the trainer and VecEnv call on an env. gymnax's Environment (and fusedrl.envs.Environment,
# its subclass) provides reset, step, is_truncated and name on top of a subclass's methods.
ENV_INTERFACE = ("reset_env", "step_env", "is_truncated", "name", "observation_space", "action_space",
                 "default_params")


def check_env_interface(env_id: str, env: Any) -> None:
    """TypeError naming what a registered env lacks of `ENV_INTERFACE`, and the fix."""
    missing = [name for name in ENV_INTERFACE if not hasattr(env, name)]
    if missing:
        raise TypeError(
            f"{env_id!r} built a {type(env).__name__}, which lacks {', '.join(missing)}. Subclass "
            f"fusedrl.envs.Environment (or gymnax's Environment), which provides reset, step, is_truncated "
            f"and name, and implement reset_env, step_env, observation_space, action_space and "
            f"default_params."
        )
    # gymnax's base class defines these only to raise a bare NotImplementedError (reset_env/step_env
    # while tracing); say which ones the env did not implement (e.g. a `step` override in its place).

    base = environment.Environment
    for names, use in (
        (("observation_space", "action_space", "default_params"),
         "The learners read observation_space(params) and action_space(params) (gymnax spaces: Box, "
         "Discrete, Dict of Boxes; fusedrl.envs.MultiDiscrete) to size the network and default_params "
         "(a flax.struct.dataclass, e.g. a subclass of fusedrl.envs.EnvParams) for the env's params."),
        (("reset_env", "step_env"),
         "The learners call reset_env(key, params) -> (obs, state) and step_env(key, state, action, "
         "params) -> (obs, state, reward, terminated, info) on each env, and take truncation from "
         "is_truncated(state, params) (by default state.time >= params.max_steps_in_episode); the env's "
         "own reset/step are not used."),
    ):
        missing = [name for name in names if getattr(type(env), name, None) is getattr(base, name)]
        if missing:
            raise TypeError(f"{env_id!r} built a {type(env).__name__}, which does not implement "
                            f"{' and '.join(missing)}. {use}")


def _warn_inherited_time_limit(env_id: str, env: Any, params: Any) -> None:
    """Warns when a registered env's params inherit gymnax's `EnvParams.max_steps_in_episode = 1`
    and its truncation rule is gymnax's default: every episode would then be cut after one step,
    silently (training runs, `episode_length` is 1)."""
    if getattr(type(env), "is_truncated", None) is not environment.Environment.is_truncated:
        return
    if not hasattr(params, "max_steps_in_episode"):  # it would fail at the first step, inside gymnax
        raise TypeError(
            f"{env_id}: {type(params).__name__} has no max_steps_in_episode, which the default "
            f"is_truncated reads (state.time >= params.max_steps_in_episode). Declare "
            f"`max_steps_in_episode: int = <time limit>` in it (a subclass of fusedrl.envs.EnvParams "
            f"has the field), or override is_truncated."
        )
    # The field object itself is gymnax's unless a subclass declares the field again (read from the
    # dataclass fields, not from __annotations__, which Python 3.14 no longer keeps in the class dict).
    field = getattr(type(params), "__dataclass_fields__", {}).get("max_steps_in_episode")
    own = field is not environment.EnvParams.__dataclass_fields__["max_steps_in_episode"]
    if not own and getattr(params, "max_steps_in_episode", None) == 1:  # not overridden in make either
        warn_user(
            f"{env_id}: {type(params).__name__} does not set max_steps_in_episode, so it inherits "
            f"gymnax's EnvParams default of 1: every episode is truncated after one step. Declare "
            f"`max_steps_in_episode: int = <time limit>` in {type(params).__name__} (or override "
            f"is_truncated).",
            UserWarning,
        )


def registered_ids(include_gymnax: bool = True, include_suites: bool = False) -> list[str]:
    """Our ids, then every gymnax id with the `gymnax:` prefix, then (with `include_suites`) the ids
    of every installed env suite ("brax:ant", ...; `fusedrl.envs.suites`)."""
    ids = list(_REGISTRY)
    if include_gymnax:
        import gymnax  # start-up time: gymnax's env families take seconds to import

        ids += [GYMNAX_PREFIX + i for i in gymnax.registered_envs]
    if include_suites:
        for prefix in suites.SUITES:
            if suites.is_installed(prefix):
                ids += suites.env_ids(prefix)
    return ids


def _make_suite_env(env_id: str, prefix: str, name: str) -> Any:
    """The env of a suite id ("brax:ant") that `check_env_id` accepted."""
    env = suites.make_env(prefix, name)

    if is_multi_agent(env):
        check_multi_agent_env(env_id, env)
        return env
    check_env_interface(env_id, env)
    return env


def _unknown_prefix(env_id: str) -> ValueError:
    prefix = env_id.partition(":")[0]
    listing = ", ".join(f"{p}:" for p in suites.known_prefixes())
    near = difflib.get_close_matches(prefix.lower(), suites.known_prefixes(), n=1, cutoff=0.6)
    hint = f" Did you mean {near[0] + ':'!r}?" if near else ""
    return ValueError(f"Unknown environment suite {prefix + ':'!r} in {env_id!r}.{hint} Known prefixes: "
                      f"{listing} (and ids you register, which may contain ':'). `fusedrl envs` lists "
                      f"every id.")


def _unknown(env_id: str, valid: list[str]) -> ValueError:
    register_hint = ("Use fusedrl.register(...) to add your own (on the command line, --import MODULE "
                     "imports the module that registers it).")
    # A typo first: the ids close to it (case aside), and the full list only when none is.
    by_lower = {v.lower(): v for v in valid}
    near = [by_lower[v] for v in difflib.get_close_matches(env_id.lower(), by_lower, n=3, cutoff=0.6)]
    if near:
        others = f" (or {', '.join(map(repr, near[1:]))})" if len(near) > 1 else ""
        return ValueError(
            f"Unknown environment id {env_id!r}: did you mean {near[0]!r}?{others} "
            f"{_gymnasium_hint(env_id)}`fusedrl envs` lists every id. {register_hint}"
        )
    close = difflib.get_close_matches(env_id, valid, n=len(valid), cutoff=0.0)
    return ValueError(
        f"Unknown environment id {env_id!r}. {_gymnasium_hint(env_id)}Valid ids, closest first: "
        f"{', '.join(close)}. {register_hint}"
    )


def _gymnasium_hint(env_id: str) -> str:
    """A pointer to the host bridge when `env_id` is a Gymnasium id (if Gymnasium is installed)."""
    try:
        import gymnasium
    except ImportError:
        return ""
    if env_id in gymnasium.envs.registry:
        return (f"Gymnasium has it: {GYMNASIUM_PREFIX + env_id!r} trains it through the host bridge "
                f"(its envs step on the host). ")
    return ""


_INT32_MAX = 2**31 - 1

#: gymnax params that its defaults compute from others but that are stored, and used by its step
#: as stored: {env id: {derived param: (its value from the params, the params it comes from)}}.
#: `make` computes them again when one of their sources is overridden; a sweep refuses sweeping a
#: source alone (the traced params are not recomputed).
GYMNAX_DERIVED_PARAMS = {
    "gymnax:CartPole-v1": {
        "total_mass": (lambda p: p.masscart + p.masspole, ("masscart", "masspole")),
        "polemass_length": (lambda p: p.masspole * p.length, ("masspole", "length")),
    },
}


def check_env_param(env_id: str, name: str, value: Any, default: Any) -> Any:
    """`value` for the env param `name` (whose default is `default`), as the params will hold it;
    a value the env cannot use as given is an error naming the param and the fix. `make` checks its
    overrides with it, and `fusedrl.sweep` each value of an env-param axis."""
    default_shape = np.shape(default)
    if default_shape != () and np.shape(value) != default_shape:  # the env indexes it: a scalar fails there
        raise ValueError(f"{env_id}: env param {name} is an array of shape {default_shape} (default "
                         f"{np.asarray(default).tolist()}), got {value!r}; give an array of that shape "
                         f"(fusedrl.make), not a number.")
    if default_shape != () or isinstance(value, jax.core.Tracer):
        return value  # an array-valued param, or a traced value: nothing to check here
    kind = np.asarray(default).dtype.kind
    try:
        v = np.asarray(value)
    except Exception:  # noqa: BLE001
        v = None
    if v is None or v.shape != () or v.dtype.kind not in "biuf":
        raise TypeError(f"{env_id}: env param {name} must be a number (its default is {default!r}), "
                        f"got {value!r} ({type(value).__name__}).")
    if kind == "b":
        if v.dtype.kind != "b":
            raise TypeError(f"{env_id}: env param {name} must be True or False, got {value!r}.")
        return bool(v)
    if v.dtype.kind == "b":
        raise TypeError(f"{env_id}: env param {name} must be a number, got {value!r}.")
    x = float(v)
    if x != x:  # NaN: no physics; it would train and evaluate to NaN without an error (inf may be a
        # limit that never binds, e.g. CartPole's x_threshold)
        raise ValueError(f"{env_id}: env param {name} must be a number, got NaN; give it a value "
                         f"(or leave it out for the env's default).")
    if kind in "iu":  # an integer param (a time limit, a count): a whole number that fits int32
        if not math.isfinite(x) or x != int(x):
            raise ValueError(f"{env_id}: env param {name} is an integer (default {default!r}), got "
                             f"{value!r}; give a whole number.")
        if not -_INT32_MAX <= x <= _INT32_MAX:
            raise ValueError(f"{env_id}: env param {name}={value!r} does not fit in int32 (the envs' "
                             f"integer type): give a value of at most {_INT32_MAX:,}.")
        if name == "max_steps_in_episode" and x < 1:
            raise ValueError(f"{env_id}: env param max_steps_in_episode must be >= 1 (the episode's time "
                             f"limit in steps), got {value!r}.")
        return int(x)
    return value if isinstance(value, int | float) else x


def check_env_id(env_id: str) -> None:
    """Raises, for an id that names no environment, the error `make` gives (it runs this check first):
    the closest ids, a suite's install command or why an id is not offered; builds nothing. A
    "gymnasium:" id is left to `make` (Gymnasium resolves it)."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string, got {type(env_id).__name__}.")
    if env_id in _REGISTRY or env_id.startswith(GYMNASIUM_PREFIX):
        return
    if env_id.startswith(GYMNAX_PREFIX):
        import gymnax  # start-up time: gymnax's env families take seconds to import

        if env_id[len(GYMNAX_PREFIX):] not in gymnax.registered_envs:
            raise _unknown(env_id, registered_ids())
    elif suite := suites.split_id(env_id):
        prefix, name = suite
        module = suites.adapter(prefix)  # not installed: the error names the install command
        if name not in module.env_names():
            why = getattr(module, "unavailable", lambda name: None)(name)
            raise ValueError(f"{env_id}: {why}") if why else _unknown(env_id, suites.env_ids(prefix))
    else:
        prefix = env_id.partition(":")[0] + ":"
        if ":" in env_id and prefix[:-1] not in suites.known_prefixes() and not any(
                i.startswith(prefix) for i in _REGISTRY):
            raise _unknown_prefix(env_id)
        raise _unknown(env_id, registered_ids())


#: Ids that `fusedrl envs` leaves out unless --all: test envs (the probes, Brax's trivial `fast`).
HIDDEN_PREFIXES = ("probe:",)
HIDDEN_IDS = ("brax:fast",)


def is_public(env_id: str) -> bool:
    """Whether `fusedrl envs` lists `env_id` by default: not a test env (`HIDDEN_PREFIXES`,
    `HIDDEN_IDS`); the probes and `brax:fast` still build with `make`."""
    return env_id not in HIDDEN_IDS and not env_id.startswith(HIDDEN_PREFIXES)


def _multi_agent(env_id: str, env: Any, overrides) -> tuple[Any, None]:
    """(env, None) for a multi-agent env, which has no params: overrides are refused."""
    if overrides:
        raise TypeError(f"{env_id} is a multi-agent env (JaxMARL's contract), which has no params to "
                        f"override ({sorted(overrides)}): build it with its settings in the factory "
                        f"you register, e.g. functools.partial(MyEnv, max_steps=50).")
    return env, None


def make(env_id: str, **overrides) -> tuple[Any, Any]:
    """Builds an environment and its default params.

    Args:
      env_id: one of ours ("CartPole-v1", ...), or any gymnax id prefixed with "gymnax:"
        (e.g. "gymnax:Breakout-MinAtar"), an env of an installed suite ("brax:ant", "jumanji:Snake-v1",
        ...; `fusedrl.envs.suites`), or any Gymnasium id prefixed with "gymnasium:"
        (a host env: returns (HostEnv, None); its overrides go to gymnasium.make).
      **overrides: env params to change from their defaults (e.g. gravity=12.0). Names that are not
        fields of the env's params raise an error listing the valid ones.

    Returns:
      (env, env_params).
    """
    check_env_id(env_id)  # an id that names no env: the error names the closest ids or the fix
    # --- host bridge: "gymnasium:<id>" is a Gymnasium env stepped on the host (envs/host.py).
    if env_id.startswith(GYMNASIUM_PREFIX):
        return make_host_env(env_id, **overrides)
    # --- end host bridge
    if env_id.startswith(GYMNAX_PREFIX):
        import gymnax  # start-up time: gymnax's env families take seconds to import

        env, params = gymnax.make(env_id[len(GYMNAX_PREFIX) :])
    elif env_id not in _REGISTRY and (suite := suites.split_id(env_id)):
        env = _make_suite_env(env_id, *suite)
        if not hasattr(env, "default_params"):  # a multi-agent env (jaxmarl:): no params
            return _multi_agent(env_id, env, overrides)
        params = env.default_params
    else:
        env = _REGISTRY[env_id]()

        if is_multi_agent(env):  # JaxMARL's MultiAgentEnv contract: no params (fusedrl.envs.multiagent)
            check_multi_agent_env(env_id, env)
            return _multi_agent(env_id, env, overrides)
        check_env_interface(env_id, env)
        params = env.default_params
    return env, with_env_params(env_id, env, params, **overrides)


def with_env_params(env_id: str, env, params, **overrides):
    """`params` (the params of `env`, built by `make(env_id)`) with `overrides` applied, checked as
    `make` checks them: what a caller that already holds the env uses to change its params without
    building the env again (a JAX env's object does not depend on its params)."""
    if overrides:
        if not hasattr(params, "__dataclass_fields__"):
            raise TypeError(
                f"{env_id}: its default_params is a {type(params).__name__}, not a dataclass, so its params "
                f"cannot be overridden ({sorted(overrides)}): make it a flax.struct.dataclass (e.g. a "
                f"subclass of fusedrl.envs.EnvParams)."
            )
        fields = set(getattr(params, "__dataclass_fields__", {}))
        bad = sorted(set(overrides) - fields)
        if bad:
            raise ValueError(
                f"{env_id}: unknown env param(s) {bad}; valid params are {sorted(fields)}."
            )
        params = params.replace(**{k: check_env_param(env_id, k, v, getattr(params, k))
                                   for k, v in overrides.items()})
        for derived, (value, sources) in GYMNAX_DERIVED_PARAMS.get(env_id, {}).items():
            if derived not in overrides and any(name in overrides for name in sources):
                params = params.replace(**{derived: value(params)})
    if not env_id.startswith(GYMNAX_PREFIX):
        _warn_inherited_time_limit(env_id, env, params)  # an override may set the time limit
    return params


def jax_twin(env_id: str) -> str | None:
    """The JAX env fusedrl registers under the Gymnasium id of "gymnasium:<id>" (e.g. "CartPole-v1"
    for "gymnasium:CartPole-v1"), or None: what to suggest when a host env cannot do what JAX
    envs can (many seeds in one program, sweeps)."""
    if not is_host_env_id(env_id):
        return None
    name = env_id.split(":", 1)[1]
    return name if name in registered_ids(include_gymnax=False) else None


def jax_instead(env_id: str) -> str:
    """What a refusal of host env `env_id` suggests using instead, as a phrase: its `jax_twin`
    ("fusedrl's JAX version, 'CartPole-v1',") when fusedrl has one, else any JAX env id."""
    twin = jax_twin(env_id)
    return f"fusedrl's JAX version, {twin!r}," if twin else "a JAX env id (see `fusedrl envs`)"
