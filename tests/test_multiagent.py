"""Multi-agent envs on JaxMARL's `MultiAgentEnv` contract: IPPO and MAPPO on the one trainer.

The env is docs/examples/my_team.py's `MatchingTeam` (two agents see the same cue and score by
picking different actions, so only the one-hot agent id lets one shared policy solve it), plus small
envs defined here: two that terminate early (termination against truncation; one ends a step after
its step count reaches max_steps, as JaxMARL's MPE does), a trap whose masked actions pay most
(masks honoured), three agents that differ (padding, masks and global state against NumPy) and
envs that break the contract (refused by name).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys
import types

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import spaces
from jax.flatten_util import ravel_pytree

import fusedrl
from fusedrl.envs import wrappers as W
from fusedrl.train import A2CConfig, PPOConfig, ReinforceConfig, make_train

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV_ID = "MatchingTeam-v0"
MAX_STEPS = 8  # MatchingTeam's default time limit


# --------------------------------------------------------------------------------- test envs
@struct.dataclass
class StepState:
    step: jax.Array  # [] int32


class EndsEarly:
    """Ends (terminated) on the step agent_0 picks action 1; else at max_steps (a time limit)."""

    agents = ["agent_0", "agent_1"]
    num_agents = 2
    max_steps = 5

    def observation_space(self, agent):
        return spaces.Box(0.0, 10.0, (1,), jnp.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, key):
        s = StepState(jnp.int32(0))
        return self.get_obs(s), s

    def get_obs(self, s):
        return {a: jnp.full((1,), s.step, jnp.float32) for a in self.agents}

    def step_env(self, key, s, actions):
        new = StepState(s.step + 1)
        done = (actions["agent_0"] == 1) | (new.step >= self.max_steps)
        rewards = {"agent_0": jnp.float32(1.0), "agent_1": jnp.float32(3.0)}
        return self.get_obs(new), new, rewards, {"agent_0": done, "agent_1": done, "__all__": done}, {}


class Trap:
    """Three actions; action 1 pays 1. agent_0 may not take action 2, agent_1 not action 0, and those
    pay 10: a policy that escaped its mask would learn to take them."""

    agents = ["agent_0", "agent_1"]
    num_agents = 2
    max_steps = 4
    FORBIDDEN = (2, 0)

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def reset(self, key):
        s = StepState(jnp.int32(0))
        return self.get_obs(s), s

    def get_obs(self, s):
        return {a: jnp.zeros((2,), jnp.float32) for a in self.agents}

    def get_avail_actions(self, s):
        return {a: jnp.arange(3) != f for a, f in zip(self.agents, self.FORBIDDEN, strict=True)}

    def step_env(self, key, s, actions):
        new = StepState(s.step + 1)
        rewards = {a: jnp.where(actions[a] == f, 10.0, jnp.where(actions[a] == 1, 1.0, 0.0))
                   for a, f in zip(self.agents, self.FORBIDDEN, strict=True)}
        done = new.step >= self.max_steps
        return self.get_obs(new), new, rewards, {"agent_0": done, "agent_1": done, "__all__": done}, {}


class PaddedTrap(Trap):
    """Trap whose agents differ: agent_0 has 2 actions and a 1-number observation, agent_1 3 actions
    and a 3-number one; the rows pad agent_0's to 3 and mask its action 2 (which would pay 10, as
    agent_1's own masked action 0 does)."""

    FORBIDDEN = (2, 0)

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (1,) if agent == "agent_0" else (3,), jnp.float32)

    def action_space(self, agent):
        return spaces.Discrete(2 if agent == "agent_0" else 3)

    def get_obs(self, s):
        return {"agent_0": jnp.full((1,), 0.5, jnp.float32), "agent_1": jnp.full((3,), 0.25, jnp.float32)}

    def get_avail_actions(self, s):
        return {"agent_0": jnp.ones((2,), bool), "agent_1": jnp.arange(3) != 0}


class MixedKinds(EndsEarly):
    def action_space(self, agent):
        return spaces.Discrete(2) if agent == "agent_0" else spaces.Box(-1.0, 1.0, (2,), jnp.float32)


class BoxSizes(EndsEarly):
    def action_space(self, agent):
        return spaces.Box(-1.0, 1.0, (2,) if agent == "agent_0" else (3,), jnp.float32)


class EndsLate(EndsEarly):
    """Ends (terminated) on the step agent_0 picks action 1; else on step max_steps + 1, one step after
    its step count reached max_steps (as JaxMARL's MPE does): that end is the time limit too."""

    def step_env(self, key, s, actions):
        new = StepState(s.step + 1)
        done = (actions["agent_0"] == 1) | (new.step > self.max_steps)
        rewards = {"agent_0": jnp.float32(1.0), "agent_1": jnp.float32(3.0)}
        return self.get_obs(new), new, rewards, {"agent_0": done, "agent_1": done, "__all__": done}, {}


class Uneven:
    """Three agents that differ, for `TeamEnv` on its own: agent i sees i + 1 numbers (10 * i + the
    step count, then 1, 2, ...), has 2 + (i > 0) actions, is paid 10 * i + its action, and (`masked`)
    may not take action (step + i) % its number of actions. Ends after `max_steps` steps."""

    agents = ["agent_0", "agent_1", "agent_2"]
    num_agents = 3
    max_steps = 3
    SIZES = (2, 3, 3)

    def __init__(self, masked=True):
        if masked:
            self.get_avail_actions = self._avail

    def observation_space(self, agent):
        return spaces.Box(0.0, 100.0, (self.agents.index(agent) + 1,), jnp.float32)

    def action_space(self, agent):
        return spaces.Discrete(self.SIZES[self.agents.index(agent)])

    def reset(self, key):
        s = StepState(jnp.int32(0))
        return self.get_obs(s), s

    def get_obs(self, s):
        return {a: jnp.concatenate([jnp.full((1,), 10.0 * i + s.step), jnp.arange(1.0, i + 1.0)])
                for i, a in enumerate(self.agents)}

    def _avail(self, s):
        return {a: jnp.arange(n) != (s.step + i) % n
                for i, (a, n) in enumerate(zip(self.agents, self.SIZES, strict=True))}

    def step_env(self, key, s, actions):
        new = StepState(s.step + 1)
        rewards = {a: 10.0 * i + actions[a] for i, a in enumerate(self.agents)}
        done = new.step >= self.max_steps
        return self.get_obs(new), new, rewards, {**{a: done for a in self.agents}, "__all__": done}, {}


