"""Bad input to the env API fails at once, with a message naming the problem and the valid choices.

The checks run in Python at trace time, before anything is compiled; states are built from
`jax.eval_shape`, so these tests compile nothing.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl
from fusedrl.envs import Discrete, VecEnv, registry

OUR_IDS = fusedrl.registered_ids(include_gymnax=False)
NUM_ENVS = 4


def _placeholder(tree_of_shapes):
    """Concrete arrays with the given shapes and dtypes (keys become real keys)."""

    def make(s):
        if jnp.issubdtype(s.dtype, jax.dtypes.prng_key):
            return jax.random.split(jax.random.key(0), s.shape) if s.shape else jax.random.key(0)
        return np.zeros(s.shape, s.dtype)

    return jax.tree.map(make, tree_of_shapes)


def _state(env, params):
    return _placeholder(jax.eval_shape(env.reset_env, jax.random.key(0), params)[1])


def _vec_state(vec, params):
    return _placeholder(jax.eval_shape(vec.reset, jax.random.key(0), params)[1])


def _listed_ids(message):
    return re.search(r"closest first: (.*?)\. Use", message).group(1).split(", ")


# Unknown ids and params ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "typo, closest",
    [
        ("CartPole-v0", "CartPole-v1"),
        ("Pendulum-v0", "Pendulum-v1"),
        ("MountainCarContinuous", "MountainCarContinuous-v0"),
        ("gymnax:Breakout-MinAtr", "gymnax:Breakout-MinAtar"),
    ],
)
def test_unknown_id_suggests_the_closest_first(typo, closest):
    expected = f"Unknown environment id {typo!r}: did you mean {closest!r}?"
    with pytest.raises(ValueError, match=re.escape(expected)) as exc:
        fusedrl.make(typo)
    assert "closest first" not in str(exc.value)  # a typo gets its fix, not the 40 ids


def test_unknown_id_far_from_every_id_lists_them_all():
    with pytest.raises(ValueError, match="Unknown environment id 'Zzz'. Valid ids") as exc:
        fusedrl.make("Zzz")
    assert sorted(_listed_ids(str(exc.value))) == sorted(fusedrl.registered_ids())


def test_unknown_id_known_to_gymnasium_points_to_the_bridge():
    with pytest.raises(ValueError, match="'gymnasium:FrozenLake-v1' trains it through the host bridge"):
        fusedrl.make("FrozenLake-v1")
    with pytest.raises(ValueError) as exc:
        fusedrl.make("CartPol-v1")  # not a Gymnasium id either: no pointer
    assert "gymnasium:" not in str(exc.value)


@pytest.mark.parametrize("prefix", ["gymnax:", "gymnasium:"])
def test_register_refuses_the_reserved_prefixes(prefix):
    with pytest.raises(ValueError, match=f"ids starting with '{prefix}' are reserved.*register 'Mine-v0'"):
        fusedrl.register(f"{prefix}Mine-v0", lambda: None)
    assert f"{prefix}Mine-v0" not in fusedrl.registered_ids()


def test_non_string_id_is_a_type_error():
    with pytest.raises(TypeError, match="env_id must be a string"):
        fusedrl.make(1)


@pytest.mark.parametrize("env_id", OUR_IDS)
def test_unknown_param_override_lists_valid_params(env_id):
    with pytest.raises(ValueError, match=re.escape(f"{env_id}: unknown env param(s) ['bogus']")) as exc:
        fusedrl.make(env_id, bogus=1)
    _, params = fusedrl.make(env_id)
    for field in dataclasses.fields(params):
        assert repr(field.name) in str(exc.value)


def test_known_param_override_is_applied():
    _, params = fusedrl.make("Pendulum-v1", g=9.81, max_steps_in_episode=50)
    assert params.g == 9.81 and params.max_steps_in_episode == 50


@pytest.mark.parametrize("env_id", ["CartPole-v1", "gymnax:CartPole-v1"])
@pytest.mark.parametrize("override, exc, words", [
    (dict(gravity="abc"), TypeError, "env param gravity must be a number (its default is 9.8), got 'abc'"),
    (dict(gravity=None), TypeError, "env param gravity must be a number"),
    (dict(gravity=float("nan")), ValueError, "env param gravity must be a number, got NaN"),
    (dict(max_steps_in_episode=float("inf")), ValueError, "env param max_steps_in_episode is an integer"),
    (dict(gravity=True), TypeError, "env param gravity must be a number, got True"),
    # An integer param: 10.7 trained 11-step episodes, 0 and -5 one-step episodes, 2**32 + 5 five.
    (dict(max_steps_in_episode=10.7), ValueError,
     "env param max_steps_in_episode is an integer (default 500), got 10.7"),
    (dict(max_steps_in_episode=0), ValueError, "env param max_steps_in_episode must be >= 1"),
    (dict(max_steps_in_episode=-5), ValueError, "env param max_steps_in_episode must be >= 1"),
    (dict(max_steps_in_episode=2**32 + 5), ValueError,
     "env param max_steps_in_episode=4294967301 does not fit in int32"),
])
def test_param_overrides_the_env_cannot_use_are_refused(env_id, override, exc, words):
    with pytest.raises(exc) as info:
        fusedrl.make(env_id, **override)
    assert f"{env_id}: {words}" in str(info.value)


def test_gymnax_cartpole_derived_params_follow_their_sources():
    # gymnax's CartPole stores total_mass and polemass_length and its step uses them as stored:
    # masspole=1.0 alone changed one term of the physics.
    _, params = fusedrl.make("gymnax:CartPole-v1", masspole=1.0, length=2.0)
    assert params.total_mass == pytest.approx(2.0) and params.polemass_length == pytest.approx(2.0)
    _, params = fusedrl.make("gymnax:CartPole-v1", masscart=3.0, total_mass=10.0)  # given: kept
    assert params.total_mass == 10.0 and params.polemass_length == pytest.approx(0.05)


def test_param_overrides_are_held_as_the_params_type():
    _, params = fusedrl.make("CartPole-v1", max_steps_in_episode=10.0, gravity=np.float32(12.0))
    assert type(params.max_steps_in_episode) is int and params.max_steps_in_episode == 10
    assert params.gravity == 12.0
    _, params = fusedrl.make("CartPole-v1", max_steps_in_episode=np.int64(7))
    assert type(params.max_steps_in_episode) is int and params.max_steps_in_episode == 7


# Wrong actions -------------------------------------------------------------------------------------
def _bad_actions(space, batch=()):
    """(action, error, message pattern) triples that must be rejected for `space`."""
    if isinstance(space, Discrete):
        good_shape = (*batch, *space.shape)
        return [
            (jnp.zeros((*good_shape, 1), jnp.int32), ValueError, "expected"),
            (jnp.zeros(good_shape, jnp.float32), TypeError, "must be an integer array"),
            (jnp.zeros(good_shape, bool), TypeError, "must be an integer array"),
        ]
    good_shape = (*batch, *space.shape)
    return [
        (jnp.zeros(good_shape[:-1], jnp.float32), ValueError, "expected"),  # [] instead of [1]
        (jnp.zeros((*good_shape[:-1], 2), jnp.float32), ValueError, "expected"),
        (jnp.zeros(good_shape, jnp.int32), TypeError, "must be a float array"),
    ]


@pytest.mark.parametrize("env_id", OUR_IDS)
def test_step_rejects_wrong_action_shape_and_dtype(env_id):
    env, params = fusedrl.make(env_id)
    state = _state(env, params)
    for action, error, pattern in _bad_actions(env.action_space(params)):
        with pytest.raises(error, match=pattern) as exc:
            env.step(jax.random.key(0), state, action, params)
        assert env.name in str(exc.value)


@pytest.mark.parametrize("env_id, n", [("CartPole-v1", 2), ("Acrobot-v1", 3), ("MountainCar-v0", 3)])
def test_out_of_range_discrete_actions(env_id, n):
    # From the host: an error naming the range. Traced (no host check possible): clipped to
    # 0..n-1, so an action of n + 2 is the largest action, never a larger force or torque.
    env, params = fusedrl.make(env_id)
    state = _state(env, params)
    key = jax.random.key(0)
    for bad in (n, -1, np.int32(n + 2), np.array(n)):
        with pytest.raises(ValueError, match=rf"outside Discrete\({n},.*integers 0\.\.{n - 1}\.") as exc:
            env.step(key, state, bad, params)
        assert env.name in str(exc.value)
    step = jax.jit(lambda a: env.step(key, state, a, params)[0])
    np.testing.assert_array_equal(step(jnp.int32(n + 2)), step(jnp.int32(n - 1)))
    np.testing.assert_array_equal(step(jnp.int32(-3)), step(jnp.int32(0)))
    assert not np.array_equal(step(jnp.int32(0)), step(jnp.int32(n - 1)))
    vec = VecEnv(env, 2)
    vstate = _vec_state(vec, params)
    with pytest.raises(ValueError, match="outside"):
        vec.step(vstate, np.array([0, n]), params)


@pytest.mark.parametrize("env_id", [*OUR_IDS, "gymnax:Catch-bsuite"])
def test_vecenv_step_rejects_wrong_action_shape_and_dtype(env_id):
    env, params = fusedrl.make(env_id)
    vec = VecEnv(env, NUM_ENVS)
    vstate = _vec_state(vec, params)
    space = env.action_space(params)
    cases = _bad_actions(space, (NUM_ENVS,))
    # One action per env: a batch of the wrong size, or a single unbatched action.
    cases += [
        (jnp.zeros((NUM_ENVS - 1, *space.shape), space.dtype), ValueError, "one action per environment"),
        (jnp.zeros(space.shape, space.dtype), ValueError, "one action per environment"),
    ]
    for action, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            vec.step(vstate, action, params)


# Mis-typed params ----------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", ["reset", "step", "VecEnv.reset", "VecEnv.step"])
@pytest.mark.parametrize("env_id", OUR_IDS)
def test_params_of_another_env_are_rejected(env_id, entry):
    env, params = fusedrl.make(env_id)
    # The next id whose params are of another class (CartPole-NoVelocity-v1 shares CartPole's).
    later = OUR_IDS[OUR_IDS.index(env_id) + 1:] + OUR_IDS
    wrong = next(p for p in (fusedrl.make(i)[1] for i in later) if type(p) is not type(params))
    space = env.action_space(params)
    vec = VecEnv(env, NUM_ENVS)
    call = {
        "reset": lambda p: env.reset(jax.random.key(0), p),
        "step": lambda p: env.step(
            jax.random.key(0), _state(env, params), np.zeros(space.shape, space.dtype), p
        ),
        "VecEnv.reset": lambda p: vec.reset(jax.random.key(0), p),
        "VecEnv.step": lambda p: vec.step(
            _vec_state(vec, params), np.zeros((NUM_ENVS, *space.shape), space.dtype), p
        ),
    }[entry]
    expected = f"params must be a {type(params).__name__}"
    with pytest.raises(TypeError, match=re.escape(expected) + ".*got " + type(wrong).__name__):
        call(wrong)
    with pytest.raises(TypeError, match=re.escape(expected) + ".*got dict"):
        call(dataclasses.asdict(params))


def test_vecenv_needs_a_positive_number_of_envs():
    env, _ = fusedrl.make("CartPole-v1")
    for bad in (0, -1, 2.7, "4", True):  # 2.7 must not become 2 envs
        with pytest.raises(ValueError, match="num_envs must be a positive integer"):
            VecEnv(env, bad)
    assert VecEnv(env, np.int64(3)).num_envs == 3


def test_vecenv_refuses_a_gymnax_wrapper_whose_reset_and_step_it_would_skip(private_registry):
    # A gymnax wrapper forwards reset_env/step_env to the env it wraps: VecEnv (and so training)
    # stepped the unwrapped env, silently (StickyActionWrapper's replayed actions were never replayed).
    from gymnax.wrappers.purerl import LogWrapper, StickyActionWrapper

    for wrapped in (StickyActionWrapper(fusedrl.envs.CartPole(), 1.0), LogWrapper(fusedrl.envs.CartPole())):
        with pytest.raises(TypeError, match=r"does not define \(reset_env and step_env come from attribute "
                                            r"forwarding, e\.g\. a gymnax wrapper"):
            VecEnv(wrapped, NUM_ENVS)
    fusedrl.register("StickyCartPole-v1", lambda: StickyActionWrapper(fusedrl.envs.CartPole(), 1.0))
    config = fusedrl.PPOConfig(env_id="StickyCartPole-v1", num_envs=2, num_steps=8, total_timesteps=16)
    with pytest.raises(TypeError, match="StickyActionWrapper does not define"):
        jax.eval_shape(fusedrl.make_train(config), jax.random.key(0))


def test_vecenv_warns_that_an_env_classs_own_step_or_reset_is_not_called():
    # Shaped.step scales the reward, but VecEnv steps step_env: training saw rewards of 1, not 10.
    from gymnax.environments.bsuite.deep_sea import DeepSea

    class Shaped(fusedrl.envs.CartPole):
        def step(self, key, state, action, params=None):
            obs, state, reward, terminated, truncated, info = super().step(key, state, action, params)
            return obs, state, 10.0 * reward, terminated, truncated, info

    class Logged(Shaped):
        def reset(self, key, params=None):  # starts every episode off-centre, which VecEnv skips too
            obs, state = super().reset(key, params)
            state = state.replace(x=state.x + 1.0)
            return self.get_obs(state), state

    class Harmless(fusedrl.envs.CartPole):  # returns what gymnax's reset returns: nothing skipped
        def reset(self, key, params=None):
            return super().reset(key, params)

    with pytest.warns(UserWarning, match=r"Shaped overrides step \(in Shaped\), which VecEnv, and so "
                                         r"training and evaluation, never calls") as record:
        VecEnv(Shaped(), NUM_ENVS)
    assert len(record) == 1
    with pytest.warns(UserWarning) as record:
        VecEnv(Logged(), NUM_ENVS)
    assert [str(w.message).split(",")[0] for w in record] == [
        "Logged overrides step (in Shaped)", "Logged overrides reset (in Logged)"]
    with warnings.catch_warnings():  # fusedrl's and gymnax's own overrides add nothing the learners need
        warnings.simplefilter("error")
        VecEnv(fusedrl.envs.CartPole(), NUM_ENVS)
        VecEnv(DeepSea(), NUM_ENVS)
        VecEnv(Harmless(), NUM_ENVS)


# Wrong shapes from a custom env --------------------------------------------------------------------
# VecEnv checks what the single env's reset_env / step_env / is_truncated return, at trace time.
class ThreeObs(fusedrl.envs.CartPole):
    """Observations of 3 values while observation_space(params).shape is (4,)."""

    def get_obs(self, state, params=None, key=None):
        return jnp.stack([state.x, state.x_dot, state.theta]).astype(jnp.float32)


class StepObs(fusedrl.envs.CartPole):
    """Right observations from reset_env, 3 values from step_env."""

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs[:3], state, reward, terminated, info


def _step_output(field, value):
    """A CartPole whose step_env (or is_truncated) returns `value(x)` instead of its `field` x."""
    outputs = ("obs", "state", "reward", "terminated", "info")  # step_env's, in order

    class Env(fusedrl.envs.CartPole):
        def step_env(self, key, state, action, params):
            out = list(super().step_env(key, state, action, params))
            if field in outputs:
                out[outputs.index(field)] = value(out[outputs.index(field)])
            return tuple(out)

        def is_truncated(self, state, params):
            truncated = super().is_truncated(state, params)
            return value(truncated) if field == "truncated" else truncated

    Env.__name__ = f"Bad_{field}"
    return Env()


def _vec_calls(env, params):
    """Every VecEnv entry that runs the single env, traced abstractly (compiles nothing)."""
    vec = VecEnv(env, NUM_ENVS)
    # The broken test envs subclass CartPole: a plain CartPole makes their valid state and draws.
    registered = type(env) in (fusedrl.envs.CartPole, fusedrl.envs.CartPoleNoVelocity)
    broken_cartpole = isinstance(env, fusedrl.envs.CartPole) and not registered
    good_vec = VecEnv(fusedrl.envs.CartPole(), NUM_ENVS) if broken_cartpole else vec
    space = env.action_space(params)
    action = np.zeros((NUM_ENVS, *space.shape), space.dtype)
    draws_shape = jax.eval_shape(lambda k: good_vec.predraw(k, params, 2), jax.random.key(0))
    return {
        "reset": lambda: jax.eval_shape(vec.reset, jax.random.key(0), params),
        "predraw": lambda: jax.eval_shape(lambda k: vec.predraw(k, params, 2), jax.random.key(0)),
        "step": lambda: jax.eval_shape(lambda s: vec.step(s, action, params), _vec_state(good_vec, params)),
        "step with draws": lambda: jax.eval_shape(
            lambda s, d: vec.step(s, action, params, d[0]), _vec_state(good_vec, params), draws_shape
        ),
    }


@pytest.mark.parametrize("call", ["reset", "predraw", "step", "step with draws"])
def test_observation_of_the_wrong_shape_names_env_method_and_fix(call):
    _, params = fusedrl.make("CartPole-v1")
    env, method = (ThreeObs(), "reset_env") if call in ("reset", "predraw") else (StepObs(), "step_env")
    expected = f"{type(env).__name__}.{method} returned observation of shape (3,) per env, expected (4,)"
    with pytest.raises(ValueError, match=re.escape(expected) + ".*observation_space"):
        _vec_calls(env, params)[call]()


@pytest.mark.parametrize(
    "field, value, shape",
    [
        ("reward", lambda r: jnp.ones((1,), jnp.float32), (1,)),
        ("reward", lambda r: jnp.ones((2,), jnp.float32), (2,)),
        ("terminated", lambda t: t[None], (1,)),
        ("truncated", lambda t: jnp.stack([t, t]), (2,)),
    ],
    ids=["reward(1,)", "reward(2,)", "terminated(1,)", "truncated(2,)"],
)
@pytest.mark.parametrize("call", ["step", "step with draws"])
def test_non_scalar_reward_or_flags_name_the_field(call, field, value, shape):
    env = _step_output(field, value)
    _, params = fusedrl.make("CartPole-v1")
    method = "is_truncated" if field == "truncated" else "step_env"
    expected = f"Bad_{field}.{method} returned {field} of shape {shape} per env, expected ()"
    with pytest.raises(ValueError, match=re.escape(expected) + ".*one scalar"):
        _vec_calls(env, params)[call]()


class SixOutputs(fusedrl.envs.CartPole):
    """step_env returning the 6-tuple of `step` (with truncated), not gymnax's 5-tuple."""

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state, reward, terminated, jnp.asarray(False), info


