"""Host environments: Gymnasium envs named "gymnasium:<id>", described in fusedrl's terms.

`fusedrl.make("gymnasium:CartPole-v1")` returns `(HostEnv, None)`. A `HostEnv` is not a JAX
environment: it cannot be stepped inside `jit`. It carries what a learner needs to build its
networks (gymnax-style `action_space(params)` / `observation_space(params)` as fusedrl `Box` /
`Discrete`) and opens Gymnasium vector envs on the host (`make_vec`). `fusedrl.bridge` trains on
it: env steps on the host, policy and update jitted on the device.

Supported spaces (anything else is refused at `make`, naming the space):
  observations: `Box` of any shape (flattened to a vector), `Discrete` (one-hot encoded);
  actions: `Discrete` (any `start`), 1-D `Box`.

Gymnasium is an optional dependency, imported only when a "gymnasium:" id is used.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import numpy as np

from fusedrl.envs.base import Box, Discrete

SUPPORTED_SPACES = "observations: Box (one or more axes) or Discrete; actions: Discrete or 1-D Box"


#: The env id prefix of Gymnasium envs stepped on the host ("gymnasium:CartPole-v1").
GYMNASIUM_PREFIX = "gymnasium:"

class HostEnvError(RuntimeError):
    """A host (Gymnasium) environment failed: raised with the env id, chained to the cause."""


def is_host_env_id(env_id: Any) -> bool:
    """True for ids the host bridge handles ("gymnasium:<id>")."""
    return isinstance(env_id, str) and env_id.startswith(GYMNASIUM_PREFIX)


def _import_gymnasium():
    try:
        import gymnasium
    except ImportError as e:  # pragma: no cover - gymnasium is installed in dev environments
        raise ImportError(
            f"{GYMNASIUM_PREFIX!r} environment ids need Gymnasium: pip install 'gymnasium>=1.1'."
        ) from e
    return gymnasium


class HostEnv:
    """A Gymnasium environment id, described with fusedrl spaces; stepped on the host only.

    Attributes:
      env_id: the fusedrl id, "gymnasium:<gym id>".
      gym_id: the Gymnasium id.
      kwargs: keyword arguments for `gymnasium.make` (from `fusedrl.make(env_id, **kwargs)`).
      default_params: None (a host env has no traced params).
    """

    default_params = None
    #: Marks objects that `jit` cannot step; learners check it to pick the host bridge.
    runs_on_host = True

    def __init__(self, env_id: str, gym_id: str, kwargs: dict[str, Any], obs_space, act_space,
                 max_episode_steps: int | None):
        self.env_id = env_id
        self.gym_id = gym_id
        self.kwargs = dict(kwargs)
        self.gym_observation_space = obs_space  # the Gymnasium single-env spaces
        self.gym_action_space = act_space
        self.max_episode_steps = max_episode_steps
        self._obs_kind = _check_obs_space(env_id, obs_space)
        self._act_kind = _check_action_space(env_id, act_space)

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def obs_dim(self) -> int:
        """Length of the flat float32 observation the policy sees."""
        space = self.gym_observation_space
        return int(space.n) if self._obs_kind == "discrete" else int(math.prod(space.shape))

    def observation_space(self, params=None) -> Box:
        """The flat float32 observation the policy sees (one-hot for Discrete observations)."""
        space = self.gym_observation_space
        if self._obs_kind == "discrete":
            return Box(0.0, 1.0, (self.obs_dim,), np.float32)
        low = np.asarray(space.low, np.float32).reshape(-1)
        high = np.asarray(space.high, np.float32).reshape(-1)
        return Box(low, high, (self.obs_dim,), np.float32)

    def action_space(self, params=None):
        space = self.gym_action_space
        if self._act_kind == "discrete":
            return Discrete(int(space.n))
        return Box(np.asarray(space.low, np.float32), np.asarray(space.high, np.float32),
                   tuple(space.shape), np.float32)

    # ------------------------------------------------------------------------------ host side
    def make_vec(self, num_envs: int):
        """A `gymnasium.vector.SyncVectorEnv` of `num_envs` copies in same-step autoreset mode.

        Same-step mode makes a finished env reset inside the step that ended its episode and
        report the observation before the reset in `info["final_obs"]`, as fusedrl's own envs do.
        """
        gym = _import_gymnasium()
        mode = gym.vector.AutoresetMode.SAME_STEP

        def make_one():
            return gym.make(self.gym_id, **self.kwargs)

        try:
            return gym.vector.SyncVectorEnv([make_one] * int(num_envs), autoreset_mode=mode)
        except Exception as e:
            raise HostEnvError(f"{self.env_id}: creating {num_envs} environments failed: {e}") from e

    def encode_obs(self, obs) -> np.ndarray:
        """Batched Gymnasium observations [N, ...] -> flat float32 [N, obs_dim] (one-hot if Discrete)."""
        obs = np.asarray(obs)
        if self._obs_kind == "discrete":
            start = int(getattr(self.gym_observation_space, "start", 0))
            return np.eye(self.obs_dim, dtype=np.float32)[obs.astype(np.int64) - start]
        return obs.reshape(obs.shape[0], -1).astype(np.float32, copy=False)

    def decode_action(self, action) -> np.ndarray:
        """Policy actions [N, ...] -> what the vector env's `step` takes (offset, clipped to bounds)."""
        action = np.asarray(action)
        space = self.gym_action_space
        if self._act_kind == "discrete":
            return action.astype(np.int64) + int(getattr(space, "start", 0))
        return np.clip(action, space.low, space.high).astype(space.dtype, copy=False)

    # --------------------------------------------------------------------- not a JAX env
    def _not_jax(self, *args, **kwargs):
        raise TypeError(
            f"{self.env_id} is a Gymnasium environment stepped on the host: it has no JAX "
            f"reset/step and cannot run inside jit. Train it with fusedrl.make_train(config) "
            f"(the host bridge, fusedrl.bridge), or open it with env.make_vec(num_envs)."
        )

    reset = step = reset_env = step_env = _not_jax

    def __repr__(self) -> str:
        return f"HostEnv({self.env_id!r})"