class NoDuplicates(EndsEarly):
    agents = ["agent_0", "agent_0"]


class Miscounted(EndsEarly):
    num_agents = 3


class NoSpaces:
    """EndsEarly without observation_space."""

    agents, num_agents = EndsEarly.agents, 2
    reset, step_env, get_obs = EndsEarly.reset, EndsEarly.step_env, EndsEarly.get_obs
    action_space = EndsEarly.action_space


class BoxBounds(EndsEarly):
    def action_space(self, agent):
        return spaces.Box(-1.0, 1.0 if agent == "agent_0" else 2.0, (2,), jnp.float32)


def shifted_team(base):
    """MatchingTeam where agent i sees the cue shifted by i: the agents' observations differ (so an
    observation or global state built from the wrong agent shows)."""
    class ShiftedTeam(base):
        def get_obs(self, state):
            return {a: jax.nn.one_hot((state.cue + i) % self.num_cues, self.num_cues, dtype=jnp.float32)
                    for i, a in enumerate(self.agents)}

    return ShiftedTeam


@pytest.fixture(scope="module", autouse=True)
def my_team(docs_example):
    """docs/examples/my_team.py imported (it registers MatchingTeam-v0) and the test envs registered,
    for this file."""
    with docs_example("my_team") as module:
        fusedrl.register("ShiftedTeam-v0", shifted_team(module.MatchingTeam))
        fusedrl.register("EndsEarly-v0", EndsEarly)
        fusedrl.register("EndsLate-v0", EndsLate)
        fusedrl.register("Trap-v0", Trap)
        fusedrl.register("PaddedTrap-v0", PaddedTrap)
        fusedrl.register("MixedKinds-v0", MixedKinds)
        fusedrl.register("BoxSizes-v0", BoxSizes)
        fusedrl.register("Reach-v0", Reach)
        yield module


# ------------------------------------------------------------------------------ the contract
def test_make_returns_the_users_env_and_refuses_params(my_team):
    env, params = fusedrl.make(ENV_ID)
    assert isinstance(env, my_team.MatchingTeam) and params is None
    with pytest.raises(TypeError, match="multi-agent env .* no params"):
        fusedrl.make(ENV_ID, max_steps=3)


def test_what_the_learners_cannot_take_is_refused_by_name():
    with pytest.raises(ValueError, match=r"MixedKinds-v0: the agents' action spaces differ \(agent_0: "
                       r"Discrete\(2\), agent_1: Box\(shape=\(2,\).*nor a mix of discrete and continuous"):
        fusedrl.make("MixedKinds-v0")
    with pytest.raises(ValueError, match=r"BoxSizes-v0: .*agent_0: Box\(shape=\(2,\).*"
                       r"agent_1: Box\(shape=\(3,\)"):
        fusedrl.make("BoxSizes-v0")
    with pytest.raises(ValueError, match="critic='centralized'.*CartPole-v1 has one agent"):
        make_train(PPOConfig(env_id="CartPole-v1", critic="centralized"))
    with pytest.raises(ValueError, match="share_parameters=False.*one agent"):
        make_train(PPOConfig(env_id="CartPole-v1", share_parameters=False))
    with pytest.raises(ValueError, match="agent_id=False.*CartPole-v1 has one agent.*use agent_id=True"):
        make_train(PPOConfig(env_id="CartPole-v1", agent_id=False))
    with pytest.raises(TypeError, match="agent_id must be True or False"):
        PPOConfig(env_id=ENV_ID, agent_id="no")
    with pytest.raises(ValueError, match="clip_grad_per_network=True .* two networks: critic='centralized'"):
        PPOConfig(env_id=ENV_ID, clip_grad_per_network=True)
    with pytest.raises(ValueError, match="critic must be 'decentralized'.*or 'centralized'"):
        PPOConfig(env_id=ENV_ID, critic="central")
    with pytest.raises(ValueError, match="share_parameters=False builds .* network='cnn'"):
        make_train(PPOConfig(env_id=ENV_ID, share_parameters=False, network="cnn"))


def test_what_breaks_the_contract_is_refused_by_name():
    """An env whose agents are not distinct names, whose num_agents miscounts them, that lacks part of
    the contract, or whose agents' continuous actions differ in bounds only: a clear error each."""
    from fusedrl.envs.multiagent import check_multi_agent_env

    with pytest.raises(ValueError, match=r"Dup: env.agents must be a non-empty list of distinct agent names"):
        check_multi_agent_env("Dup", NoDuplicates())
    with pytest.raises(ValueError, match=r"Count: env.num_agents is 3 but env.agents names 2"):
        check_multi_agent_env("Count", Miscounted())
    with pytest.raises(TypeError, match=r"Bare: a multi-agent env .* needs observation_space"):
        check_multi_agent_env("Bare", NoSpaces())
    with pytest.raises(ValueError, match=r"Bounds: the agents' action spaces differ \(agent_0: Box\(shape="
                       r"\(2,\), low=\(-1.0, -1.0\), high=\(1.0, 1.0\)\), agent_1: Box\(shape=\(2,\), "
                       r"low=\(-1.0, -1.0\), high=\(2.0, 2.0\)\)"):
        check_multi_agent_env("Bounds", BoxBounds())


