"""IPPO and MAPPO: the on-policy learners on a multi-agent env, as rows of one batch.

`fusedrl.envs.multiagent` turns an env of A agents into A rows per env (each agent's observation with
its one-hot id, its action mask, its own reward), so rollout, targets, losses and minibatches run as
for A times as many single-agent envs. What is multi-agent is here:

- the network (`AgentNetwork`): by default one actor-critic shared by every agent (IPPO; the one-hot
  id lets agents that see the same thing act differently). `critic="centralized"` (MAPPO) values
  each row from the global state (`world_state`, with the agent's id) instead of the agent's own
  observation; `share_parameters=False` gives each agent its own parameters (a leading [A] axis on
  every leaf), each row taking its agent's network. With `recurrent=` the same, as
  `RecurrentAgentNetwork` (MAPPO's critic carries its own recurrent state beside the actor's).
  `agent_id=False` leaves the id out of what the networks read (`network_inputs`); it still says
  which agent's network a row takes.
- the metrics: `episode_return` is the mean over a completed episode's rows, i.e. the episode's sum
  of the team reward (the mean over agents of their rewards), since every agent's episode ends with
  its env's; `agent_episode_return` [A] is each agent's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fusedrl.distributions import mask_policy
from fusedrl.envs.multiagent import AGENT_ID, OBS, WORLD_STATE, TeamEnv
from fusedrl.networks import ACTION_MASK, ActorCritic, RecurrentActorCritic
from fusedrl.train.rollout import Transition

#: `PPOConfig.critic`'s choices: each agent's own observation (IPPO), or the global state (MAPPO).
CRITICS = ("decentralized", "centralized")


def check_config(config, team: TeamEnv | None) -> None:
    """The multi-agent fields against the env: `critic="centralized"`, `share_parameters=False` and
    `agent_id=False` need a multi-agent env, and the first two the MLP (built-in, or recurrent) or
    your own network, not the CNN."""
    critic = config.critic
    shared = config.share_parameters
    if team is None:
        if not config.agent_id:
            raise ValueError(f"agent_id=False leaves each agent's one-hot id out of a multi-agent env's "
                             f"networks, and {config.env_id} has one agent (no id): use agent_id=True.")
        if critic == "centralized":
            raise ValueError(f"critic='centralized' (MAPPO) needs a multi-agent env (JaxMARL's MultiAgentEnv "
                             f"contract), and {config.env_id} has one agent: use critic='decentralized'.")
        if not shared:
            raise ValueError(f"share_parameters=False gives each agent of a multi-agent env its own network, "
                             f"and {config.env_id} has one agent: use share_parameters=True.")
        return
    if critic == "decentralized" and shared:
        return  # IPPO with one shared network: any network, recurrent too
    what = "critic='centralized'" if critic == "centralized" else "share_parameters=False"
    if config.network == "cnn":
        raise ValueError(f"{what} builds its networks from the built-in MLP or your own "
                         f"(network='module:function'), not network='cnn': an agent's row holds flat vectors "
                         f"(each observation flattened), with no image for a conv torso. Use network=None, "
                         f"or your own network.")


def network_inputs(obs: dict[str, jax.Array], agent_id: bool) -> tuple[dict, dict | None]:
    """What the networks read of a batch of rows: (the actor's, the centralised critic's or None).
    The actor reads the row's own observation entries (not the action mask, applied to its policy
    after, nor the global state), the critic {"world_state"}; each with the one-hot id "agent" when
    `agent_id`."""
    drop = (WORLD_STATE, ACTION_MASK) if agent_id else (WORLD_STATE, ACTION_MASK, AGENT_ID)
    local = {k: v for k, v in obs.items() if k not in drop}
    if WORLD_STATE not in obs:
        return local, None
    ids = {AGENT_ID: obs[AGENT_ID]} if agent_id else {}
    return local, {WORLD_STATE: obs[WORLD_STATE], **ids}


class AgentNetwork(nn.Module):
    """A batch of agent rows -> (pi, value), each over the rows [B].

    Attributes:
      base: the actor-critic (`ActorCritic`, or your own network: an unbound template) whose policy
        acts; it sees each row's own observation and id (never `world_state`; the id only with
        `agent_id`). Shared by all agents, or one per agent (`shared=False`).
      num_agents: A.
      shared: one set of parameters for every agent; else each agent's own (every parameter leaf
        gets a leading [A] axis; each row takes its agent's network, computed for all A on every
        row, then selected: A times the compute of one).
      centralized: value from a second actor-critic on the row's `world_state` and id (MAPPO);
        its policy head (and the actor's critic head) are parameters that get no gradient.
      critic_base: with `centralized`, your own network built for the global state (else None: a
        second `base`); it reads {"obs": world_state, "agent": id}, as the actor reads its own.
      agent_id: whether the networks read the id (`network_inputs`); each row's agent is its id
        in any case.
    """

    base: nn.Module
    num_agents: int
    shared: bool = True
    centralized: bool = False
    critic_base: nn.Module | None = None
    agent_id: bool = True

    def _nets(self, name: str, base: nn.Module | None = None):
        base = self.base if base is None else base
        fields = {f: getattr(base, f) for f in base.__dataclass_fields__ if f not in ("parent", "name")}
        cls = type(base)
        if not self.shared:
            cls = nn.vmap(cls, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None,
                          out_axes=0, axis_size=self.num_agents)
        return cls(**fields, name=name)

    def _per_agent(self, net, obs, agent):
        """`net(obs)` with each row's own agent's parameters: (pi, value) over [B]."""
        if self.shared:
            return net(obs)
        pi, value = net(obs)  # every agent's network on every row: leaves [A, B, ...]; log_std [A, D]
        rows = jnp.arange(agent.shape[0])
        return _select_pi(pi, agent, rows), value[agent, rows]

    @nn.compact
    def __call__(self, obs):
        agent = jnp.argmax(obs[AGENT_ID], axis=-1)  # [B] each row's agent
        mask = obs.get(ACTION_MASK)
        local, central = network_inputs(obs, self.agent_id)
        pi, value = self._per_agent(self._nets("actor"), local, agent)
        if mask is not None:
            pi = mask_policy(pi, mask)
        if self.centralized:
            if self.critic_base is None:
                _, value = self._per_agent(self._nets("critic"), central, agent)
            else:  # your network, built for the global state: it reads it as "obs"
                central[OBS] = central.pop(WORLD_STATE)
                _, value = self._per_agent(self._nets("critic", self.critic_base), central, agent)
        return pi, value


def wrap_network(config, network: nn.Module, team: TeamEnv, example: dict[str, Any] | None = None,
                 build: Callable[..., nn.Module] | None = None) -> nn.Module:
    """The trainer's network for a multi-agent env: `network` itself for IPPO with shared parameters
    that reads the agents' ids, else an `AgentNetwork` around it, or a `RecurrentAgentNetwork` in
    place of a recurrent one.

    Your own network (`config.network = "module:function"`) is built again with `build(obs_shape=...,
    obs_example=...)` (`fusedrl.networks.build_network` with the trainer's action space) for what each
    part reads, `example` being one batch of rows: the actor from an agent's observation, fed
    {"obs", "agent"}; with `critic="centralized"` the critic from the global state, fed {"obs":
    world_state, "agent"}; without "agent" where `agent_id=False`."""
    centralized = config.critic == "centralized"
    shared = config.share_parameters
    if shared and not centralized and config.agent_id:
        return network
    agents = dict(num_agents=team.num_agents, shared=shared, centralized=centralized,
                  agent_id=config.agent_id)
    if isinstance(network, RecurrentActorCritic):
        return RecurrentAgentNetwork(**_fields(network), **agents)
    if isinstance(network, ActorCritic):
        return AgentNetwork(base=network, **agents)
    local, central = network_inputs(example, config.agent_id)
    actor = build(obs_shape=tuple(local[OBS].shape[1:]), obs_example=local)
    critic = None
    if centralized:
        central[OBS] = world = central.pop(WORLD_STATE)
        critic = build(obs_shape=tuple(world.shape[1:]), obs_example=central)
    return AgentNetwork(base=actor, critic_base=critic, **agents)


def _fields(module: nn.Module, cls: type | None = None) -> dict[str, Any]:
    """The dataclass fields of `module` that build a `cls` (default: its own class), parent and name
    left out."""
    names = (cls or type(module)).__dataclass_fields__
    return {f: getattr(module, f) for f in names if f not in ("parent", "name")}


def _select_pi(pi, agent: jax.Array, rows: jax.Array):
    """Each row's own agent's policy out of every agent's: leaves [A, B, ...] -> [B, ...]; a leaf with
    no batch axis ([A, D]: a Gaussian's log_std) -> [B, D]."""
    return jax.tree.map(lambda x: x[agent, rows] if x.ndim == 3 else x[agent], pi)


class RecurrentAgentNetwork(RecurrentActorCritic):
    """Recurrent MAPPO and recurrent IPPO with one network per agent: (carry, rows) -> (carry,
    (pi, value)) over the rows [B], as `RecurrentActorCritic` (whose fields it takes).

    The actor is a `RecurrentActorCritic` on each row's own observation and id; with `centralized`
    the value comes from a second one on the row's `world_state` and id, with its own carry (the id
    read only with `agent_id`, as in `network_inputs`): the
    carry is then the pair (actor's, critic's), each [B, H] (a pair of those for an LSTM), reset
    where an episode ends as every carry is. Without `shared` every agent has its own parameters
    (a leading [A] axis on every leaf); each row runs every agent's network on its own carry and
    keeps its agent's outputs and next carry (A times the compute of one). The actor's critic head
    and the critic's policy head get no gradient.
    """

    num_agents: int = 1
    shared: bool = True
    centralized: bool = False
    agent_id: bool = True

    def initial_carry(self, batch: int):
        one = super().initial_carry(batch)
        return (one, one) if self.centralized else one

    def _net(self, name: str):
        cls = RecurrentActorCritic
        if not self.shared:
            cls = nn.vmap(cls, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None,
                          out_axes=0, axis_size=self.num_agents)
        return cls(**_fields(self, RecurrentActorCritic), name=name)

    def _per_agent(self, net, carry, obs, agent):
        """`net(carry, obs)` with each row's own agent's parameters: (carry, (pi, value)) over [B]."""
        if self.shared:
            return net(carry, obs)
        carry, (pi, value) = net(carry, obs)  # every agent's network on every row: leaves [A, B, ...]
        rows = jnp.arange(agent.shape[0])
        carry = jax.tree.map(lambda x: x[agent, rows], carry)
        return carry, (_select_pi(pi, agent, rows), value[agent, rows])

    @nn.compact
    def __call__(self, carry, obs):
        agent = jnp.argmax(obs[AGENT_ID], axis=-1)  # [B] each row's agent
        mask = obs.get(ACTION_MASK)
        local, central = network_inputs(obs, self.agent_id)
        actor_carry, critic_carry = carry if self.centralized else (carry, None)
        actor_carry, (pi, value) = self._per_agent(self._net("actor"), actor_carry, local, agent)
        if mask is not None:
            pi = mask_policy(pi, mask)
        if not self.centralized:
            return actor_carry, (pi, value)
        critic_carry, (_, value) = self._per_agent(self._net("critic"), critic_carry, central, agent)
        return (actor_carry, critic_carry), (pi, value)


def agent_returns(traj: Transition, num_agents: int, last: jax.Array) -> jax.Array:
    """Each agent's mean return [A] over the episodes completed in a [T, N * A] rollout (rows n * A + a);
    `last` [A] where none did."""
    done = traj.episode_done.reshape(traj.episode_done.shape[:1] + (-1, num_agents))
    ret = traj.episode_return.reshape(done.shape)
    n = done.sum(axis=(0, 1))
    mean = jnp.sum(ret * done, axis=(0, 1)) / jnp.maximum(n, 1).astype(jnp.float32)
    return jnp.where(n > 0, mean, last)


def team_env(config, env: Any) -> TeamEnv:
    """The `TeamEnv` the trainer steps for a multi-agent env (with the global state for MAPPO)."""
    return TeamEnv(env, world_state=config.critic == "centralized",
                   env_id=config.env_id)


__all__ = ["CRITICS", "AgentNetwork", "RecurrentAgentNetwork", "agent_returns", "check_config",
           "network_inputs", "team_env", "wrap_network"]