def _space_name(space) -> str:
    return f"{type(space).__name__} ({space})"


def _check_obs_space(env_id: str, space) -> str:
    gym = _import_gymnasium()
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box) and len(space.shape) >= 1:
        return "box"
    raise ValueError(
        f"{env_id}: unsupported observation space {_space_name(space)}. The host bridge supports "
        f"{SUPPORTED_SPACES}. Wrap the env (e.g. gymnasium.wrappers.FlattenObservation for "
        f"Dict/Tuple observations) and register the wrapped env under a new id."
    )


def _check_action_space(env_id: str, space) -> str:
    gym = _import_gymnasium()
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return "box"
    raise ValueError(
        f"{env_id}: unsupported action space {_space_name(space)}. The host bridge supports "
        f"{SUPPORTED_SPACES} (PPO's Categorical and diagonal Gaussian policies)."
    )


def gymnasium_ids() -> list[str]:
    """Every id in Gymnasium's registry, with the "gymnasium:" prefix."""
    gym = _import_gymnasium()
    return [GYMNASIUM_PREFIX + i for i in gym.envs.registry]


def make_host_env(env_id: str, **kwargs) -> tuple[HostEnv, None]:
    """`fusedrl.make` for "gymnasium:<id>": checks the id and the spaces, returns (HostEnv, None).

    Args:
      env_id: "gymnasium:<id>", e.g. "gymnasium:CartPole-v1".
      **kwargs: passed to `gymnasium.make` (e.g. max_episode_steps=200).

    Raises:
      ValueError: the id is not registered in Gymnasium (lists close matches), or a space is not
        supported (names it).
      HostEnvError: Gymnasium could not build the env (e.g. a missing optional dependency).
    """
    gym = _import_gymnasium()
    gym_id = env_id[len(GYMNASIUM_PREFIX):]
    # "module:EnvId": gym.make imports the module, which registers the id, then makes it.
    if ":" not in gym_id and gym_id not in gym.envs.registry:
        valid = gymnasium_ids()
        close = difflib.get_close_matches(env_id, valid, n=5, cutoff=0.6)
        hint = f" Close matches: {', '.join(close)}." if close else ""
        raise ValueError(
            f"Unknown Gymnasium environment id {env_id!r}: {gym_id!r} is not registered in "
            f"Gymnasium {gym.__version__}.{hint} Gymnasium's ids are listed by "
            f"gymnasium.pprint_registry(); register your own with gymnasium.register(...)."
        )
    try:
        env = gym.make(gym_id, **kwargs)
    except Exception as e:
        raise HostEnvError(f"{env_id}: gymnasium.make({gym_id!r}) failed: {type(e).__name__}: {e}") from e
    try:
        obs_space, act_space = env.observation_space, env.action_space
        max_steps = env.spec.max_episode_steps if env.spec is not None else None
    finally:
        env.close()
    return HostEnv(env_id, gym_id, kwargs, obs_space, act_space, max_steps), None


__all__ = [
    "GYMNASIUM_PREFIX",
    "SUPPORTED_SPACES",
    "HostEnv",
    "HostEnvError",
    "gymnasium_ids",
    "is_host_env_id",
    "make_host_env",
]