@pytest.mark.parametrize("masked", [True, False], ids=["env-masks", "padding-only"])
def test_a_team_of_agents_that_differ_against_numpy(masked):
    """`TeamEnv` on its own, step by step against the rows written out in NumPy: each agent's
    observation zero-padded on the right to the largest (3), its one-hot id, its mask (the env's for
    the state after the step, False from its own number of actions on; padding only without the
    env's), the global state (every agent's observation unpadded, the same in each row), each agent's
    reward for its own action, the team reward their mean; the time limit a truncation."""
    from fusedrl.envs.multiagent import TeamEnv

    team = TeamEnv(Uneven(masked), world_state=True, env_id="Uneven")
    step, sizes = jax.jit(team.step_env), np.array(Uneven.SIZES)

    def want(t):  # the rows at step count t
        own = [np.r_[10.0 * i + t, np.arange(1.0, i + 1.0)] for i in range(3)]
        mask = np.arange(3)[None, :] < sizes[:, None]
        if masked:
            mask &= np.arange(3)[None, :] != ((t + np.arange(3)) % sizes)[:, None]
        return {"obs": np.stack([np.pad(o, (0, 3 - o.size)) for o in own]), "agent": np.eye(3),
                "action_mask": mask, "world_state": np.tile(np.concatenate(own), (3, 1))}

    obs, state = team.reset_env(jax.random.key(0))
    for t in range(1, Uneven.max_steps + 1):
        for k, v in want(t - 1).items():
            np.testing.assert_array_equal(obs[k], v, err_msg=f"{k} at step {t - 1}")
        action = (t + np.arange(3)) % sizes  # a different action for each agent
        obs, state, reward, terminated, info = step(jax.random.key(t), state, jnp.asarray(action, jnp.int32))
        paid = 10.0 * np.arange(3) + action
        np.testing.assert_array_equal(info["agent_reward"], paid)
        np.testing.assert_allclose(reward, paid.mean(), rtol=1e-6)
        assert (bool(terminated), bool(team.is_truncated(state))) == (False, t == Uneven.max_steps)
    for k, v in want(Uneven.max_steps).items():
        np.testing.assert_array_equal(obs[k], v, err_msg=f"{k} after the last step")


def _inner_teams(venv, state):
    """The TeamEnv states [N] inside the trainer's wrapped env state."""
    vec = W.find_wrapper_state(venv, state, W.EpisodeStatistics).inner.inner  # AgentsAsRows -> VecEnv
    return vec.env_state


@pytest.mark.parametrize("env_id", [ENV_ID, "EndsEarly-v0", "EndsLate-v0"])
def test_rows_follow_the_envs_own_step(env_id):
    """Row n * A + a of the stepped envs is agent a of env n: its observation, one-hot id and reward are
    the env's own (its step_env on the same state and actions); an episode that the env ends once its
    own step count has reached max_steps is truncated, one that it ends earlier terminated, and none
    ends where the env does not end it; final_observation is the env's, pre-reset."""
    train = make_train(PPOConfig(env_id=env_id, num_envs=3, num_steps=8))
    hp = train.default_hparams()
    venv = train.make_env(hp)
    env, A, N = train.team.ma, 2, 3
    obs, state = jax.jit(venv.reset)(jax.random.key(0), hp.env_params)
    step = jax.jit(lambda s, a: venv.step(s, a, hp.env_params))
    env_step = jax.jit(jax.vmap(lambda s, a: env.step_env(jax.random.key(0), s, a)))
    rng = np.random.default_rng(0)
    seen = {"terminated": 0, "truncated": 0}
    for _ in range(20):
        teams = _inner_teams(venv, state)
        action = jnp.asarray(rng.random(N * A) < 0.2, jnp.int32)  # EndsEarly's action 1 ends it
        actions = {a: action[i::A] for i, a in enumerate(env.agents)}
        want_obs, _, want_r, want_d, _ = env_step(teams.inner, actions)
        own = jax.vmap(env.get_obs)(teams.inner)
        for i, a in enumerate(env.agents):  # rows before the step
            np.testing.assert_array_equal(obs["obs"][i::A], own[a])
            np.testing.assert_array_equal(obs["agent"][i::A], np.tile(np.eye(A)[i], (N, 1)))
        obs, state, reward, terminated, truncated, info = step(state, action)
        # The env's own step count (not TeamEnv's): an end once it has reached max_steps is the limit.
        time_up = np.asarray(teams.inner.step) + 1 >= env.max_steps
        done = np.asarray(want_d["__all__"])
        for i, a in enumerate(env.agents):
            np.testing.assert_array_equal(reward[i::A], want_r[a])
            if env_id != ENV_ID:  # deterministic: its next observation is known
                np.testing.assert_array_equal(info["final_observation"]["obs"][i::A], want_obs[a])
            np.testing.assert_array_equal(truncated[i::A], done & time_up)
            np.testing.assert_array_equal(terminated[i::A], done & ~time_up)
        going = ~np.asarray(terminated | truncated)
        np.testing.assert_array_equal(np.asarray(info["final_observation"]["obs"])[going], obs["obs"][going])
        seen["terminated"] += int(terminated.sum())
        seen["truncated"] += int(truncated.sum())
    assert seen["truncated"] > 0
    assert (seen["terminated"] > 0) == (env_id != ENV_ID)


# -------------------------------------------------------------------- float64 update reference
REF = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6, update_epochs=4, num_minibatches=2,
           hidden_sizes=(16, 16), lr=2e-2, clip_eps=0.02, ent_coef=0.05, vf_coef=0.5, max_grad_norm=0.5,
           gamma=0.95, gae_lambda=0.9)


