"""Observations and actions beyond one flat Box and Discrete: dict (and NamedTuple) observations,
action masks, MultiDiscrete actions and image observations with the built-in CNN (network="cnn").

Each feature is exercised through a small env of our contract defined here, trained for a few
updates; the trained results go through `fusedrl.evaluate`, a checkpoint and `fusedrl.load(...).act`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import fusedrl
from fusedrl import checkpoint as ckpt
from fusedrl.distributions import MASKED_LOGIT, Categorical, MultiCategorical, mask_policy
from fusedrl.envs import Box, Discrete, MultiDiscrete, check_action, space_info
from fusedrl.envs._gymnax import spaces
from fusedrl.envs.base import Environment, EnvParams, EnvState
from fusedrl.envs.wrappers import normalize_observation, observation_stats, structure_observation

TRAP_REWARD = 10_000.0  # a masked action's reward: one such step shows in any mean of returns
EPISODE = 8  # steps per episode of the trap envs: a clean episode returns at most 8


@struct.dataclass
class TrapState(EnvState):
    target: jax.Array  # [] int32 the rewarded action (a component's, for MultiDiscrete: [2])
    mask: jax.Array  # [n] bool allowed actions
    time: jax.Array  # [] int32


@struct.dataclass
class TrapParams(EnvParams):
    max_steps_in_episode: int = 100  # never reached: episodes terminate after EPISODE steps


class MaskTrap(Environment):
    """Discrete(4). Observation {"cue": float32 [3] one-hot target in 0..2, "noise": float32 [2],
    "action_mask": bool [4]}: action 3 is always masked, and so is one random non-target action.
    Reward 1 for the target, 0 for another allowed action, TRAP_REWARD for a masked one: a policy that
    ignores the mask learns to take it. Terminates after EPISODE steps."""

    @property
    def name(self) -> str:
        return "MaskTrap"

    @property
    def default_params(self):
        return TrapParams()

    def action_space(self, params=None):
        return Discrete(4)

    def observation_space(self, params):
        return spaces.Dict({"cue": Box(0.0, 1.0, (3,), jnp.float32),
                            "noise": Box(-1.0, 1.0, (2,), jnp.float32),
                            "action_mask": Box(0, 1, (4,), jnp.bool_)})

    def _draw(self, key, time):
        k_target, k_other = jax.random.split(key)
        target = jax.random.randint(k_target, (), 0, 3)
        other = (target + jax.random.randint(k_other, (), 1, 3)) % 3  # a non-target action among 0..2
        mask = (jnp.arange(4) != 3) & (jnp.arange(4) != other)
        return TrapState(target=target, mask=mask, time=time)

    def reset_env(self, key, params):
        state = self._draw(key, jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        reward = jnp.where(state.mask[action], (action == state.target).astype(jnp.float32), TRAP_REWARD)
        state = self._draw(key, state.time + 1)
        return self.get_obs(state), state, reward, state.time >= EPISODE, {}

    def get_obs(self, state, params=None, key=None):
        return {"cue": jax.nn.one_hot(state.target, 3, dtype=jnp.float32),
                "noise": jnp.stack([state.time.astype(jnp.float32) / EPISODE, 0.5]),
                "action_mask": state.mask}

    def is_terminated(self, state, params):
        return state.time >= EPISODE


class TrapObs(NamedTuple):
    cue: jax.Array  # [3] float32
    noise: jax.Array  # [2] float32
    action_mask: jax.Array  # [4] bool


class NamedTupleTrap(MaskTrap):
    """MaskTrap with its observation as a NamedTuple (converted to a dict by the trainer)."""

    @property
    def name(self) -> str:
        return "NamedTupleTrap"

    def get_obs(self, state, params=None, key=None):
        return TrapObs(**super().get_obs(state))


class MultiTrap(Environment):
    """MultiDiscrete([3, 2]). Observation {"cue": float32 [5], the one-hot targets of both components,
    "action_mask": bool [5] over the concatenated choices}: component 0's choice 2 is masked. Reward:
    the number of components on target, or TRAP_REWARD for a masked choice. Terminates after EPISODE
    steps."""

    @property
    def name(self) -> str:
        return "MultiTrap"

    @property
    def default_params(self):
        return TrapParams()

    def action_space(self, params=None):
        return MultiDiscrete([3, 2])

    def observation_space(self, params):
        return spaces.Dict({"cue": Box(0.0, 1.0, (5,), jnp.float32),
                            "action_mask": Box(0, 1, (5,), jnp.bool_)})

    def _draw(self, key, time):
        k0, k1 = jax.random.split(key)
        target = jnp.stack([jax.random.randint(k0, (), 0, 2), jax.random.randint(k1, (), 0, 2)])
        return TrapState(target=target, mask=jnp.array([True, True, False, True, True]), time=time)

    def reset_env(self, key, params):
        state = self._draw(key, jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        masked = action[0] == 2
        reward = jnp.where(masked, TRAP_REWARD, jnp.sum(action == state.target).astype(jnp.float32))
        state = self._draw(key, state.time + 1)
        return self.get_obs(state), state, reward, state.time >= EPISODE, {}

    def get_obs(self, state, params=None, key=None):
        cue = jnp.concatenate([jax.nn.one_hot(state.target[0], 3), jax.nn.one_hot(state.target[1], 2)])
        return {"cue": cue.astype(jnp.float32), "action_mask": state.mask}

    def is_terminated(self, state, params):
        return state.time >= EPISODE


@struct.dataclass
class PixelState(EnvState):
    side: jax.Array  # [] int32 0 (left) or 1 (right)
    time: jax.Array  # [] int32


class Pixels(Environment):
    """Discrete(2), one step per episode. Observation uint8 [6, 6, 1]: a bright (255) column at the
    left or right edge; reward 1 for the action naming that side."""

    @property
    def name(self) -> str:
        return "Pixels"

    @property
    def default_params(self):
        return TrapParams()

    def action_space(self, params=None):
        return Discrete(2)

    def observation_space(self, params):
        return Box(0, 255, (6, 6, 1), jnp.uint8)

    def reset_env(self, key, params):
        state = PixelState(side=jax.random.randint(key, (), 0, 2), time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        reward = (action == state.side).astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, reward, state.time >= 1, {}

    def get_obs(self, state, params=None, key=None):
        column = jnp.where(state.side == 0, 0, 5)
        img = jnp.where(jnp.arange(6)[None, :] == column, 255, 0).astype(jnp.uint8)
        return jnp.broadcast_to(img, (6, 6))[..., None]

    def is_terminated(self, state, params):
        return state.time >= 1


fusedrl.register("test:MaskTrap-v0", MaskTrap)
fusedrl.register("test:NamedTupleTrap-v0", NamedTupleTrap)
fusedrl.register("test:MultiTrap-v0", MultiTrap)
fusedrl.register("test:Pixels-v0", Pixels)

TRAP = dict(num_envs=8, num_steps=32, total_timesteps=8 * 32 * 24, update_epochs=4, num_minibatches=4,
            lr=3e-3,
            gamma=0.5, ent_coef=0.01, hidden_sizes=(32,), normalize_obs=True)


# ------------------------------------------------------------------------------- distributions
def test_masked_entropy_and_log_probs_match_numpy_over_the_allowed_actions():
    logits = np.array([[0.3, -1.2, 2.0, 0.5], [1.0, 1.0, 1.0, 1.0]], np.float32)
    mask = np.array([[True, False, True, True], [False, False, True, False]])
    pi = mask_policy(Categorical(jnp.asarray(logits)), jnp.asarray(mask))
    for row in range(2):
        allowed = logits[row][mask[row]].astype(np.float64)
        p = np.exp(allowed - allowed.max())
        p /= p.sum()
        np.testing.assert_allclose(float(pi.entropy()[row]), -(p * np.log(p)).sum(), rtol=1e-5, atol=1e-6)
        logp = np.log(p)
        got = np.asarray(pi.log_probs[row])[mask[row]]
        np.testing.assert_allclose(got, logp, rtol=1e-5, atol=1e-6)
        assert np.all(np.asarray(jnp.exp(pi.log_probs[row]))[~mask[row]] == 0.0)
    assert np.all(np.isfinite(np.asarray(pi.logits)))  # finite, so no NaN from 0 * log 0
    assert np.all(np.asarray(pi.logits)[~mask] == MASKED_LOGIT)
    def masked_entropy(x):
        return mask_policy(Categorical(x), jnp.asarray(mask)).entropy().sum()

    grads = jax.grad(masked_entropy)(jnp.asarray(logits))
    assert np.all(np.isfinite(np.asarray(grads)))
    samples = jax.vmap(lambda k: pi.sample(k))(jax.random.split(jax.random.key(0), 500))  # [500, 2]
    assert np.all(mask[np.arange(2)[None, :], np.asarray(samples)])
    assert np.asarray(pi.mode()).tolist() == [2, 2]


def test_multicategorical_sums_its_components():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(3, 5)), jnp.float32)
    pi = MultiCategorical(logits, nvec=(3, 2))
    a, b = Categorical(logits[:, :3]), Categorical(logits[:, 3:])
    action = jnp.array([[0, 1], [2, 0], [1, 1]], jnp.int32)
    want = a.log_prob(action[:, 0]) + b.log_prob(action[:, 1])
    np.testing.assert_allclose(pi.log_prob(action), want, rtol=1e-6)
    np.testing.assert_allclose(pi.entropy(), a.entropy() + b.entropy(), rtol=1e-6)
    assert pi.mode().shape == (3, 2) and pi.mode().dtype == jnp.int32
    sample = pi.sample(jax.random.key(1))
    assert sample.shape == (3, 2) and np.all((np.asarray(sample) >= 0) & (np.asarray(sample) < [3, 2]))
    masked = mask_policy(pi, jnp.array([[True, True, False, True, True]] * 3))
    assert np.all(np.asarray(jax.vmap(masked.sample)(jax.random.split(jax.random.key(2), 200)))[..., 0] != 2)


# ------------------------------------------------------------------------------------- spaces
def test_multidiscrete_space():
    space = MultiDiscrete([3, 2])
    assert space.shape == (2,) and repr(space) == "MultiDiscrete([3, 2])"
    assert space_info(space) == {"type": "MultiDiscrete", "nvec": [3, 2]}
    draws = np.asarray(jax.vmap(space.sample)(jax.random.split(jax.random.key(0), 100)))
    assert draws.min() == 0 and draws[:, 0].max() == 2 and draws[:, 1].max() == 1
    assert check_action(space, np.array([2, 1]), "t").dtype == jnp.int32
    with pytest.raises(ValueError, match="outside MultiDiscrete"):
        check_action(space, np.array([3, 0]), "t")
    with pytest.raises(TypeError, match="integer"):
        check_action(space, np.array([1.0, 0.0]), "t")
    with pytest.raises(ValueError, match="shape"):
        check_action(space, np.array([1]), "t")
    np.testing.assert_array_equal(check_action(space, jnp.array([[5, -1]]), "t", (1,)), [[2, 0]])  # clipped
    with pytest.raises(ValueError, match="nvec"):
        MultiDiscrete([3, 0])
    from fusedrl.cli import format_space

    assert format_space(space) == "MultiDiscrete([3, 2])"
    assert format_space(MaskTrap().observation_space(None)) == (
        "Dict(cue: Box((3,), 0..1), noise: Box((2,), -1..1), action_mask: Box((4,), 0..1))")
    from fusedrl.envs.checks import random_action

    mask = jnp.array([True, True, False, False, True])  # component 0: only 0 or 1; component 1: only 1
    draws = np.asarray(jax.vmap(lambda k: random_action(k, space, {"action_mask": mask}))(
        jax.random.split(jax.random.key(1), 64)))
    assert set(draws[:, 0]) == {0, 1} and set(draws[:, 1]) == {1}


def test_structure_and_normalise_per_entry():
    obs = TrapObs(cue=jnp.ones((2, 3)), noise=jnp.zeros((2, 2)), action_mask=jnp.ones((2, 4), bool))
    out = structure_observation(obs, 2, keep_images=False)
    assert sorted(out) == ["action_mask", "cue", "noise"] and out["action_mask"].dtype == jnp.bool_
    img = {"pix": jnp.full((2, 4, 4, 3), 200, jnp.uint8), "vec": jnp.ones((2, 2, 2), jnp.int32)}
    kept = structure_observation(img, 2, keep_images=True)
    assert kept["pix"].shape == (2, 4, 4, 3) and kept["pix"].dtype == jnp.uint8  # bytes, scaled on device
    assert kept["vec"].shape == (2, 4) and kept["vec"].dtype == jnp.float32
    assert structure_observation(img, 2, keep_images=False)["pix"].shape == (2, 48)
    stats = observation_stats(out)
    assert sorted(stats) == ["cue", "noise"]  # never the mask
    assert sorted(observation_stats(kept)) == ["vec"]  # nor uint8 pixels
    normed = normalize_observation(stats, out)
    assert normed["action_mask"] is out["action_mask"]


def test_network_scales_uint8_on_device_and_never_encodes_the_mask():
    """uint8 pixels enter the network as x / 255; the action mask adds no input features."""
    from fusedrl.networks import ActorCritic

    net = ActorCritic(action_dim=4, discrete=True, hidden_sizes=(8,), torso="cnn")
    pix = np.random.default_rng(0).integers(0, 256, (2, 5, 5, 2)).astype(np.uint8)
    mask = jnp.array([[True, False, True, True]] * 2)
    as_bytes = {"pix": jnp.asarray(pix), "action_mask": mask}
    params = net.init(jax.random.key(0), as_bytes)
    assert params["params"]["actor_0"]["kernel"].shape[0] == 3 * 3 * 16  # conv features only
    pi, value = net.apply(params, as_bytes)
    pi_f, value_f = net.apply(params, {"pix": jnp.asarray(pix, jnp.float32) / 255.0, "action_mask": mask})
    np.testing.assert_allclose(value, value_f, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pi.logits, pi_f.logits, rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(pi.logits)[:, 1] == MASKED_LOGIT)


# ------------------------------------------------------------------------------------ learning
@pytest.fixture(scope="module")
def trap_program():
    config = fusedrl.PPOConfig(env_id="test:MaskTrap-v0", **TRAP)
    return config, jax.jit(fusedrl.make_train(config))


@pytest.fixture(scope="module")
def trap_run(trap_program):
    config, train = trap_program
    return config, train(jax.random.key(0))


@pytest.mark.slow
def test_dict_observations_keep_one_program_no_transfers_and_bit_identical_runs(trap_program, trap_run):
    config, train = trap_program
    key = jax.device_put(jax.random.key(0))
    with jax.transfer_guard("disallow"):
        again = train(key)
    assert train._cache_size() == 1  # the same program: no retrace
    for a, b in zip(jax.tree.leaves(trap_run[1].params), jax.tree.leaves(again.params), strict=True):
        np.testing.assert_array_equal(a, b)
    train_ = fusedrl.make_train(config)
    stats = (train_.obs_stats(trap_run[1].state), train_.obs_stats(again.state))
    for a, b in zip(*map(jax.tree.leaves, stats), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(trap_run[1].metrics["policy_loss"], again.metrics["policy_loss"])


def test_masked_actions_are_never_taken(trap_run):
    """Every training episode, then greedy and sampled evaluation episodes, returns at most EPISODE:
    one masked action (reward TRAP_REWARD) in any episode of an update would lift that update's mean
    return above it. Breaking the mask (the network ignoring action_mask) turns this red at once."""
    config, result = trap_run
    returns = np.asarray(result.metrics["episode_return"])
    assert returns.max() <= EPISODE, returns.max()
    assert returns[-4:].mean() > 0.8 * EPISODE, returns  # it learned the cue among the allowed actions
    greedy = np.asarray(fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=64))
    sampled = np.asarray(fusedrl.evaluate(config, result, jax.random.key(2), num_episodes=64, greedy=False))
    assert greedy.max() <= EPISODE and sampled.max() <= EPISODE, (greedy.max(), sampled.max())
    assert greedy.mean() > 0.9 * EPISODE


def test_dict_checkpoint_round_trip_and_act(trap_run, tmp_path):
    config, result = trap_run
    path = ckpt.save(tmp_path / "checkpoint", config, result.state, result.hparams)
    policy = fusedrl.load(path)
    assert set(policy.obs_stats) == {"cue", "noise"}
    np.testing.assert_array_equal(policy.obs_stats["cue"].mean, fusedrl.make_train(config).obs_stats(
        result.state)["cue"].mean)
    env, params = fusedrl.make(config.env_id)
    obs, _ = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(3), 256), params)
    actions = np.asarray(policy.act(obs))  # a batch
    mask, cue = np.asarray(obs["action_mask"]), np.asarray(obs["cue"])
    assert np.all(mask[np.arange(256), actions]), "a loaded policy took a masked action"
    np.testing.assert_array_equal(actions, cue.argmax(-1))  # greedy: the target
    one = jax.tree.map(lambda x: x[0], obs)
    assert int(policy.act(one)) == actions[0]
    sampled = np.asarray(policy.act(obs, key=jax.random.key(4)))
    assert np.all(mask[np.arange(256), sampled])
    with pytest.raises(ValueError, match="structured"):
        policy.act({"cue": cue})


def test_namedtuple_observations_train():
    config = fusedrl.PPOConfig(env_id="test:NamedTupleTrap-v0", **{**TRAP, "total_timesteps": 8 * 32 * 2})
    result = jax.jit(fusedrl.make_train(config))(jax.random.key(0))
    assert set(result.state.obs) == {"cue", "noise", "action_mask"}  # converted to a dict
    assert np.asarray(result.metrics["episode_return"]).max() <= EPISODE


@pytest.mark.slow
def test_multidiscrete_with_mask_learns_and_round_trips(tmp_path):
    config = fusedrl.PPOConfig(env_id="test:MultiTrap-v0", **{**TRAP, "normalize_obs": False})
    result = jax.jit(fusedrl.make_train(config))(jax.random.key(0))
    returns = np.asarray(result.metrics["episode_return"])
    assert returns.max() <= 2 * EPISODE, returns.max()
    assert returns[-4:].mean() > 0.8 * 2 * EPISODE, returns
    greedy = np.asarray(fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=16))
    assert greedy.min() >= 0.9 * 2 * EPISODE and greedy.max() <= 2 * EPISODE
    policy = fusedrl.load(ckpt.save(tmp_path / "checkpoint", config, result.state, result.hparams))
    env, params = fusedrl.make(config.env_id)
    obs, state = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(3), 64), params)
    actions = np.asarray(policy.act(obs))
    assert actions.shape == (64, 2) and np.all(actions[:, 0] != 2)
    np.testing.assert_array_equal(actions, np.asarray(state.target))


def test_cnn_learns_from_uint8_pixels():
    config = fusedrl.PPOConfig(env_id="test:Pixels-v0", network="cnn", num_envs=8, num_steps=8,
                               total_timesteps=8 * 8 * 16, update_epochs=4, num_minibatches=2, lr=3e-3,
                               hidden_sizes=(16,))
    train = fusedrl.make_train(config)
    assert "conv_obs_0" in jax.eval_shape(train.init, jax.random.key(0)).params["params"]
    result = jax.jit(train)(jax.random.key(0))
    assert result.state.obs["obs"].dtype == jnp.uint8  # pixels stay bytes; the network scales them
    greedy = np.asarray(fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=32))
    assert greedy.mean() == 1.0, greedy


@pytest.mark.slow
def test_recurrent_policy_on_dict_observations_respects_the_mask():
    config = fusedrl.PPOConfig(env_id="test:MaskTrap-v0", recurrent="gru", recurrent_size=16,
                               **{**TRAP, "total_timesteps": 8 * 32 * 3})
    result = jax.jit(fusedrl.make_train(config))(jax.random.key(0))
    assert np.asarray(result.metrics["episode_return"]).max() <= EPISODE


NETS = """
import flax.linen as nn
from fusedrl.distributions import Categorical