@pytest.mark.parametrize("call", ["step", "step with draws"])
def test_step_env_returning_truncated_names_the_method_and_the_truncation_rule(call):
    # Before: "too many values to unpack (expected 5)", naming neither the env nor the method.
    _, params = fusedrl.make("CartPole-v1")
    expected = "SixOutputs.step_env returned a 6-tuple, expected gymnax's 5-tuple (obs, state, reward"
    with pytest.raises(ValueError, match=re.escape(expected) + ".*comes from is_truncated"):
        _vec_calls(SixOutputs(), params)[call]()

    class FiveInAList(fusedrl.envs.CartPole):  # unpacked as before: any sequence of five will do
        def step_env(self, key, state, action, params):
            return list(super().step_env(key, state, action, params))

    _vec_calls(FiveInAList(), params)[call]()


@pytest.mark.parametrize("call", ["step", "step with draws"])
def test_step_env_info_keys_the_wrappers_set_are_refused(call):
    # Before: the wrappers replaced an env's own info["episode_return"] without a word.
    _, params = fusedrl.make("CartPole-v1")

    class OwnReturn(fusedrl.envs.CartPole):
        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, info = super().step_env(key, state, action, params)
            return obs, state, reward, terminated, {**info, "episode_return": reward, "score": reward}

    expected = ("OwnReturn.step_env's info has 'episode_return', which fusedrl's vector env and wrappers "
                "set themselves (and would replace yours silently): rename that key")
    with pytest.raises(ValueError, match=re.escape(expected)):
        _vec_calls(OwnReturn(), params)[call]()