def _reference_module():
    path = ROOT / "tests" / "test_update_reference.py"
    spec = importlib.util.spec_from_file_location("update_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mlp(p, prefix, x, agent=None):
    """The two tanh layers and head `{prefix}_0, {prefix}_1, {prefix}_head` of params `p`; with `agent`
    [...] (one network per agent: leaves [A, ...]) each row through its own agent's layers."""
    def dense(name, x):
        w, b = p[name]["kernel"], p[name]["bias"]
        if agent is None:
            y = x @ w
            return y + jnp.broadcast_to(b, y.shape)
        return jnp.einsum("...i,...io->...o", x, w[agent]) + b[agent]

    x = jnp.tanh(dense(f"{prefix}_0", x))
    x = jnp.tanh(dense(f"{prefix}_1", x))
    return dense(f"{prefix}_head", x)


def packed(obs):
    """A row observation dict as one array [..., A + D (+ S)]: [one-hot id, own obs, world state]
    (the reference update slices arrays)."""
    return jnp.concatenate([obs[k] for k in ("agent", "obs", "world_state") if k in obs], axis=-1)


def reference_apply(critic: str, shared: bool, agent_id: bool = True, num_agents: int = 2, obs_dim: int = 3):
    """The network written out: the actor reads [one-hot id, own obs]; the critic the same (IPPO) or
    [one-hot id, world_state] (MAPPO); one set of layers, or each row its agent's (chosen by the id);
    without `agent_id` neither reads the id."""
    def apply(params, x):
        cut = num_agents + obs_dim
        obs = {"agent": x[..., :num_agents], "obs": x[..., num_agents:cut], "world_state": x[..., cut:]}
        p = params["params"]
        agent = None if shared else jnp.argmax(obs["agent"], axis=-1)
        actor_p = p if (shared and critic == "decentralized" and agent_id) else p["actor"]
        ids = [obs["agent"]] if agent_id else []
        local = jnp.concatenate([*ids, obs["obs"]], axis=-1)
        logits = _mlp(actor_p, "actor", local, agent)
        if critic == "centralized":
            central = jnp.concatenate([*ids, obs["world_state"]], axis=-1)
            value = _mlp(p["critic"], "critic", central, agent)
        else:
            value = _mlp(actor_p, "critic", local, agent)
        return types.SimpleNamespace(logits=logits), value[..., 0]

    return apply


#: JaxMARL's MAPPO choices: no id, the time limit as a terminal state, each network's gradient clipped apart.
JAXMARLS = dict(agent_id=False, bootstrap_truncation=False, clip_grad_per_network=True)
NO_ID = dict(agent_id=False)
#: (critic, share_parameters, other PPOConfig fields) of each case.
CASES = [("decentralized", True, {}), ("centralized", True, {}), ("decentralized", False, {}),
         ("decentralized", True, NO_ID), ("centralized", True, NO_ID), ("decentralized", False, NO_ID),
         ("centralized", True, JAXMARLS)]


@pytest.mark.slow
@pytest.mark.parametrize("critic, shared, choices", CASES, ids=[
    "IPPO", "MAPPO", "IPPO-unshared", "IPPO-no-id", "MAPPO-no-id", "IPPO-unshared-no-id", "MAPPO-jaxmarls"])
def test_one_update_matches_a_float64_reference(critic, shared, choices):
    """One PPO update on the agents' rows against tests/test_update_reference.py's float64 reference
    (GAE per agent row, minibatches of the T * N * A rows, clipped loss, clip, Adam), with the network
    written out above (with and without the id in its input; and with JaxMARL's choices: the time limit
    as terminal, the actor's and critic's gradients clipped apart); and the rows' global state is every
    agent's observation of its env."""
    ref = _reference_module()
    # Without the id the gradients are smaller: a lower clip norm keeps the clip exercised.
    config = PPOConfig(env_id="ShiftedTeam-v0", critic=critic, share_parameters=shared, **choices,
                       **{**REF, "max_grad_norm": 0.2 if "agent_id" in choices else REF["max_grad_norm"]})
    train = make_train(config)
    hp = train.default_hparams()
    venv = train.make_env(hp)
    rollout = jax.jit(lambda state, key: train.rollout(state, hp, venv, key, keep_next_obs=True))
    learn = jax.jit(train.learn_from_rollout)
    state = jax.jit(train.init)(jax.random.key(0), hp)
    for _ in range(2):  # the second update is checked: Adam's moments are not fresh
        key, k_roll = jax.random.split(state.key)
        state, traj = rollout(state.replace(key=key), k_roll)
        if int(state.update) < 1:
            state = learn(state, traj, hp)[0]
    T, R = traj.reward.shape
    A = 2
    assert R == config.num_envs * A
    assert np.asarray(traj.done).any() and not np.asarray(traj.terminated).any()  # time limits only
    if critic == "centralized":
        teams = np.asarray(traj.obs["obs"]).reshape(T, config.num_envs, -1)  # [T, N, A * D]
        np.testing.assert_array_equal(traj.obs["world_state"], np.repeat(teams, A, axis=1))

    new_state, metrics = learn(state, traj, hp)
    c = types.SimpleNamespace(clip_value_loss=config.clip_value_loss, anneal_lr=config.anneal_lr,
                              num_updates=config.num_updates, update_epochs=config.update_epochs,
                              num_minibatches=config.num_minibatches, normalize_adv=config.normalize_adv,
                              clip_grad_per_network=config.clip_grad_per_network,
                              batch_size=T * R)  # the learner's batch: every agent's row
    apply = reference_apply(critic, shared, config.agent_id)
    like = types.SimpleNamespace(config=c, network=types.SimpleNamespace(apply=apply), discrete=True)
    traj = traj._replace(obs=packed(traj.obs), next_obs=packed(traj.next_obs))
    if not config.bootstrap_truncation:  # the reference's GAE: every end terminal
        traj = traj._replace(terminated=traj.done)
    np.testing.assert_allclose(apply(state.params, traj.obs)[1], traj.value, rtol=1e-5, atol=1e-5)
    theta, (mu, nu, count), means, lr, clips = ref.reference_update(like, hp, state, traj)
    assert 0 < clips["ratio"] and 0 < clips["grad"], clips
    theta0 = np.asarray(ravel_pytree(state.params)[0], np.float64)
    step = np.asarray(ravel_pytree(new_state.params)[0], np.float64) - theta0
    scale = np.max(np.abs(theta - theta0))
    np.testing.assert_allclose(step, theta - theta0, rtol=1e-3, atol=1e-4 * scale, err_msg="params step")
    for name in ref.LOSS_STATS:
        np.testing.assert_allclose(float(metrics[name]), means[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert count == 2 * config.update_epochs * config.num_minibatches
    # Team metrics: env steps and episodes count envs, not rows.
    assert int(metrics["env_steps"]) == 2 * T * config.num_envs
    assert int(metrics["episodes_completed"]) == int(np.asarray(traj.episode_done).sum()) // A


@pytest.mark.slow
@pytest.mark.parametrize("critic", ["decentralized", "centralized"], ids=["IPPO", "MAPPO"])
def test_a_data_parallel_update_is_the_update_of_all_envs(critic):
    """One epoch of one minibatch: the update of 2 shards of 2 envs each (a shard holds whole teams,
    the rows n * A + a of its envs; advantages normalised with the pooled statistics, gradients
    averaged with pmean) is the single-device update of the 4 envs' 8 rows. And data_parallel_train
    trains the agent on 2 shards (on one device, as a vmap with the axis name)."""
    from fusedrl.data_parallel import data_parallel_train

    config = PPOConfig(env_id="ShiftedTeam-v0", critic=critic, num_envs=4, num_steps=8,
                       total_timesteps=4 * 8 * 2, update_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    plain = make_train(config)
    dp = make_train(config.replace(num_envs=2), axis_name="shards")
    hp = plain.default_hparams()
    venv = plain.make_env(hp)
    state = jax.jit(plain.init)(jax.random.key(0), hp)
    after, traj = jax.jit(lambda s: plain.rollout(s, hp, venv, jax.random.key(5)))(state)
    want = jax.jit(plain.learn_from_rollout)(after, traj, hp)[0]
    shards = jax.tree.map(lambda x: jnp.stack(jnp.split(x, 2, axis=1)), traj)  # shard i: envs 2i, 2i + 1
    both = jax.vmap(dp.learn_from_rollout, in_axes=(None, 0, None), axis_name="shards")
    got = jax.jit(both)(after, shards, hp)[0]
    for a, b in zip(jax.tree.leaves(want.params), jax.tree.leaves(got.params), strict=True):
        np.testing.assert_allclose(b[0], a, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(b[1], a, rtol=1e-4, atol=1e-6)
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.params),
                                                         jax.tree.leaves(want.params), strict=True))
    agent = data_parallel_train(config, jax.devices()[:1], num_shards=2)(jax.random.key(0))
    assert agent.metrics["env_steps"].tolist() == [32, 64]  # both shards' envs, not their rows
    assert np.isfinite(np.asarray(agent.metrics["episode_return_agent_1"])).all()


# ----------------------------------------------------------------------------- masks honoured
@pytest.mark.parametrize("env_id", ["Trap-v0", "PaddedTrap-v0"])
def test_masked_actions_are_never_taken(env_id):
    """Trap's forbidden actions pay 10 against 1: no rollout of a training run takes one, in training or
    greedy evaluation, and the team return never exceeds what the allowed actions can earn. In
    PaddedTrap agent_0's forbidden action is the padding (its env has 2 actions): its row's observation
    is its own, zero-padded, and its mask rules the padded action out."""
    config = PPOConfig(env_id=env_id, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, lr=1e-2,
                       hidden_sizes=(16,))
    train = make_train(config)
    hp = train.default_hparams()
    venv = train.make_env(hp)
    rollout = jax.jit(lambda state, key: train.rollout(state, hp, venv, key, keep_next_obs=True))
    learn = jax.jit(train.learn_from_rollout)
    state = jax.jit(train.init)(jax.random.key(0), hp)
    if env_id == "PaddedTrap-v0":
        obs, _ = venv.reset(jax.random.key(0), hp.env_params)
        np.testing.assert_array_equal(obs["obs"][:2], [[0.5, 0.0, 0.0], [0.25, 0.25, 0.25]])
        np.testing.assert_array_equal(obs["action_mask"][:2], [[True, True, False], [False, True, True]])
    taken = []
    for _ in range(config.num_updates):
        key, k_roll = jax.random.split(state.key)
        state, traj = rollout(state.replace(key=key), k_roll)
        taken.append(np.asarray(traj.action))
        state, metrics = learn(state, traj, hp)
        assert float(metrics["episode_return"]) <= Trap.max_steps
    taken = np.stack(taken)  # [U, T, N * A]
    for i, forbidden in enumerate(Trap.FORBIDDEN):
        assert not (taken[..., i::2] == forbidden).any(), f"agent_{i} took its masked action {forbidden}"
    assert len(np.unique(taken)) == 3  # every allowed action was sampled: the masks are per agent
    result = fusedrl.TrainResult(state=state, metrics={}, hparams=hp)
    returns = fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=8)
    assert returns.shape == (8,) and float(returns.max()) <= Trap.max_steps


# ------------------------------------------------------------------ learning and guarantees
LEARN = dict(env_id=ENV_ID, num_envs=8, num_steps=16, total_timesteps=8 * 16 * 40, lr=1e-2)


@pytest.fixture(scope="module")
def learned():
    """IPPO on MatchingTeam, 2 seeds in one program (jit of vmap), traced once, run without a host
    transfer."""
    config = PPOConfig(**LEARN)
    train = make_train(config)
    traced = chex.assert_max_traces(train.__call__, n=1)
    jitted = jax.jit(jax.vmap(traced))
    keys = jax.random.split(jax.random.key(0), 2)
    with jax.transfer_guard("disallow"):
        result = jax.block_until_ready(jitted(keys))
    assert "callback" not in jitted.lower(keys).as_text()
    return config, train, result


@pytest.mark.slow
def test_ippo_learns_the_coordination_the_ids_make_possible(learned):
    """Both agents see the same cue and must pick different actions: one shared policy without the id
    earns at most 3 of 8 per episode (0.375 per step); random play 1.8. Both seeds get >= 7."""
    config, _, result = learned
    last = np.asarray(result.metrics["episode_return"])[:, -5:].mean(axis=1)
    assert (last >= 7.0).all(), last
    greedy = fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=16)
    assert greedy.shape == (2, 16)
    assert (np.asarray(greedy).mean(axis=1) >= 7.0).all(), greedy
    # episode_return is the team's: the mean of the agents' own returns (each episode ends for both).
    agents = [np.asarray(result.metrics[f"episode_return_agent_{i}"]) for i in range(2)]
    np.testing.assert_allclose(result.metrics["episode_return"], (agents[0] + agents[1]) / 2, rtol=1e-5)
    assert (np.asarray(result.metrics["episode_length"])[:, -1] == MAX_STEPS).all()


