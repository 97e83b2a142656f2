"""The JaxMARL adapter (`jaxmarl:<name>`, fusedrl.envs._jaxmarl) against JaxMARL itself: each agent's
observation and reward are JaxMARL's for the same state, key and actions; MPE's 25-step limit is a
truncation (JaxMARL calls it done); envs whose agents differ are refused by name; PPO trains on it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jaxmarl = pytest.importorskip("jaxmarl", reason="jaxmarl is not installed (pip install -e \".[jaxmarl]\")")

import fusedrl  # noqa: E402
from fusedrl.envs import wrappers as W  # noqa: E402
from fusedrl.envs.multiagent import TeamEnv  # noqa: E402
from fusedrl.train import PPOConfig, make_train  # noqa: E402

SPREAD = "MPE_simple_spread_v3"


def _own(name):
    with jax.numpy_rank_promotion("allow"):
        return jaxmarl.make(name)


@pytest.mark.parametrize("name", [SPREAD, "MPE_simple_reference_v3"])
def test_a_team_step_is_jaxmarls(name):
    env, params = fusedrl.make(f"jaxmarl:{name}")
    own = _own(name)
    assert params is None and env.agents == own.agents and env.max_steps == own.max_steps == 25
    for a in own.agents:  # JaxMARL's spaces, as gymnax's
        assert env.action_space(a).n == own.action_space(a).n
        assert env.observation_space(a).shape == own.observation_space(a).shape
    team = TeamEnv(env, env_id=name)
    step = jax.jit(team.step_env)
    with jax.numpy_rank_promotion("allow"):
        own_step = jax.jit(own.step_env)
        _, state = own.reset(jax.random.key(0))
    obs, tstate = team.reset_env(jax.random.key(0))
    rng = np.random.default_rng(0)
    n = own.action_space(own.agents[0]).n
    for t in range(1, 27):
        key = jax.random.key(t)
        action = jnp.asarray(rng.integers(0, n, team.num_agents), jnp.int32)
        with jax.numpy_rank_promotion("allow"):
            actions = {a: action[i] for i, a in enumerate(own.agents)}
            want_obs, state, rewards, dones, _ = own_step(key, state, actions)
        obs, tstate, reward, terminated, info = step(key, tstate, action)
        for i, a in enumerate(own.agents):
            np.testing.assert_allclose(obs["obs"][i], want_obs[a], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(info["agent_reward"][i], rewards[a], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(reward, np.mean([rewards[a] for a in own.agents]), rtol=1e-6)
        # JaxMARL ends MPE at its step limit only (on step 26): a truncation here, never a termination.
        assert bool(dones["__all__"]) == (t == 26)
        assert not bool(terminated)
        assert bool(team.is_truncated(tstate)) == (t == 26)


def test_envs_whose_agents_differ_are_refused_by_name():
    with pytest.raises(ValueError, match="MPE_simple_tag_v3 is not offered yet: its agents differ"):
        fusedrl.make("jaxmarl:MPE_simple_tag_v3")
    assert "jaxmarl:MPE_simple_spread_v3" in fusedrl.envs.registered_ids(include_suites=True)


def test_ppo_trains_on_simple_spread_with_episodes_of_26_steps():
    config = PPOConfig(env_id=f"jaxmarl:{SPREAD}", num_envs=4, num_steps=26, total_timesteps=4 * 26 * 2,
                       num_minibatches=2, hidden_sizes=(16,), critic="centralized")
    train = make_train(config)
    result = jax.jit(train)(jax.random.key(0))
    m = {k: np.asarray(v) for k, v in result.metrics.items()}
    assert (m["episode_length"] == 26).all() and (m["episodes_completed"] == 4).all()
    assert np.isfinite(m["policy_loss"]).all()
    assert (m["episode_return"] < 0).all()  # simple spread's rewards are costs
    hp = train.default_hparams()
    venv = train.make_env(hp)
    obs, _ = venv.reset(jax.random.key(0), hp.env_params)
    assert obs["world_state"].shape == (4 * 3, 3 * 18)  # every agent's observation, per row
    assert isinstance(W.find_wrapper(venv, W.EpisodeStatistics), W.EpisodeStatistics)