def test_observation_dtype_of_step_must_match_reset():
    env = _step_output("obs", lambda o: o.astype(jnp.int32))
    _, params = fusedrl.make("CartPole-v1")
    with pytest.raises(
        TypeError,
        match=re.escape("Bad_obs.step_env returned observation of dtype int32, but reset_env float32"),
    ):
        _vec_calls(env, params)["step"]()


def test_training_a_registered_env_with_wrong_shapes_fails_at_trace_time(monkeypatch):
    """The trainer steps through VecEnv, so the error comes before anything is compiled."""
    monkeypatch.setitem(fusedrl.envs.registry._REGISTRY, "ThreeObs-v0", ThreeObs)
    config = fusedrl.PPOConfig(
        env_id="ThreeObs-v0",
        num_envs=NUM_ENVS,
        num_steps=4,
        total_timesteps=16,
        update_epochs=1,
        num_minibatches=1,
        hidden_sizes=(8,),
    )
    with pytest.raises(ValueError, match=re.escape("ThreeObs.reset_env returned observation of shape (3,)")):
        jax.eval_shape(fusedrl.make_train(config), jax.random.key(0))


@pytest.mark.parametrize(
    "env_id",
    [
        *OUR_IDS,
        "gymnax:Breakout-MinAtar",
        "gymnax:SpaceInvaders-MinAtar",
        "gymnax:Catch-bsuite",
        "gymnax:FourRooms-misc",
    ],
)
def test_shape_checks_accept_our_envs_and_gymnax_envs(env_id):
    """Catch-bsuite's observations are float32 in an int32 space, FourRooms' int32 in a float32 one:
    only shapes are checked against the space."""
    env, params = fusedrl.make(env_id)
    for call in _vec_calls(env, params).values():
        call()