@pytest.mark.slow
def test_a_run_resumed_from_a_checkpoint_is_bit_identical(learned, tmp_path):
    """Half a run, saved and restored (fusedrl.checkpoint), continues exactly as the run that was never
    saved: every leaf of the state (the agents' returns too) comes back."""
    config, train, _ = learned
    from fusedrl import checkpoint as ckpt

    hp = train.default_hparams()
    run = jax.jit(train.run, static_argnums=2)
    half = config.num_updates // 2
    first = run(jax.jit(train.init)(jax.random.key(0), hp), hp, half)
    assert first.state.agent_return.shape == (2,)
    ckpt.save(tmp_path / "ckpt", config, first.state, hp)
    _, restored, hp2, _ = ckpt.restore(tmp_path / "ckpt", config)
    chex.assert_trees_all_equal(jax.tree.map(np.asarray, restored.agent_return), first.state.agent_return)
    resumed = run(restored, hp2, config.num_updates - half)
    straight = run(first.state, hp, config.num_updates - half)
    chex.assert_trees_all_equal(resumed.state.params, straight.state.params)
    chex.assert_trees_all_equal(resumed.metrics, straight.metrics)


def test_jaxmarls_mappo_choices_survive_a_checkpoint(tmp_path):
    """MAPPO with JaxMARL's choices (its optimiser state is optax.multi_transform's: a clip per network)
    saved after one update and restored: every leaf of the state comes back, and the next update is the
    one the unsaved run makes."""
    from fusedrl import checkpoint as ckpt

    config = PPOConfig(env_id="ShiftedTeam-v0", critic="centralized", **JAXMARLS, num_envs=2, num_steps=8,
                       total_timesteps=2 * 8 * 2, num_minibatches=2, hidden_sizes=(8, 8))
    train = make_train(config)
    hp = train.default_hparams()
    run = jax.jit(train.run, static_argnums=2)
    first = run(jax.jit(train.init)(jax.random.key(0), hp), hp, 1)
    ckpt.save(tmp_path / "ckpt", config, first.state, hp)
    _, restored, hp2, _ = ckpt.restore(tmp_path / "ckpt", config)
    chex.assert_trees_all_equal(jax.tree.map(np.asarray, restored.opt_state), first.state.opt_state)
    resumed, straight = run(restored, hp2, 1), run(first.state, hp, 1)
    chex.assert_trees_all_equal(resumed.state.params, straight.state.params)


