"""Jumanji's environments on our contract: `fusedrl.make("jumanji:Snake-v1")`.

The adapter wraps the suite's raw env (`jumanji.make(name)`, without its auto-reset wrappers):

- Observations: Jumanji's observation NamedTuple becomes a plain dict of its arrays (nested
  NamedTuples flattened, their names joined with "."), described by a gymnax `Dict` space; the
  action mask is the entry `"action_mask"` (bool). Dtypes are the suite's.
- Actions: a `DiscreteArray` is a `Discrete(n)`. A `MultiDiscreteArray` whose mask is over the joint
  action (a mask of shape `nvec`: Minesweeper's board cells, Tetris' (rotation, column), ...) is the
  `Discrete(prod(nvec))` of the flattened joint action, with the mask flattened to match; the one
  action is unravelled into the suite's components. Envs whose masks are per component (one mask
  row per agent or sub-action) need a factorised `MultiDiscrete(nvec)` space (`_FACTORISED`), their
  masks concatenated into one [sum(nvec)] bool vector.
- Episode ends: Jumanji merges them (a time limit ends the episode with `StepType.LAST`, and Snake,
  Maze, PacMan, Tetris, ... report it with discount 0, as a termination). Here the suite's own time
  limit is switched off (the env is built with `time_limit` at the int32 maximum) and the adapter
  counts steps itself: `max_steps_in_episode` (default: the suite's `time_limit`, or
  `_NO_TIME_LIMIT` for envs without one, which end on their own) gives truncation through
  `is_truncated`. A `LAST` step with discount 0 is a termination; one with discount > 0 (a suite's
  own truncation) is reported as truncated. Multi-agent envs' rewards are summed over agents and an
  episode terminates when every agent's discount is 0 (jumanji's `MultiToSingleWrapper` defaults).
- LevelBasedForaging, RobotWarehouse, Connector and Cleaner (`_MULTI_AGENT`) are not on this
  contract: `make_env` gives them on JaxMARL's multi-agent one (`fusedrl.envs._jumanji_marl`), whose
  agents the learners train as rows of one batch.
- Keys: Jumanji keeps its key inside its state: `reset_env` passes the key it is given to the suite's
  `reset`, and `step_env` ignores its key (`deterministic_step`), the suite drawing from the key in
  its state.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
from typing import Any

import jax
import jax.numpy as jnp
import jumanji
import numpy as np
from flax import struct
from jumanji import specs
from jumanji.types import StepType

from fusedrl.envs._gymnax import environment, spaces
from fusedrl.envs.base import Environment, MultiDiscrete

#: Envs that load their levels from the Hugging Face Hub on construction (no offline build).
_DOWNLOAD = {"Sokoban-v0": "it downloads DeepMind's Boxoban levels from the Hugging Face Hub when built"}

#: Envs whose action is a MultiDiscreteArray masked per component (agent or sub-action): a factorised
#: categorical, `fusedrl.envs.MultiDiscrete(nvec)`, with the mask of component i in 0..nvec[i]-1 and
#: the components' masks concatenated ([sum(nvec)] bool, the learners' convention).
_FACTORISED = ("JobShop-v0", "MMST-v0", "MultiCVRP-v0")

#: Multi-agent envs, on JaxMARL's multi-agent contract (`fusedrl.envs._jumanji_marl`): one row per agent.
_MULTI_AGENT = ("Cleaner-v0", "Connector-v3", "LevelBasedForaging-v0", "RobotWarehouse-v0")

#: Whether `_FACTORISED` envs are offered: set True once `fusedrl.envs.MultiDiscrete` is on main.
_MULTIDISCRETE_READY = False

#: Envs left out for another reason than their action space.
_UNSUPPORTED = {
    "SearchAndRescue-v0": "its rewards scale with the suite's own time limit (so the adapter cannot "
                          "own the limit) and its per-searcher rewards and views are not adapted",
}

#: Observation bounds the suite's specs get wrong: {(env, field): (low, high)}. TSP's `position` is -1
#: before the first city is chosen; its spec says 0..num_cities-1.
_BOUNDS = {("TSP-v1", "position"): (-1, 19)}

#: `max_steps_in_episode` for envs without a time limit of their own (they end on their own: a TSP
#: tour, a full 2048 board); a guard, not part of the task.
_NO_TIME_LIMIT = 10_000

#: The time limit the suite's env is built with: never reached, so the adapter's counter decides.
_SUITE_LIMIT_OFF = np.iinfo(np.int32).max


@struct.dataclass
class JumanjiParams(environment.EnvParams):
    max_steps_in_episode: int = _NO_TIME_LIMIT  # the adapter's time limit (the suite's is off)


@struct.dataclass
class JumanjiState(environment.EnvState):
    # time: int32 [], steps taken in this episode (gymnax's field)
    suite: Any  # the suite's own state (it holds the suite's key)
    suite_truncated: jax.Array  # bool []: the suite ended the episode with discount > 0


def _suite_ids() -> list[str]:
    return sorted(jumanji.registered_environments())


def env_names() -> list[str]:
    """Jumanji's ids that build offline and whose spaces map onto ours."""
    waiting = () if _MULTIDISCRETE_READY else _FACTORISED
    return [n for n in _suite_ids() if n not in _DOWNLOAD and n not in waiting and n not in _UNSUPPORTED]