@pytest.fixture
def private_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_register_refuses_to_replace_silently(private_registry):
    from fusedrl.envs.cartpole import CartPole
    from fusedrl.envs.pendulum import Pendulum

    fusedrl.register("Mut3Env-v0", CartPole)
    with pytest.raises(ValueError, match="'Mut3Env-v0' is already registered; pass overwrite=True"):
        fusedrl.register("Mut3Env-v0", Pendulum)
    assert type(fusedrl.make("Mut3Env-v0")[0]) is CartPole
    fusedrl.register("Mut3Env-v0", Pendulum, overwrite=True)
    assert type(fusedrl.make("Mut3Env-v0")[0]) is Pendulum


def test_unknown_gymnax_name_lists_close_ids():
    with pytest.raises(ValueError, match=re.escape("Unknown environment id 'gymnax:Catch-bsuit'")) as exc:
        fusedrl.make("gymnax:Catch-bsuit")
    assert "did you mean 'gymnax:Catch-bsuite'?" in str(exc.value)


def test_registered_ids_prefix_every_gymnax_id():
    ours = fusedrl.registered_ids(include_gymnax=False)
    ids = fusedrl.registered_ids()
    assert ids[:len(ours)] == ours and "gymnax:Catch-bsuite" in ids
    assert all(i.startswith("gymnax:") for i in ids[len(ours):]) and len(ids) > len(ours)


