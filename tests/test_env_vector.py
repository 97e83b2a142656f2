"""VecEnv with env states that other JAX suites define, warnings that name the user's line, and the
rollout's choice of predrawn resets by their cost."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import fusedrl
from fusedrl.envs import Box, Discrete, Environment, EnvParams, EnvState, VecEnv, registry
from fusedrl.envs import wrappers as W


# A state whose class's own __eq__ cannot be used on pytrees of shapes ----------------------------
@struct.dataclass
class ElementwiseEqState(EnvState):
    """As navix's `Event`: `==` returns an array, which has no truth value."""

    pos: jax.Array  # [2] float32
    time: jax.Array  # [] int32

    def __eq__(self, other):
        return jnp.asarray(self.pos) == jnp.asarray(other.pos)


@struct.dataclass
class WalkParams(EnvParams):
    max_steps_in_episode: int = 3


class Walk(Environment):
    """Observation float32 [2]: the position. Action Discrete(2): move along x by -1/+1. Reward 0;
    episodes end by the time limit."""

    deterministic_step = True

    @property
    def default_params(self):
        return WalkParams()

    def _state(self, pos, time):
        return ElementwiseEqState(pos=pos, time=time)

    def reset_env(self, key, params):
        state = self._state(jax.random.uniform(key, (2,)), jnp.int32(0))
        return state.pos, state

    def step_env(self, key, state, action, params):
        pos = state.pos + jnp.stack([2.0 * action - 1.0, 0.0])
        state = self._state(pos, state.time + 1)
        return state.pos, state, jnp.float32(0.0), jnp.zeros((), bool), {}

    def get_obs(self, state, params=None, key=None):
        return state.pos

    def action_space(self, params=None):
        return Discrete(2)

    def observation_space(self, params=None):
        return Box(-jnp.inf, jnp.inf, (2,), jnp.float32)


@pytest.mark.timeout(60)
def test_predrawn_step_of_a_state_whose_eq_is_not_a_bool():
    # The draws check compared pytrees of shapes with !=, which called the state class's __eq__:
    # "truth value of an array ... is ambiguous".
    env, n = Walk(), 4
    vec = VecEnv(env, n)
    params = env.default_params

    def run(key):
        k_reset, k_draw = jax.random.split(key)
        _, vstate = vec.reset(k_reset, params)
        vstate = vstate.replace(env_state=vstate.env_state.replace(time=jnp.array([0, 1, 2, 2], jnp.int32)))
        draws = vec.predraw(k_draw, params, 2)
        obs, _, _, _, truncated, _ = vec.step(vstate, jnp.ones(n, jnp.int32), params, draws[0])
        return obs, truncated, draws.reset_obs[0]

    obs, truncated, fresh = jax.jit(run)(jax.random.key(0))
    np.testing.assert_array_equal(truncated, [False, False, True, True])
    np.testing.assert_array_equal(obs[2:], fresh[2:])  # the finished envs restart from their draws
    with pytest.raises(ValueError, match=r"ONE step's slice of predraw"):  # the check still works
        jax.eval_shape(lambda k: vec.step(vec.reset(k, params)[1], jnp.ones(n, jnp.int32), params,
                                          vec.predraw(k, params, 2)), jax.random.key(0))


# Overrides of step/reset: warned about only when they change the results -----------------------
class OldGymnaxAutoReset(Walk):
    """As envs derived from gymnax < 1.0 (Craftax): step and reset re-implement gymnax's auto-reset,
    returning (obs, state, reward, done, info)."""

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        key, key_reset = jax.random.split(key)
        obs_st, state_st, reward, done, info = self.step_env(key, state, action, params)
        done = done | self.is_truncated(state_st, params)
        obs_re, state_re = self.reset_env(key_reset, params)
        state = jax.tree.map(lambda x, y: jax.lax.select(done, x, y), state_re, state_st)
        return jax.lax.select(done, obs_re, obs_st), state, reward, done, info

    def reset(self, key, params=None):
        return self.reset_env(key, self.default_params if params is None else params)


class BonusInStep(OldGymnaxAutoReset):
    def step(self, key, state, action, params=None):
        obs, state, reward, done, info = super().step(key, state, action, params)
        return obs, state, reward + 1.0, done, info


class ShiftedReset(OldGymnaxAutoReset):
    def reset(self, key, params=None):
        obs, state = super().reset(key, params)
        state = state.replace(pos=state.pos + 5.0)
        return state.pos, state


@pytest.mark.timeout(60)
def test_an_override_that_only_reimplements_auto_reset_is_not_warned_about():
    # Every gymnax-derived third-party env with its own auto-reset was warned about, in vain.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        VecEnv(OldGymnaxAutoReset(), 4)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cls, method", [(BonusInStep, "step"), (ShiftedReset, "reset")])
def test_an_override_that_changes_the_results_is_warned_about(cls, method):
    with pytest.warns(UserWarning, match=rf"{cls.__name__} overrides {method} \(in {cls.__name__}\), which "
                                         rf"VecEnv, and so training and evaluation, never calls") as record:
        VecEnv(cls(), 4)
    assert len(record) == 1


# Warnings name the user's line, whichever path reaches them ---------------------------------------
@pytest.fixture
def private_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


class OneStepLimit(Walk):
    """Params that inherit gymnax's max_steps_in_episode = 1."""

    @property
    def default_params(self):
        return EnvParams()


def _filenames(record):
    return [w.filename for w in record]


