"""Probe envs (fusedrl.envs.probes): a learner learns each one's known answer in seconds.

`assert_learns_probe(config_or_cls, env_id)` is the check; parametrise it over algorithms (any config
type `fusedrl.make_train` takes) to show that each one learns. The probes' conformance (spaces,
auto-reset, VecEnv, jit/vmap) is checked with every registered env in tests/test_env_conformance.py.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl
from fusedrl.envs import PROBE_IDS

#: A budget each probe is learned within, on tiny networks. Fields a config type lacks are skipped.
PROBE_SETTINGS = dict(num_envs=16, num_steps=8, total_timesteps=16 * 8 * 100, num_minibatches=2,
                      update_epochs=4, hidden_sizes=(16,), lr=3e-3, anneal_lr=False)

#: What each probe's learned policy must return per episode on average over `NUM_EPISODES`
#: (`fusedrl.evaluate`): greedy, and for the discrete probes also sampling its actions (so that the
#: right action is taken with probability >= 0.9, not merely preferred). A random policy returns 0.5
#: on the discrete probes; one that always acts 0 returns 0.75 on the continuous one.
LEARNED_RETURN = {
    "probe:ActionReward-v0": {"greedy": 1.0, "sampled": 0.9},
    "probe:ContinuousActionReward-v0": {"greedy": 0.96},
    "probe:TwoStep-v0": {"greedy": 1.0, "sampled": 0.9},
}
NUM_EPISODES = 256
VALUE_TOLERANCE = 0.1  # |V - 1| for probe:ConstantReward-v0


def probe_config(config_or_cls, env_id: str, **overrides):
    """The config that trains `env_id`: `config_or_cls` with its env id replaced, or, for a config
    class, an instance with `PROBE_SETTINGS` (those fields it has) and `overrides`."""
    if isinstance(config_or_cls, type):
        fields = {f.name for f in dataclasses.fields(config_or_cls)}
        settings = {k: v for k, v in {**PROBE_SETTINGS, **overrides}.items() if k in fields}
        return config_or_cls(env_id=env_id, **settings)
    return dataclasses.replace(config_or_cls, env_id=env_id, **overrides)


@functools.cache
def _compiled(config):
    """(trainer, jitted train) of a config: one compile, shared by every check of it."""
    train = fusedrl.make_train(config)
    return train, jax.jit(train)


def assert_learns_probe(config_or_cls, env_id: str, *, seed: int = 0, hparams=None, **overrides) -> dict:
    """Trains `env_id` (a probe id) with `config_or_cls` (a config, or a config class given
    `PROBE_SETTINGS`) and asserts that the result learned the probe's answer: the critic's value of
    the first observation within `VALUE_TOLERANCE` of 1 (ConstantReward), or the policy's mean
    returns at least `LEARNED_RETURN[env_id]` (the others). `hparams`: the traced hyperparameters
    to train with (default: the config's), without a new compile. Returns what it measured."""
    config = probe_config(config_or_cls, env_id, **overrides)
    train, jitted = _compiled(config)
    result = jitted(jax.random.key(seed), config.hparams() if hparams is None else hparams)
    measured = {}
    if env_id == "probe:ConstantReward-v0":
        # The first policy call of an episode (a recurrent policy from its initial carry).
        first = jnp.zeros((1, 1), jnp.float32)
        _, _, value = train.policy_step(result.params, train.initial_policy_state(1), first)
        v = measured["value"] = float(value[0])
        assert abs(v - 1.0) < VALUE_TOLERANCE, f"{env_id}: V(first obs) = {v:.3f}, not 1"
        return measured
    for mode, threshold in LEARNED_RETURN[env_id].items():
        returns = fusedrl.evaluate(config, result, jax.random.key(seed + 1), num_episodes=NUM_EPISODES,
                                   greedy=mode == "greedy")
        mean = measured[mode] = float(np.mean(returns))
        assert mean >= threshold, (f"{env_id}: the {mode} policy returns {mean:.3f} on average, expected at "
                                   f"least {threshold}")
    return measured


#: Each algorithm's config class and its settings on top of `PROBE_SETTINGS`. A2C and REINFORCE take
#: one gradient step per rollout (PPO takes update_epochs * num_minibatches = 8), so a larger step
#: size lets them learn within the same budget of env steps. REINFORCE's rollouts span the probes'
#: time limit (10 steps), as `ReinforceConfig` requires, and it takes A2C's optimiser (RMSprop).
ALGORITHMS = {
    "ppo": (fusedrl.PPOConfig, {}),
    "a2c": (fusedrl.A2CConfig, dict(lr=1e-2)),
    "reinforce": (fusedrl.ReinforceConfig, dict(num_steps=10, lr=1e-2, optimizer="rmsprop")),
}


#: Recurrent PPO's settings on top of `PROBE_SETTINGS`.
RECURRENT = dict(recurrent="gru", recurrent_size=16)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", PROBE_IDS)
@pytest.mark.parametrize("algo", list(ALGORITHMS))
@pytest.mark.slow
def test_each_algorithm_learns_each_probe(algo, env_id):
    config_cls, overrides = ALGORITHMS[algo]
    assert_learns_probe(config_cls, env_id, **overrides)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_recurrent_ppo_learns_credit_assignment_over_time():
    # The GRU's carry runs through the rollout and is reset at each episode's start; the two-step
    # probe's first action is rewarded only at the second step.
    assert_learns_probe(fusedrl.PPOConfig, "probe:TwoStep-v0", **RECURRENT)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_the_probes_fail_a_learner_that_does_not_learn():
    # The thresholds are real: with a learning rate of 1e-9 the same program learns nothing. (The
    # thresholds are the algorithms' common ones: PPO's programs show it for all.)
    for env_id in PROBE_IDS:
        hparams = probe_config(fusedrl.PPOConfig, env_id).hparams().replace(lr=1e-9)
        with pytest.raises(AssertionError, match=env_id):
            assert_learns_probe(fusedrl.PPOConfig, env_id, hparams=hparams)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_the_two_step_probe_fails_a_recurrent_learner_that_does_not_learn():
    hparams = probe_config(fusedrl.PPOConfig, "probe:TwoStep-v0", **RECURRENT).hparams().replace(lr=1e-9)
    with pytest.raises(AssertionError, match="probe:TwoStep-v0"):
        assert_learns_probe(fusedrl.PPOConfig, "probe:TwoStep-v0", hparams=hparams, **RECURRENT)


@pytest.mark.parametrize("env_id", ["probe:ConstantReward-v0", "probe:ActionReward-v0"])
@pytest.mark.parametrize("algo", list(ALGORITHMS))
@pytest.mark.slow
def test_mixed_precision_learns_the_probes_with_float32_parameters(algo, env_id):
    # compute_dtype="bfloat16", for every algorithm (they share the built-in MLP): the layers compute
    # in bfloat16, and the critic's value and the policy's answer are still learned; parameters and
    # the optimiser's state (Adam's moments, RMSprop's average) stay float32.
    config_cls, overrides = ALGORITHMS[algo]
    config = probe_config(config_cls, env_id, compute_dtype="bfloat16", **overrides)
    assert_learns_probe(config, env_id)
    train, jitted = _compiled(config)
    state = jitted(jax.random.key(0), config.hparams()).state
    assert {x.dtype for x in jax.tree.leaves((state.params, state.opt_state))
            if jnp.issubdtype(x.dtype, jnp.floating)} == {jnp.dtype(jnp.float32)}
    assert "bf16" in jax.jit(train).lower(jax.random.key(0)).as_text()


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_compute_dtype_errors_name_the_field_and_the_fix(algo):
    config_cls, _ = ALGORITHMS[algo]
    with pytest.raises(ValueError, match=r"compute_dtype must be 'float32' or 'bfloat16' .*got 'float16'"):
        config_cls(compute_dtype="float16")
    with pytest.raises(ValueError) as info:
        config_cls(compute_dtype="bfloat16", network="my_nets:net")
    message = str(info.value)
    assert "applies to the built-in networks only" in message and "network=None" in message
    assert config_cls(compute_dtype="bfloat16").to_dict()["compute_dtype"] == "bfloat16"