def test_a_registered_env_without_the_gymnax_base_class_names_what_it_lacks(private_registry):
    # gymnax's methods alone are not enough: the trainer also calls the base class's is_truncated
    # and name. The error names them and the fix, before anything is traced.
    from fusedrl.envs.cartpole import CartPole

    class Bare:  # gymnax's methods (CartPole's), without the base class
        def __init__(self):
            self.cartpole = CartPole()

        @property
        def default_params(self):
            return self.cartpole.default_params

        def reset_env(self, key, params):
            return self.cartpole.reset_env(key, params)

        def step_env(self, key, state, action, params):
            return self.cartpole.step_env(key, state, action, params)

        def observation_space(self, params):
            return self.cartpole.observation_space(params)

        def action_space(self, params):
            return self.cartpole.action_space(params)

    fusedrl.register("Bare-v0", Bare)
    with pytest.raises(TypeError, match=r"'Bare-v0' built a Bare, which lacks is_truncated, name\. "
                                        r"Subclass fusedrl\.envs\.Environment"):
        fusedrl.make("Bare-v0")
    with pytest.raises(TypeError, match="lacks is_truncated, name"):
        fusedrl.make_train(fusedrl.PPOConfig(env_id="Bare-v0"))

    class Based(Bare, fusedrl.envs.Environment):  # the same methods on the base class: accepted
        pass

    fusedrl.register("Based-v0", Based)
    env, params = fusedrl.make("Based-v0")
    obs, state = env.reset(jax.random.key(0), params)
    assert env.step(jax.random.key(1), state, 0, params)[0].shape == obs.shape == (4,)