@pytest.mark.timeout(60)
def test_warnings_point_at_the_users_call_through_make_and_through_a_traced_train(private_registry):
    # A fixed stacklevel named a line of fusedrl (ppo.py, wrappers.py) or jax when the same check was
    # reached through make_train or inside a traced train.
    fusedrl.register("OneStepLimit-v0", OneStepLimit)
    with pytest.warns(UserWarning, match="inherits gymnax's EnvParams default of 1") as direct:
        fusedrl.make("OneStepLimit-v0")
    with pytest.warns(UserWarning, match="inherits gymnax's EnvParams default of 1") as via_trainer:
        fusedrl.make_train(fusedrl.PPOConfig(env_id="OneStepLimit-v0", num_envs=2, num_steps=4,
                                             total_timesteps=8, num_minibatches=1, hidden_sizes=(4,)))
    assert _filenames(direct) == _filenames(via_trainer) == [__file__]

    fusedrl.register("BonusInStep-v0", BonusInStep)
    with pytest.warns(UserWarning, match="BonusInStep overrides step") as direct:
        VecEnv(BonusInStep(), 2)
    train = fusedrl.make_train(fusedrl.PPOConfig(env_id="BonusInStep-v0", num_envs=2, num_steps=4,
                                                 total_timesteps=8, num_minibatches=1, hidden_sizes=(4,)))
    with pytest.warns(UserWarning, match="BonusInStep overrides step") as traced:
        jax.eval_shape(train, jax.random.key(0))  # VecEnv is built inside the traced train
    assert set(_filenames(direct)) == set(_filenames(traced)) == {__file__}


# Predrawn resets by their cost ---------------------------------------------------------------------
class GeneratesAWorld(Walk):
    """Each reset generates a 256x256 world (as Craftax does) and starts at its brightest row."""

    def reset_env(self, key, params):
        world = jnp.cumsum(jax.random.uniform(key, (256, 256)), axis=1)
        start = world[jnp.argmax(world[:, -1])][:2] / 256.0
        state = ElementwiseEqState(pos=start, time=jnp.int32(0))
        return state.pos, state


class DeclaredExpensive(Walk):
    expensive_reset = True


class DeclaredCheap(GeneratesAWorld):
    expensive_reset = False


MAX_BYTES = 256 * 2**20


@pytest.mark.timeout(60)
def test_rollout_draws_predraws_cheap_resets_and_leaves_expensive_ones_to_the_reset_pool():
    cartpole, params = fusedrl.make("CartPole-v1")
    venv = W.EpisodeStatistics(VecEnv(cartpole, 4))  # forwarded by the wrappers, as predraw is
    key = jax.random.key(3)
    draws = venv.rollout_draws(key, params, 5, max_bytes=MAX_BYTES)
    want = venv.predraw(key, params, 5)
    for got, expected in zip(jax.tree.leaves(draws), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(got, expected)
    assert venv.rollout_draws(key, params, 5, max_bytes=venv.predraw_bytes(params, 5) - 1) is None

    for env, expensive in [(GeneratesAWorld(), True), (DeclaredExpensive(), True), (DeclaredCheap(), False),
                           (Walk(), False)]:
        vec = VecEnv(env, 4)
        assert vec.reset_is_expensive(env.default_params) == expensive, type(env).__name__
        draws = vec.rollout_draws(key, env.default_params, 5, max_bytes=MAX_BYTES)
        assert (draws is None) == expensive, type(env).__name__


@pytest.mark.timeout(60)
def test_rollout_draws_measures_inside_a_traced_function_and_the_rollout_steps_without_draws():
    class AnotherWorld(GeneratesAWorld):  # a class of its own: measured here, not from the cache
        pass

    env = AnotherWorld()
    vec = W.EpisodeStatistics(VecEnv(env, 4))

    def rollout(key, params):
        k_reset, k_draw = jax.random.split(key)
        obs, state = vec.reset(k_reset, params)
        draws = vec.rollout_draws(k_draw, params, 6, max_bytes=MAX_BYTES)
        assert draws is None
        for _ in range(6):
            obs, state, _, _, _, info = vec.step(state, jnp.ones(4, jnp.int32), params, draws)
        return obs, info["episode_done"]

    obs, done = jax.jit(rollout)(jax.random.key(0), env.default_params)
    assert done.all() and np.isfinite(obs).all()  # 6 steps: every env reset by its time limit (3)


@pytest.mark.subprocess
@pytest.mark.timeout(120)
def test_a_warning_from_python_c_names_the_command_line():
    # python -c (and a REPL) run in a __main__ whose loader has no source: the warning must still be
    # shown, naming the command's line.
    import subprocess
    import sys

    code = ("import fusedrl\n"
            "from fusedrl.envs import EnvParams, registry\n"
            "class OneStep(fusedrl.envs.CartPole):\n"
            "    default_params = property(lambda self: EnvParams())\n"
            "fusedrl.register('OneStep-v0', OneStep)\n"
            "fusedrl.make('OneStep-v0')\n")
    out = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True,
                         timeout=100)
    assert out.returncode == 0, out.stderr
    assert "<string>:6: UserWarning: OneStep-v0: EnvParams does not set max_steps_in_episode" in out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "CartPole-NoVelocity-v1", "Acrobot-v1", "MountainCar-v0",
                                    "MountainCarContinuous-v0", "Pendulum-v1"])
def test_our_envs_declare_the_reset_cost_that_is_measured(env_id):
    # Declared so that a run does not lower reset and step to measure it; the declaration must say
    # what the measurement would.
    from fusedrl.envs.vector import _measured_expensive_reset

    env, params = fusedrl.make(env_id)
    assert env.expensive_reset is not None, f"{env_id} does not declare expensive_reset"
    assert env.expensive_reset == _measured_expensive_reset(env, params)
