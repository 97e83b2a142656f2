"""The JaxMARL adapter (`jaxmarl:<name>`, fusedrl.envs._jaxmarl) against JaxMARL itself: each agent's
observation and reward are JaxMARL's for the same state, key and actions; MPE's 25-step limit is a
truncation (JaxMARL calls it done); envs whose agents differ are refused by name; PPO trains on it."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jaxmarl = pytest.importorskip("jaxmarl", reason="jaxmarl is not installed (pip install -e \".[jaxmarl]\")")

import fusedrl  # noqa: E402
from fusedrl.envs import wrappers as W  # noqa: E402
from fusedrl.envs.multiagent import TeamEnv  # noqa: E402
from fusedrl.train import PPOConfig, make_train  # noqa: E402

pytestmark = [pytest.mark.suite]

SPREAD = "MPE_simple_spread_v3"


def _own(name):
    """JaxMARL's env for our id, built here with JaxMARL's own API (not the adapter's builder)."""
    from jaxmarl.environments.overcooked import overcooked_layouts
    from jaxmarl.environments.smax import map_name_to_scenario

    with jax.numpy_rank_promotion("allow"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Overcooked's "OvercookedV2 is released"
        if name.startswith("smax_"):
            return jaxmarl.make("HeuristicEnemySMAX", scenario=map_name_to_scenario(name[len("smax_"):]))
        if name.startswith("overcooked_"):
            return jaxmarl.make("overcooked", layout=overcooked_layouts[name[len("overcooked_"):]])
        return jaxmarl.make(name)


def _own_masks(name, own, state):
    """JaxMARL's own action masks {agent: bool [n_a]}, or None where it has none."""
    if name == "hanabi":
        return own.get_legal_moves(state)
    if name.startswith("smax_"):
        return own.get_avail_actions(state)
    return None


def _own_time_limit(name, own, state, t):
    """Whether an episode that JaxMARL ends after step t (its state `state`) ends at a time limit, in
    JaxMARL's own terms: MPE's and Overcooked's only end is their step limit; SMAX's is_terminal is
    the battle's end or the limit, so the limit is `is_terminal` false once the step count is reset;
    Hanabi has none."""
    if name.startswith("smax_"):
        return not bool(own.is_terminal(state.replace(state=state.state.replace(step=0))))
    return not name == "hanabi"


# (name, steps): MPE ends on step 26, Overcooked on step 400; SMAX's and Hanabi's episodes end by play.
STEPPED = [(SPREAD, 60), ("MPE_simple_reference_v3", 30), ("MPE_simple_speaker_listener_v4", 30),
           ("MPE_simple_tag_v3", 30), ("smax_3m", 120), ("smax_2s3z", 40), ("overcooked_cramped_room", 410),
           ("hanabi", 120)]


@pytest.mark.parametrize("name, steps", STEPPED, ids=[n for n, _ in STEPPED])
def test_a_team_step_is_jaxmarls(name, steps):
    """Step by step against JaxMARL's own step_env on the same state, key and actions (random actions
    among those JaxMARL allows): each agent's observation (zero-padded to the largest), reward, action
    mask (JaxMARL's, False beyond an agent's own actions), global state (SMAX's world_state, else
    every agent's observation), and each end of episode a truncation exactly when JaxMARL's end is
    its time limit, else a termination. Episodes are reset with the same key on both sides."""
    env, params = fusedrl.make(f"jaxmarl:{name}")
    own = _own(name)
    assert params is None and env.agents == own.agents
    assert env.max_steps == getattr(own, "max_steps", None)
    team = TeamEnv(env, world_state=True, env_id=name)
    sizes = [int(own.action_space(a).n) for a in own.agents]
    n = max(sizes)
    step, reset = jax.jit(team.step_env), jax.jit(team.reset_env)
    with jax.numpy_rank_promotion("allow"):
        own_step, own_reset = jax.jit(own.step_env), jax.jit(own.reset)
        own_masks = jax.jit(lambda state: _own_masks(name, own, state))  # one compile, not op by op
        want_obs, state = own_reset(jax.random.key(0))
    for i, a in enumerate(own.agents):  # JaxMARL's spaces, as gymnax's (shapes: what reset returns)
        assert env.action_space(a).n == sizes[i]
        assert env.observation_space(a).shape == np.shape(want_obs[a]), a
    obs, tstate = reset(jax.random.key(0))
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    t = 0
    for k in range(1, steps + 1):
        with jax.numpy_rank_promotion("allow"):
            masks = own_masks(state)
        # The rows before the step: observations, masks, global state.
        flat = [np.asarray(want_obs[a], np.float32).reshape(-1) for a in own.agents]
        for i, a in enumerate(own.agents):
            np.testing.assert_allclose(obs["obs"][i, :flat[i].size], flat[i], rtol=1e-6, atol=1e-6)
            assert not np.asarray(obs["obs"][i, flat[i].size:]).any()  # zero padding
            allowed = np.arange(n) < sizes[i]
            if masks is not None:
                allowed &= np.pad(np.asarray(masks[a]).astype(bool), (0, n - sizes[i]))
            if "action_mask" in obs:
                np.testing.assert_array_equal(obs["action_mask"][i], allowed)
            else:
                assert allowed.all()
        world = want_obs["world_state"] if "world_state" in want_obs else np.concatenate(flat)
        np.testing.assert_allclose(obs["world_state"], np.tile(world, (len(own.agents), 1)), rtol=1e-6)
        choice = np.asarray(obs["action_mask"]) if "action_mask" in obs else np.ones((len(sizes), n), bool)
        action = jnp.asarray([rng.choice(np.flatnonzero(m)) for m in choice], jnp.int32)
        key = jax.random.key(k)
        with jax.numpy_rank_promotion("allow"):
            actions = {a: action[i] for i, a in enumerate(own.agents)}
            want_obs, state, rewards, dones, _ = own_step(key, state, actions)
        obs, tstate, reward, terminated, info = step(key, tstate, action)
        t += 1
        for i, a in enumerate(own.agents):
            np.testing.assert_allclose(info["agent_reward"][i], rewards[a], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(reward, np.mean([rewards[a] for a in own.agents]), rtol=1e-6, atol=1e-7)
        done = bool(dones["__all__"])
        truncated = bool(team.is_truncated(tstate))
        with jax.numpy_rank_promotion("allow"):
            time_limit = done and _own_time_limit(name, own, state, t)
        assert (truncated, bool(terminated)) == (time_limit, done and not time_limit), (k, t)
        if name.startswith("MPE"):
            assert done == (t == 26)
        if name.startswith("overcooked"):
            assert done == (t == 400)
        if done:
            ends["truncated" if truncated else "terminated"] += 1
            with jax.numpy_rank_promotion("allow"):
                want_obs, state = own_reset(key)
            obs, tstate = reset(key)
            t = 0
    if name.startswith(("MPE", "overcooked")):
        assert ends["truncated"] >= 1 and ends["terminated"] == 0
    elif name in ("smax_3m", "hanabi"):
        assert ends["terminated"] >= 1, ends


def test_smax_ends_a_battle_won_on_its_last_step_as_a_termination():
    """SMAX's time limit is a truncation, a battle over on the same step a termination: JaxMARL ends an
    episode on the step after its step count reached max_steps (100), as it does MPE's; the state of
    that step with every unit alive ends at the time limit, the same state with the enemies' health
    at 0 (alive before the step, dead after it: the battle is won on that step; JaxMARL's is_terminal
    is True for both) ends the battle."""
    env, _ = fusedrl.make("jaxmarl:smax_3m")
    team = TeamEnv(env, env_id="smax_3m")
    own = _own("smax_3m")
    _, tstate = jax.jit(team.reset_env)(jax.random.key(0))
    inner = tstate.inner.state
    stop = jnp.full((3,), 4, jnp.int32)  # SMAX's stop action: no unit moves out or is shot
    late = tstate.replace(time=jnp.int32(100),
                          inner=tstate.inner.replace(state=inner.replace(step=jnp.int32(100))))
    _, after, _, terminated, _ = jax.jit(team.step_env)(jax.random.key(1), late, stop)
    assert bool(after.inner.state.unit_alive.all()) and int(after.inner.state.step) == 101
    assert bool(team.is_truncated(after)) and not bool(terminated)
    dead = jnp.arange(6) >= 3  # the enemies: alive before the step, they die in it: the battle is won on it
    beaten = late.inner.state.replace(unit_health=jnp.where(dead, 0.0, inner.unit_health))
    assert bool(beaten.unit_alive.all())
    _, won, reward, terminated, _ = jax.jit(team.step_env)(jax.random.key(1), late.replace(
        inner=late.inner.replace(state=beaten)), stop)
    with jax.numpy_rank_promotion("allow"):
        assert bool(own.is_terminal(won.inner)) and bool(own.is_terminal(after.inner))
    assert not bool(won.inner.state.unit_alive[3:].any())
    assert bool(terminated) and not bool(team.is_truncated(won)) and float(reward) >= 1.0  # the win bonus


def test_envs_not_offered_are_refused_by_name_with_the_reason():
    with pytest.raises(ValueError, match="world_comm_v3 is not offered: its agents act continuously"):
        fusedrl.make("jaxmarl:MPE_simple_world_comm_v3")
    with pytest.raises(ValueError, match="SMAX is not offered: its agents are both teams.*jaxmarl:smax_3m"):
        fusedrl.make("jaxmarl:SMAX")
    with pytest.raises(ValueError, match="overcooked is not offered: name the layout"):
        fusedrl.make("jaxmarl:overcooked")
    with pytest.raises(ValueError, match="coin_game is not offered yet"):
        fusedrl.make("jaxmarl:coin_game")
    ids = fusedrl.envs.registered_ids(include_suites=True)
    for name in ("MPE_simple_spread_v3", "MPE_simple_speaker_listener_v4", "smax_3m", "HeuristicEnemySMAX",
                 "overcooked_cramped_room", "hanabi"):
        assert f"jaxmarl:{name}" in ids


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


@pytest.mark.slow
@pytest.mark.parametrize("name, critic", [("smax_3m", "centralized"), ("hanabi", "decentralized")])
def test_ppo_on_masked_envs_takes_only_allowed_actions(name, critic):
    """PPO's rollouts (MAPPO on SMAX: its critic reads SMAX's world_state; IPPO on Hanabi, where the
    player not to move may only pass) take only the actions JaxMARL's masks allow, over two updates."""
    config = PPOConfig(env_id=f"jaxmarl:{name}", num_envs=2, num_steps=16, total_timesteps=2 * 16 * 2,
                       num_minibatches=1, update_epochs=1, hidden_sizes=(16,), critic=critic)
    train = make_train(config)
    hp = train.default_hparams()
    venv = train.make_env(hp)
    rollout = jax.jit(lambda state, key: train.rollout(state, hp, venv, key))
    learn = jax.jit(train.learn_from_rollout)
    state = jax.jit(train.init)(jax.random.key(0), hp)
    for _ in range(config.num_updates):
        key, k_roll = jax.random.split(state.key)
        state, traj = rollout(state.replace(key=key), k_roll)
        mask, action = np.asarray(traj.obs["action_mask"]), np.asarray(traj.action)
        assert np.take_along_axis(mask, action[..., None], axis=-1).all()
        assert (~mask).any()  # the masks rule actions out
        state, metrics = learn(state, traj, hp)
        assert np.isfinite(float(metrics["policy_loss"]))
    if critic == "centralized":
        assert traj.obs["world_state"].shape[-1] == 72  # SMAX 3m's state_size: 6 units x 12 features


def test_fusedrl_envs_lists_each_distinct_agent_space():
    """`fusedrl envs --suites` shows agents that differ (and are padded) with each one's own space."""
    from fusedrl.cli import _agent_spaces

    env, _ = fusedrl.make("jaxmarl:MPE_simple_tag_v3")
    shown = _agent_spaces(env.agents, env.observation_space)
    assert shown.startswith("3 agents x Box((16,)") and " + 1 agent x Box((14,)" in shown, shown
    assert _agent_spaces(env.agents, env.action_space) == "4 agents x Discrete(5)"