def unavailable(name: str) -> str | None:
    """Why a Jumanji id is not offered (None for an offered or unknown one)."""
    if name in _DOWNLOAD:
        return (f"not available offline: {_DOWNLOAD[name]} (a download, which fusedrl does not make). "
                f"The Jumanji envs that build offline: {', '.join(env_names())}.")
    if name in _FACTORISED and not _MULTIDISCRETE_READY:
        return ("its MultiDiscrete action is masked per component, which needs a factorised action "
                "space (fusedrl.envs.MultiDiscrete) that this version does not have.")
    if name in _UNSUPPORTED:
        return f"not adapted: {_UNSUPPORTED[name]}."
    return None


def _build(name: str) -> tuple[Any, int]:
    """The suite's raw env `name` with its own time limit off, and that limit (or `_NO_TIME_LIMIT`)."""
    env = jumanji.make(name)
    limit = getattr(env, "time_limit", None)
    if limit is None:
        return env, _NO_TIME_LIMIT
    if "time_limit" not in inspect.signature(type(env)).parameters:
        raise TypeError(f"jumanji:{name}: {type(env).__name__} has a time_limit that its constructor "
                        f"does not take")
    return jumanji.make(name, time_limit=_SUITE_LIMIT_OFF), int(limit)


def make_env(name: str) -> Any:
    """The env `name`: a `JumanjiEnv`, or for a multi-agent env a `_jumanji_marl.JumanjiTeam`."""
    if name not in _suite_ids():
        near = difflib.get_close_matches(name, _suite_ids(), n=3, cutoff=0.0)
        raise ValueError(f"Unknown Jumanji env {name!r}; the closest are {near}.")
    why = unavailable(name)
    if why:
        raise ValueError(f"jumanji:{name}: {why}")
    if name in _MULTI_AGENT:
        from fusedrl.envs import _jumanji_marl

        return _jumanji_marl.make_env(name)
    suite, limit = _build(name)
    return JumanjiEnv(name, suite, limit)


# --- observations: NamedTuple <-> dict, specs -> gymnax spaces ---------------------------------


def _fields(spec) -> list[str]:
    """The field names of a composite spec (its value is a NamedTuple or a dataclass), in order."""
    value = spec.generate_value()
    if dataclasses.is_dataclass(value):
        return [f.name for f in dataclasses.fields(value)]
    return list(value._fields)


def _flatten(spec, value, prefix: str = "") -> dict[str, Any]:
    """{name: leaf} of a (nested) observation (or its spec when `value` is None), names joined by '.'."""
    if isinstance(spec, specs.Array):
        return {prefix: spec if value is None else value}
    out: dict[str, Any] = {}
    for f in _fields(spec):
        sub = None if value is None else getattr(value, f)
        out.update(_flatten(spec[f], sub, f"{prefix}.{f}" if prefix else f))
    return out


def _box(spec: specs.Array) -> spaces.Box:
    """A gymnax Box of a Jumanji array spec: its bounds where it has them, else the dtype's range."""
    dtype = jnp.dtype(spec.dtype)
    shape = tuple(spec.shape)
    if dtype == jnp.bool_:
        return spaces.Box(0, 1, shape, jnp.bool_)
    if isinstance(spec, specs.BoundedArray):
        low, high = np.asarray(spec.minimum), np.asarray(spec.maximum)
    elif jnp.issubdtype(dtype, jnp.integer):
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    else:
        low, high = -np.inf, np.inf
    return spaces.Box(jnp.broadcast_to(low, shape), jnp.broadcast_to(high, shape), shape, dtype)


# --- the env ------------------------------------------------------------------------------------