def test_a_registered_env_that_overrides_step_instead_of_step_env_names_the_method(private_registry):
    # gymnax's base step_env raises a bare NotImplementedError while tracing; say which method.
    from fusedrl.envs.cartpole import CartPole

    class OwnStep(fusedrl.envs.Environment):  # CartPole's methods, but `step` in place of step_env
        default_params = property(lambda self: CartPole().default_params)
        reset_env = CartPole.reset_env
        observation_space = CartPole.observation_space
        action_space = CartPole.action_space

        def step(self, key, state, action, params=None):
            return CartPole().step(key, state, action, params)

    fusedrl.register("OwnStep-v0", OwnStep)
    with pytest.raises(TypeError, match=r"'OwnStep-v0' built a OwnStep, which does not implement step_env\. "
                                        r"The learners call reset_env"):
        fusedrl.make("OwnStep-v0")


def test_a_registered_env_without_spaces_or_a_time_limit_field_names_what_is_missing(private_registry):
    # Unchecked, these fail late and say nothing of the env: NotImplementedError or numpy's "entry not
    # a 2- or 3- tuple" when the trainer is made, gymnax's AttributeError at the first step; a dict of
    # params trains but cannot be overridden ("valid params are []").
    from flax import struct

    from fusedrl.envs.cartpole import CartPole

    class NoSpace(CartPole):
        observation_space = fusedrl.envs.Environment.observation_space

    fusedrl.register("NoSpace-v0", NoSpace)
    with pytest.raises(TypeError, match=r"'NoSpace-v0' built a NoSpace, which does not implement "
                                        r"observation_space\. The learners read observation_space"):
        fusedrl.make("NoSpace-v0")

    @struct.dataclass
    class NoLimitParams:  # CartPole's fields, but no max_steps_in_episode
        gravity: float = 9.8

    class NoLimit(CartPole):
        @property
        def default_params(self):
            return NoLimitParams()

    fusedrl.register("NoLimit-v0", NoLimit)
    with pytest.raises(TypeError, match=r"NoLimit-v0: NoLimitParams has no max_steps_in_episode, which the "
                                        r"default is_truncated reads"):
        fusedrl.make("NoLimit-v0")

    class DictParams(CartPole):
        @property
        def default_params(self):
            return dict(CartPole().default_params.__dict__)

        def is_truncated(self, state, params):
            return state.time >= 500

    fusedrl.register("DictParams-v0", DictParams)
    with pytest.raises(TypeError, match=r"DictParams-v0: its default_params is a dict, not a dataclass, so "
                                        r"its params cannot be overridden \(\['gravity'\]\)"):
        fusedrl.make("DictParams-v0", gravity=12.0)