@pytest.mark.parametrize("config", [
    PPOConfig(env_id=ENV_ID, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, recurrent="gru",
              recurrent_size=8, hidden_sizes=(8,)),
    A2CConfig(env_id=ENV_ID, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, hidden_sizes=(8,)),
    ReinforceConfig(env_id=ENV_ID, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, hidden_sizes=(8,)),
], ids=["recurrent-IPPO", "A2C", "REINFORCE"])
def test_other_learners_take_multi_agent_envs(config):
    result = jax.jit(make_train(config))(jax.random.key(0))
    assert int(result.metrics["episodes_completed"][-1]) == config.num_envs  # one 8-step episode per env
    assert np.isfinite(np.asarray(result.metrics["policy_loss"])).all()
    assert float(result.metrics["episode_length"][-1]) == MAX_STEPS


RECURRENT = [("centralized", True, "gru"), ("decentralized", False, "lstm"), ("centralized", False, "gru")]


@pytest.mark.slow
@pytest.mark.parametrize("critic, shared, cell", RECURRENT, ids=["MAPPO-gru", "IPPO-unshared-lstm",
                                                                 "MAPPO-unshared-gru"])
def test_recurrent_mappo_and_unshared_ippo(critic, shared, cell):
    """Recurrent MAPPO and recurrent IPPO with a network per agent train (one 8-step episode per env
    and update), and their network is its parts: each row's policy and next actor carry are its
    agent's recurrent actor-critic on the row's own observation and id from the actor's carry; its
    value (MAPPO) the critic's on the row's world_state and id from the critic's own carry; each
    agent's parameters its own slice. Checked row by row against `RecurrentActorCritic` itself."""
    from fusedrl.networks import RecurrentActorCritic

    config = PPOConfig(env_id="ShiftedTeam-v0", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2,
                       hidden_sizes=(8,), recurrent=cell, recurrent_size=8, critic=critic,
                       share_parameters=shared)
    train = make_train(config)
    result = jax.jit(train)(jax.random.key(0))
    assert int(result.metrics["episodes_completed"][-1]) == config.num_envs
    assert np.isfinite(np.asarray(result.metrics["policy_loss"])).all()
    net, params = train.network, result.params
    hp = train.default_hparams()
    obs, _ = train.make_env(hp).reset(jax.random.key(1), hp.env_params)  # rows [8]: env-major
    # A different carry per row and per leaf: the actor's and the critic's (an LSTM's c and h) apart.
    leaves, tree = jax.tree.flatten(net.initial_carry(8))
    carry = jax.tree.unflatten(tree, [jax.random.normal(jax.random.key(i), x.shape)
                                      for i, x in enumerate(leaves)])
    new_carry, (pi, value) = net.apply(params, carry, obs)
    base = RecurrentActorCritic(**{f: getattr(net, f) for f in RecurrentActorCritic.__dataclass_fields__
                                   if f not in ("parent", "name")})
    actor_carry, critic_carry = carry if critic == "centralized" else (carry, None)

    def one(tree, row):
        return jax.tree.map(lambda x: x[row:row + 1], tree)

    def own(p, agent):
        return p if shared else jax.tree.map(lambda x: x[agent], p)

    for row in range(8):
        agent = row % 2
        local = {"obs": obs["obs"][row:row + 1], "agent": obs["agent"][row:row + 1]}
        a_carry, (a_pi, a_value) = base.apply({"params": own(params["params"]["actor"], agent)},
                                              one(actor_carry, row), local)
        np.testing.assert_allclose(pi.logits[row], a_pi.logits[0], rtol=1e-5, atol=1e-6)
        got_actor = new_carry[0] if critic == "centralized" else new_carry
        for x, y in zip(jax.tree.leaves(one(got_actor, row)), jax.tree.leaves(a_carry), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        if critic == "centralized":
            central = {"agent": obs["agent"][row:row + 1], "world_state": obs["world_state"][row:row + 1]}
            c_carry, (_, c_value) = base.apply({"params": own(params["params"]["critic"], agent)},
                                               one(critic_carry, row), central)
            np.testing.assert_allclose(value[row], c_value[0], rtol=1e-5, atol=1e-6)
            for x, y in zip(jax.tree.leaves(one(new_carry[1], row)), jax.tree.leaves(c_carry), strict=True):
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(value[row], a_value[0], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_cli_trains_mappo_on_a_users_env(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "fusedrl.cli", "train", "--import", "docs.examples.my_team", "--env", ENV_ID,
           "--set", "critic=centralized", "--set", "num_envs=4", "--set", "num_steps=8",
           "--total-timesteps", "64", "--eval-episodes", "2", "--no-progress", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    assert json.loads((out / "config.json").read_text())["ppo"]["critic"] == "centralized"


def test_a_sweep_trains_a_multi_agent_env():
    """fusedrl.sweep over lr on MatchingTeam (which has no env params): one run per (seed, lr), each
    with its own curve."""
    config = PPOConfig(env_id=ENV_ID, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3, hidden_sizes=(8,))
    swept = fusedrl.sweep(config, num_seeds=2, lr=[1e-3, 1e-2])
    returns = np.asarray(swept.metrics["episode_return_agent_1"])
    assert returns.shape == (2, 2, 3) == np.shape(swept.metrics["episode_return"])
    losses = np.asarray(swept.metrics["policy_loss"])
    assert not np.array_equal(losses[:, 0], losses[:, 1])  # the two learning rates trained differently


# --------------------------------------------------------- the agent networks, part by part
class Reach:
    """Continuous actions: agent i steers a 2-number action towards (i, -i) / 2 and earns minus its
    squared distance; 4-step episodes. Agent i sees [(step + i) / 8] three times."""

    agents = ["agent_0", "agent_1"]
    num_agents = 2
    max_steps = 4

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (3,), jnp.float32)

    def action_space(self, agent):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

    def reset(self, key):
        s = StepState(jnp.int32(0))
        return self.get_obs(s), s

    def get_obs(self, s):
        return {a: jnp.full((3,), (s.step + i) / 8, jnp.float32) for i, a in enumerate(self.agents)}

    def step_env(self, key, s, actions):
        new = StepState(s.step + 1)
        rewards = {a: -jnp.sum((actions[a] - jnp.array([i, -i], jnp.float32) / 2) ** 2)
                   for i, a in enumerate(self.agents)}
        done = new.step >= self.max_steps
        return self.get_obs(new), new, rewards, {"agent_0": done, "agent_1": done, "__all__": done}, {}


def _mlp64(p, prefix, x, agent):
    """`_mlp` in float64 NumPy, each row [B] through its own agent's layers (leaves [A, ...])."""
    def dense(name, x):
        w, b = (np.asarray(p[name][k], np.float64)[agent] for k in ("kernel", "bias"))
        return np.einsum("bi,bio->bo", x, w) + b

    x = np.tanh(dense(f"{prefix}_0", x))
    x = np.tanh(dense(f"{prefix}_1", x))
    return dense(f"{prefix}_head", x)


def test_unshared_continuous_rows_act_with_their_own_agents_gaussian():
    """share_parameters=False with continuous actions: each row's Gaussian is its own agent's, its
    mean (the agent's layers) and its log-std (a parameter [A, D] with no row axis, set apart per agent
    here), against the network written out in float64: the log-probability of an action and the value."""
    config = PPOConfig(env_id="Reach-v0", share_parameters=False, num_envs=2, num_steps=4,
                       total_timesteps=2 * 4, hidden_sizes=(8, 8))
    train = make_train(config)
    hp = train.default_hparams()
    params = jax.jit(train.init)(jax.random.key(0), hp).params
    # Each agent's network starts from its own draw, as separate networks would: every kernel [A, ...].
    kernels = [x for path, x in jax.tree_util.tree_leaves_with_path(params) if "kernel" in str(path[-1])]
    assert kernels and all(not np.allclose(k[0], k[1]) for k in kernels)
    log_std = np.array([[-1.0, -0.5], [0.3, 0.7]])  # agent 0's, agent 1's
    actor = {**params["params"]["actor"], "log_std": jnp.asarray(log_std, jnp.float32)}
    params = {"params": {**params["params"], "actor": actor}}
    obs, _ = train.make_env(hp).reset(jax.random.key(1), hp.env_params)  # 4 rows, env-major
    action = jax.random.normal(jax.random.key(2), (4, 2))
    pi, value = jax.jit(train.network.apply)(params, obs)
    agent = np.arange(4) % 2
    p = params["params"]["actor"]
    own = np.concatenate([obs["agent"], obs["obs"]], axis=-1).astype(np.float64)
    mean, std = _mlp64(p, "actor", own, agent), np.exp(log_std[agent])
    a = np.asarray(action, np.float64)
    log_prob = np.sum(-0.5 * ((a - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi), axis=-1)
    np.testing.assert_allclose(pi.mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pi.log_prob(action), log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, _mlp64(p, "critic", own, agent)[:, 0], rtol=1e-5, atol=1e-6)


AGENT_NETWORKS = [("centralized", True, None), ("decentralized", False, None), ("centralized", False, "gru")]


@pytest.mark.parametrize("critic, shared, cell", AGENT_NETWORKS,
                         ids=["MAPPO", "IPPO-unshared", "MAPPO-unshared-gru"])
def test_the_agent_networks_never_sample_a_masked_action(critic, shared, cell):
    """MAPPO, one network per agent, and recurrent, the policy is masked as the shared IPPO one is: a
    rollout of Trap (each agent's masked action pays most) never takes a row's masked action, and
    takes every allowed one (untrained, a policy that escaped its mask would take it a third of the
    time)."""
    config = PPOConfig(env_id="Trap-v0", critic=critic, share_parameters=shared, recurrent=cell,
                       recurrent_size=8, num_envs=8, num_steps=8, total_timesteps=8 * 8, hidden_sizes=(8,))
    train = make_train(config)
    hp = train.default_hparams()
    venv = train.make_env(hp)
    state = jax.jit(train.init)(jax.random.key(0), hp)
    _, traj = jax.jit(lambda s, k: train.rollout(s, hp, venv, k))(state, jax.random.key(1))
    taken = np.asarray(traj.action)  # [T, N * A]
    for i, forbidden in enumerate(Trap.FORBIDDEN):
        assert not (taken[:, i::2] == forbidden).any(), f"agent_{i} took its masked action {forbidden}"
    assert len(np.unique(taken)) == 3


@pytest.mark.parametrize("critic, cell", [("decentralized", None), ("decentralized", "gru"),
                                         ("centralized", "gru")], ids=["IPPO", "IPPO-gru", "MAPPO-gru"])
def test_without_agent_id_a_shared_network_does_not_read_the_id(critic, cell):
    """agent_id=False: the shared networks' outputs (policy and value, and the next carry) do not change
    when the rows' ids are swapped; with the id (the default) they do. The first layers then take the
    observation alone (or the global state alone), one-hot id left out."""
    out = {}
    for agent_id in (True, False):
        config = PPOConfig(env_id="ShiftedTeam-v0", critic=critic, recurrent=cell, recurrent_size=8,
                           hidden_sizes=(8, 8), num_envs=2, num_steps=4, total_timesteps=2 * 4,
                           num_minibatches=2, agent_id=agent_id)
        train = make_train(config)
        hp = train.default_hparams()
        state = jax.jit(train.init)(jax.random.key(0), hp)
        obs, _ = train.make_env(hp).reset(jax.random.key(1), hp.env_params)  # 4 rows, env-major
        swapped = {**obs, "agent": obs["agent"][:, ::-1]}
        apply = jax.jit(train.network.apply)
        if cell is None:
            out[agent_id] = [jax.tree.leaves(apply(state.params, o)) for o in (obs, swapped)]
        else:
            carry = state.policy_state
            out[agent_id] = [jax.tree.leaves(apply(state.params, carry, o)) for o in (obs, swapped)]
        first = ("embed_0",) if cell else ("actor_0", "critic_0")  # the layers that read the inputs
        widths = {jax.tree_util.keystr(path): x.shape[0]
                  for path, x in jax.tree_util.tree_leaves_with_path(state.params)
                  if path[-1].key == "kernel" and path[-2].key in first}
        inputs = {3 + 2 * agent_id, 6 + 2 * agent_id} if critic == "centralized" else {3 + 2 * agent_id}
        assert set(widths.values()) == inputs, widths
    for a, b in zip(*out[False], strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.allclose(a, b) for a, b in zip(*out[True], strict=True))


def test_recurrent_agent_networks_start_every_episode_from_zero_carries():
    """Recurrent MAPPO with an LSTM per agent on EndsEarly (episodes end at random steps, mid-rollout):
    the rollout's values and log-probabilities are the network's stepped row by row from zero carries,
    the actor's and the critic's, each set back to zero after every step where the env ended the row's
    episode."""
    config = PPOConfig(env_id="EndsEarly-v0", critic="centralized", share_parameters=False, recurrent="lstm",
                       recurrent_size=8, hidden_sizes=(8,), num_envs=4, num_steps=12, total_timesteps=4 * 12)
    train = make_train(config)
    hp = train.default_hparams()
    venv = train.make_env(hp)
    state = jax.jit(train.init)(jax.random.key(0), hp)
    leaves = jax.tree_util.tree_leaves_with_path(state.params)
    kernels = [x for path, x in leaves if "kernel" in str(path[-1])]
    assert kernels and all(not np.allclose(k[0], k[1]) for k in kernels)  # each agent's own initial draw
    _, traj = jax.jit(lambda s, k: train.rollout(s, hp, venv, k))(state, jax.random.key(1))
    done = np.asarray(traj.done)  # [T, N * A]
    assert done[:-1].any() and not done[:, 0::2].all()  # episodes end inside the rollout, not every step
    apply = jax.jit(train.network.apply)
    carry = jax.tree.map(np.zeros_like, state.policy_state)  # (actor's, critic's), each an LSTM pair
    assert len(jax.tree.leaves(carry)) == 4
    for t in range(config.num_steps):
        obs = jax.tree.map(lambda x, t=t: x[t], traj.obs)
        carry, (pi, value) = apply(state.params, carry, obs)
        np.testing.assert_allclose(value, traj.value[t], rtol=1e-5, atol=1e-6, err_msg=f"value, step {t}")
        np.testing.assert_allclose(pi.log_prob(traj.action[t]), traj.log_prob[t], rtol=1e-5, atol=1e-5,
                                   err_msg=f"log_prob, step {t}")
        carry = jax.tree.map(lambda x, t=t: np.where(done[t][:, None], 0.0, np.asarray(x)), carry)