class JumanjiEnv(Environment):
    """One Jumanji env (built without its time limit) on our contract; see the module docstring.

    Observation: dict {field: array} (fields of the suite's observation, "action_mask" bool).
    Action: Discrete(n) (the suite's DiscreteArray, or the flattened joint MultiDiscreteArray).
    Reward: float32 [] (summed over agents for multi-agent envs).
    """

    deterministic_step = True  # the suite steps with the key kept in its state

    def __init__(self, name: str, suite, time_limit: int):
        super().__init__()
        self._name = name
        self.suite = suite
        self.time_limit = time_limit  # the suite's own limit, now the default max_steps_in_episode
        spec = suite.action_spec
        # nvec of a MultiDiscreteArray (or an integer BoundedArray: MultiCVRP), None for a DiscreteArray
        self._nvec = None
        if isinstance(spec, specs.DiscreteArray):
            self._kind = "discrete"
        elif isinstance(spec, specs.BoundedArray) and jnp.issubdtype(spec.dtype, jnp.integer):
            nvec = np.asarray(spec.maximum) - np.asarray(spec.minimum) + 1
            self._nvec = tuple(int(n) for n in np.broadcast_to(nvec, spec.shape).reshape(-1))
            self._kind = "factorised" if name in _FACTORISED else "joint"
        else:
            raise TypeError(f"jumanji:{name}: action spec {spec!r} has no mapping onto our action spaces")
        self._obs_specs = _flatten(suite.observation_spec, None)
        if self._kind == "joint" and "action_mask" in self._obs_specs:
            mask = self._obs_specs["action_mask"]
            if tuple(mask.shape) != self._nvec:
                raise TypeError(f"jumanji:{name}: action mask of shape {mask.shape} is not over the joint "
                                f"action {self._nvec}")
        if self._kind == "factorised" and "action_mask" in self._obs_specs:
            mask = self._obs_specs["action_mask"]
            if len(mask.shape) != 2 or mask.shape[0] != len(self._nvec):
                raise TypeError(f"jumanji:{name}: action mask of shape {mask.shape} is not one row per "
                                f"component of {self._nvec}")
            # The mask's width is the number of choices (MultiCVRP's action spec allows one more).
            self._nvec = (int(mask.shape[1]),) * len(self._nvec)

    @property
    def name(self) -> str:
        return f"jumanji:{self._name}"

    @property
    def default_params(self) -> JumanjiParams:
        return JumanjiParams(max_steps_in_episode=self.time_limit)

    def _obs(self, suite_obs) -> dict[str, jax.Array]:
        obs = _flatten(self.suite.observation_spec, suite_obs)
        if "action_mask" in obs:  # one flat vector: [n], [prod(nvec)] (joint) or [sum(nvec)] (factorised)
            obs["action_mask"] = jnp.asarray(obs["action_mask"], bool).reshape(-1)
        return obs

    def _suite_action(self, action: jax.Array) -> jax.Array:
        if self._kind == "joint":
            dtype = self.suite.action_spec.dtype
            return jnp.stack(jnp.unravel_index(action, self._nvec)).astype(dtype).reshape(
                self.suite.action_spec.shape)
        return action.astype(self.suite.action_spec.dtype)

    def reset_env(self, key, params):
        suite_state, timestep = self.suite.reset(key)
        state = JumanjiState(time=jnp.int32(0), suite=suite_state, suite_truncated=jnp.bool_(False))
        return self._obs(timestep.observation), state

    def step_env(self, key, state, action, params):
        suite_state, timestep = self.suite.step(state.suite, self._suite_action(action))
        last = timestep.step_type == StepType.LAST
        # Multi-agent envs: per-agent rewards summed; the episode goes on while any agent's does.
        reward = jnp.sum(timestep.reward).astype(jnp.float32)
        discount = jnp.max(timestep.discount)
        state = JumanjiState(time=state.time + 1, suite=suite_state, suite_truncated=last & (discount > 0))
        return self._obs(timestep.observation), state, reward, last & (discount == 0), {}

    def is_truncated(self, state, params):
        return (state.time >= params.max_steps_in_episode) | state.suite_truncated

    def observation_space(self, params) -> spaces.Dict:
        boxes = {k: _box(s) for k, s in self._obs_specs.items()}
        for (name, field), (low, high) in _BOUNDS.items():
            if name == self._name:
                box = boxes[field]
                boxes[field] = spaces.Box(low, high, box.shape, box.dtype)
        if "action_mask" in boxes:
            boxes["action_mask"] = spaces.Box(0, 1, (math.prod(boxes["action_mask"].shape),), jnp.bool_)
        return spaces.Dict(boxes)

    def action_space(self, params):
        if self._kind == "discrete":
            return spaces.Discrete(int(self.suite.action_spec.num_values))
        if self._kind == "joint":
            return spaces.Discrete(math.prod(self._nvec))

        return MultiDiscrete(np.asarray(self._nvec))


def native_stepper(name: str, num_envs: int):
    """Jumanji's own batched stepping of `name`, as a user of the suite writes it, for benchmarks.

    The suite's env (`jumanji.make(name)`, its own time limit on) under Jumanji's
    `VmapAutoResetWrapper` (vmapped step, auto-reset of finished envs inside the step).

    Args:
      name: a Jumanji id (one of `env_names()`).
      num_envs: envs stepped side by side.

    Returns:
      (init, step), pure and jittable: `init(key) -> carry`; `step(carry, action) -> (carry,
      reward)` with `action` [num_envs] int32 in our adapter's action space (for the flattened
      joint actions, unravelled here as the adapter does) and `reward` [num_envs] float32.
    """
    from jumanji.wrappers import VmapAutoResetWrapper

    env = make_env(name)  # for the action mapping and the checks on `name`
    batched = VmapAutoResetWrapper(jumanji.make(name))

    def init(key):
        state, _ = batched.reset(jax.random.split(key, num_envs))
        return state

    def step(carry, action):
        state, timestep = batched.step(carry, jax.vmap(env._suite_action)(action))
        reward = timestep.reward
        return state, jnp.sum(reward.reshape(num_envs, -1), axis=1).astype(jnp.float32)

    return init, step