def test_params_that_inherit_gymnax_one_step_time_limit_warn(private_registry):
    # gymnax's EnvParams.max_steps_in_episode defaults to 1: a params class that does not set it
    # truncated every episode after one step, silently (episode_length 1 throughout training).
    from flax import struct

    from fusedrl.envs.cartpole import CartPole, CartPoleParams

    def with_params(params, **methods):
        return type("Env", (CartPole,), {"default_params": property(lambda self: params), **methods})

    @struct.dataclass
    class Inherits(fusedrl.envs.EnvParams):  # only made here, never stepped: one field will do
        gravity: float = 9.8

    @struct.dataclass
    class SetsOne(Inherits):
        max_steps_in_episode: int = 1  # one-step episodes on purpose (a bandit): no warning

    fusedrl.register("Inherits-v0", with_params(Inherits()))
    with pytest.warns(UserWarning, match=r"Inherits-v0: Inherits does not set max_steps_in_episode, so it "
                                         r"inherits gymnax's EnvParams default of 1"):
        fusedrl.make("Inherits-v0")
    own_rule = with_params(Inherits(), is_truncated=lambda self, state, params: state.time >= 9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fusedrl.make("Inherits-v0", max_steps_in_episode=200)  # the time limit given to make
        for name, env in [("SetsOne-v0", with_params(SetsOne())), ("OwnRule-v0", own_rule),
                          ("CartPole-like-v0", with_params(CartPoleParams()))]:
            fusedrl.register(name, env)
            fusedrl.make(name)


def test_a_dict_observation_space_takes_the_dict_path(private_registry):
    # Not refused: each entry is encoded (tests/test_spaces.py).
    from gymnax.environments import spaces

    from fusedrl.envs.cartpole import CartPole

    class DictObs(CartPole):
        def get_obs(self, state, params=None, key=None):
            return {"a": jnp.stack([state.x, state.x_dot]), "b": jnp.stack([state.theta, state.theta_dot])}

        def observation_space(self, params):
            return spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Box(-1, 1, (2,))})

    fusedrl.register("DictObs-v0", DictObs)
    train = fusedrl.make_train(fusedrl.PPOConfig(env_id="DictObs-v0"))
    obs = jax.eval_shape(train.init, jax.random.key(0)).obs
    assert train.structured and {k: v.shape for k, v in obs.items()} == {"a": (4, 2), "b": (4, 2)}


def test_a_deterministic_step_that_uses_its_key_says_so():
    # Before: JAX's "unexpected PRNG key type NoneType" alone, naming neither the env nor the flag.
    class Noisy(fusedrl.envs.CartPole):  # deterministic_step = True (CartPole's), yet it draws noise
        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, info = super().step_env(key, state, action, params)
            return obs + jax.random.normal(key, obs.shape), state, reward, terminated, info

    class Broken(fusedrl.envs.CartPole):  # an error of its own: no note about keys
        def step_env(self, key, state, action, params):
            raise TypeError("a bug of its own")

    _, params = fusedrl.make("CartPole-v1")
    with pytest.raises(TypeError, match="PRNG key") as info:
        _vec_calls(Noisy(), params)["step"]()
    assert ("Noisy.deterministic_step is True, so its step_env is called with key=None: if step_env uses "
            "its key, set deterministic_step = False.") in getattr(info.value, "__notes__", [])
    with pytest.raises(TypeError, match="a bug of its own") as info:
        _vec_calls(Broken(), params)["step"]()
    assert not any("deterministic_step" in note for note in getattr(info.value, "__notes__", []))
