"""Probe environments: the smallest tasks whose right answer is known, so that "this learner learns"
is checked in seconds, each probe testing one part of it.

| id                                     | checks                        | the learned answer          |
| -------------------------------------- | ----------------------------- | --------------------------- |
| `probe:ConstantReward-v0`              | the value target and critic   | V(first obs) = 1            |
| `probe:ActionReward-v0`                | the policy gradient (discrete) | action 1 on cue +1, 0 on -1 |
| `probe:ContinuousActionReward-v0`      | the policy gradient (Box)     | action cue / 2              |
| `probe:TwoStep-v0`                     | credit assignment over time   | first action as the cue     |

Each episode ends by termination after one step (two for TwoStep); every optimal episode returns 1.
Each probe also has a time limit (`max_steps_in_episode`, 10) that its own episodes never reach,
so that truncation works as in any env. Steps are deterministic (`deterministic_step = True`);
resets draw the cue where there is one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs.base import Box, Discrete, Environment, EnvParams, EnvState


def _cue(key) -> jax.Array:
    """[] float32, -1 or +1 with equal probability."""
    return jnp.where(jax.random.bernoulli(key), 1.0, -1.0).astype(jnp.float32)


class _Probe(Environment):
    deterministic_step = True
    expensive_reset = False
    env_id = ""

    @property
    def name(self) -> str:
        return self.env_id

    def action_space(self, params=None) -> Discrete:
        return Discrete(2)


# ----------------------------------------------------------------------------- constant reward
@struct.dataclass
class ConstantRewardState(EnvState):
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class ConstantRewardParams(EnvParams):
    max_steps_in_episode: int = 10


class ConstantReward(_Probe):
    """Reward 1 for the one step of each episode, whatever the action: the critic must learn V = 1.

    Observation: float32 [1], the episode's time (0 where the agent acts).
    Action: int32 [], Discrete(2), ignored.
    Reward: 1.0. Terminated: after every step. Reset: always the same state.
    """

    env_id = "probe:ConstantReward-v0"

    @property
    def default_params(self) -> ConstantRewardParams:
        return ConstantRewardParams()

    def reset_env(self, key, params):
        state = ConstantRewardState(time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, jnp.float32(1.0), self.is_terminated(state, params), {}

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        return state.time[None].astype(jnp.float32)

    def is_terminated(self, state, params) -> jax.Array:
        return state.time >= 1

    def observation_space(self, params) -> Box:
        return Box(0.0, params.max_steps_in_episode, (1,), jnp.float32)


# ------------------------------------------------------------------------------- action reward
@struct.dataclass
class CueState(EnvState):
    cue: jax.Array  # [] float32, -1 or +1, drawn at reset
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class ActionRewardParams(EnvParams):
    max_steps_in_episode: int = 10


class ActionReward(_Probe):
    """One step: reward 1 for the action that matches the observed cue, 0 for the other.

    Observation: float32 [1], the cue (-1 or +1) where the agent acts, 0 after the step.
    Action: int32 [], Discrete(2): 1 matches cue +1, 0 matches cue -1.
    Reward: 1.0 if the action matches the cue, else 0.0. Terminated: after every step.
    Reset: the cue uniform in {-1, +1}.
    """

    env_id = "probe:ActionReward-v0"

    @property
    def default_params(self) -> ActionRewardParams:
        return ActionRewardParams()

    def reset_env(self, key, params):
        state = CueState(cue=_cue(key), time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        reward = (action == (state.cue > 0)).astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, reward, self.is_terminated(state, params), {}

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        return jnp.where(state.time == 0, state.cue, 0.0)[None].astype(jnp.float32)

    def is_terminated(self, state, params) -> jax.Array:
        return state.time >= 1

    def observation_space(self, params=None) -> Box:
        return Box(-1.0, 1.0, (1,), jnp.float32)


@struct.dataclass
class ContinuousActionRewardParams(EnvParams):
    max_steps_in_episode: int = 10


class ContinuousActionReward(ActionReward):
    """One step with a continuous action: reward 1 - (action - cue / 2)^2, best at action = cue / 2.

    Observation: as `ActionReward`'s. Action: float32 [1], Box(-1, 1): the target cue / 2 lies
    inside the bounds, so a Gaussian policy's mean can reach it. Reward: in [-1.25, 1].
    """

    env_id = "probe:ContinuousActionReward-v0"

    @property
    def default_params(self) -> ContinuousActionRewardParams:
        return ContinuousActionRewardParams()

    def step_env(self, key, state, action, params):
        reward = (1.0 - (action[0] - 0.5 * state.cue) ** 2).astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, reward, self.is_terminated(state, params), {}

    def action_space(self, params=None) -> Box:
        return Box(-1.0, 1.0, (1,), jnp.float32)


# ------------------------------------------------------------------------------------ two steps
@struct.dataclass
class TwoStepState(EnvState):
    cue: jax.Array  # [] float32, -1 or +1, drawn at reset
    matched: jax.Array  # [] bool, the first action matched the cue (False before it)
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class TwoStepParams(EnvParams):
    max_steps_in_episode: int = 10


class TwoStep(_Probe):
    """Two steps: the second step's reward depends on the first action, whose cue the second
    observation no longer shows, so the reward must be credited back through time.

    Observation: float32 [2]: [cue, 0] at the first step, [0, 1] at the second, [0, 0] after.
    Action: int32 [], Discrete(2): at the first step, 1 matches cue +1 and 0 matches cue -1; the
    second step's action is ignored.
    Reward: 0 for the first step; 1.0 for the second if the first action matched the cue, else 0.
    Terminated: after the second step. Reset: the cue uniform in {-1, +1}.
    """

    env_id = "probe:TwoStep-v0"

    @property
    def default_params(self) -> TwoStepParams:
        return TwoStepParams()

    def reset_env(self, key, params):
        state = TwoStepState(cue=_cue(key), matched=jnp.zeros((), bool), time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        first = state.time == 0
        matched = jnp.where(first, action == (state.cue > 0), state.matched)
        reward = jnp.where(first, 0.0, state.matched.astype(jnp.float32)).astype(jnp.float32)
        state = state.replace(matched=matched, time=state.time + 1)
        return self.get_obs(state), state, reward, self.is_terminated(state, params), {}

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        cue = jnp.where(state.time == 0, state.cue, 0.0)
        return jnp.stack([cue, (state.time == 1).astype(jnp.float32)]).astype(jnp.float32)

    def is_terminated(self, state, params) -> jax.Array:
        return state.time >= 2

    def observation_space(self, params=None) -> Box:
        return Box(-1.0, 1.0, (2,), jnp.float32)


#: {id: class} of the probes, in the order of the module's table; `fusedrl.envs` registers them.
PROBES = {cls.env_id: cls for cls in (ConstantReward, ActionReward, ContinuousActionReward, TwoStep)}
PROBE_IDS = tuple(PROBES)