class Ignores(nn.Module):
    @nn.compact
    def __call__(self, obs):
        x = nn.Dense(8)(obs["cue"])
        return Categorical(nn.Dense(4)(x)), nn.Dense(1)(x)[..., 0]


def ignores_mask(action_dim, discrete, obs_shape, config):
    return Ignores()
"""


def test_your_own_network_gets_the_dict_and_its_policy_is_masked(tmp_path, monkeypatch):
    (tmp_path / "spaces_nets.py").write_text(NETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = fusedrl.PPOConfig(env_id="test:MaskTrap-v0", network="spaces_nets:ignores_mask")
    train = fusedrl.make_train(config)
    state = train.init(jax.random.key(0))
    _, pi, _ = train.policy_step(state.params, None, state.obs)
    masked = ~np.asarray(state.obs["action_mask"])
    assert masked.any() and np.all(np.asarray(pi.logits)[masked] == MASKED_LOGIT)


# ---------------------------------------------------------------------------------- validation
def test_cnn_without_an_image_is_refused_before_compiling():
    with pytest.raises(ValueError, match=r"network='cnn' needs an image-like observation.*cue \(3,\)"):
        fusedrl.make_train(fusedrl.PPOConfig(env_id="test:MaskTrap-v0", network="cnn"))
    with pytest.raises(ValueError, match=r"network='cnn' needs an image-like observation.*obs \(4,\)"):
        fusedrl.make_train(fusedrl.PPOConfig(env_id="CartPole-v1", network="cnn"))


class TupleActions(Pixels):
    def action_space(self, params=None):
        return spaces.Tuple([Discrete(2), Discrete(3)])


class AgentAxis(Pixels):
    def action_space(self, params=None):
        return Box(-1.0, 1.0, (3, 2), jnp.float32)  # one 2-D action per agent of 3


fusedrl.register("test:TupleActions-v0", TupleActions)
fusedrl.register("test:AgentAxis-v0", AgentAxis)


@pytest.mark.parametrize("env_id, name", [("test:TupleActions-v0", "Tuple"), ("test:AgentAxis-v0", r"Box")])
def test_unsupported_action_spaces_are_named(env_id, name):
    with pytest.raises(ValueError, match=rf"action space .*{name}.* is not supported.*MultiDiscrete"):
        fusedrl.make_train(fusedrl.PPOConfig(env_id=env_id))


def test_cli_set_network_cnn_is_a_valid_config():
    for make_config in (fusedrl.PPOConfig, fusedrl.A2CConfig, fusedrl.ReinforceConfig):
        train = fusedrl.make_train(make_config(env_id="test:Pixels-v0", network="cnn"))
        assert train.cnn and train.network.torso == "cnn"
    from fusedrl._argtypes import parse_overrides

    assert parse_overrides(["network=cnn"]) == {"network": "cnn"}  # fusedrl train --set network=cnn
    with pytest.raises(ValueError, match='"cnn"'):
        fusedrl.PPOConfig(network="resnet")
