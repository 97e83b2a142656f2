"""Your own network (`network="module:function"`) with MAPPO (`critic="centralized"`) and with one
network per agent (`share_parameters=False`) on a multi-agent env.

The network is built twice: the actor by `function(obs_shape=<an agent's observation>)`, fed each
row's {"obs": own observation, "agent": one-hot id}; with MAPPO the critic by
`function(obs_shape=<the global state>)`, fed {"obs": world_state, "agent": one-hot id}: each module
reads what it was built for (the test network notes any other input). Without
shared parameters every leaf of each has a leading [A] axis and each row takes its agent's. Checked
here against the same linear network written out in float64 NumPy; the env's action mask applies to
your network's policy as to the built-in's.
"""

from __future__ import annotations

import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import spaces

import fusedrl
from fusedrl.distributions import MASKED_LOGIT
from fusedrl.train import PPOConfig, make_train

ENV_ID = "ShiftedCue-v0"
A, CUES = 2, 3

NETS = textwrap.dedent('''
    import flax.linen as nn
    import jax.numpy as jnp

    from fusedrl.distributions import Categorical

    SHAPES = []  # the obs_shape of every call, in order
    MISFITS = []  # (the obs_shape a Linear was built for, the "obs" entry it read) where they differ


    class Linear(nn.Module):
        """Logits and value, each one dense layer on every observation entry, concatenated in name order."""

        action_dim: int
        obs_shape: tuple = ()  # what it was built for

        @nn.compact
        def __call__(self, obs):
            if tuple(obs["obs"].shape[1:]) != self.obs_shape:
                MISFITS.append((self.obs_shape, tuple(obs["obs"].shape[1:])))
            x = jnp.concatenate([obs[k] for k in sorted(obs)], axis=-1)
            logits = nn.Dense(self.action_dim, name="pi")(x)
            return Categorical(logits=logits), nn.Dense(1, name="v")(x)[..., 0]


    def linear(action_dim, discrete, obs_shape, config):
        SHAPES.append(tuple(obs_shape))
        return Linear(action_dim, tuple(obs_shape))
''')


@struct.dataclass
class CueState:
    cue: jax.Array  # [] int32
    step: jax.Array  # [] int32


class ShiftedCue:
    """Agent i sees one-hot((cue + i) % 3) and scores 1 for action (cue + i) % 3; 4-step episodes.
    agent_1 may not take action 0 (its mask)."""

    agents = ["agent_0", "agent_1"]
    num_agents = A
    max_steps = 4

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (CUES,), jnp.float32)

    def action_space(self, agent):
        return spaces.Discrete(CUES)

    def get_obs(self, s):
        return {a: jax.nn.one_hot((s.cue + i) % CUES, CUES, dtype=jnp.float32)
                for i, a in enumerate(self.agents)}

    def get_avail_actions(self, s):
        return {"agent_0": jnp.ones(CUES, bool), "agent_1": jnp.arange(CUES) != 0}  # agent_1: never 0

    def reset(self, key):
        s = CueState(jax.random.randint(key, (), 0, CUES), jnp.int32(0))
        return self.get_obs(s), s

    def step_env(self, key, s, actions):
        rewards = {a: (actions[a] == (s.cue + i) % CUES).astype(jnp.float32)
                   for i, a in enumerate(self.agents)}
        new = CueState(jax.random.randint(key, (), 0, CUES), s.step + 1)
        done = new.step >= self.max_steps
        return self.get_obs(new), new, rewards, {**{a: done for a in self.agents}, "__all__": done}, {}


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    """my_marl_nets.py on sys.path, ShiftedCue-v0 registered; both undone afterwards."""
    from fusedrl.envs import registry

    folder = tmp_path_factory.mktemp("nets")
    (folder / "my_marl_nets.py").write_text(NETS)
    sys.path.insert(0, str(folder))
    saved = dict(registry._REGISTRY)
    fusedrl.register(ENV_ID, ShiftedCue)
    import my_marl_nets

    yield my_marl_nets
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    sys.path.remove(str(folder))
    sys.modules.pop("my_marl_nets", None)


def config(critic, shared, agent_id=True):
    return PPOConfig(env_id=ENV_ID, network="my_marl_nets:linear", critic=critic, share_parameters=shared,
                     agent_id=agent_id, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, update_epochs=2,
                     num_minibatches=2,
                     lr=1e-2)


def linear64(p, x, agent):
    """The network in float64: dense layer `p` ({"kernel", "bias"}; leaves [A, ...] when `agent` [B]
    says whose each row takes) on x [B, F]."""
    k, b = (np.asarray(p[n], np.float64) for n in ("kernel", "bias"))
    if agent is None:
        return x @ k + b
    return np.einsum("bi,bio->bo", x, k[agent]) + b[agent]


CASES = [("centralized", True, True), ("centralized", False, True), ("decentralized", False, True),
         ("centralized", True, False), ("decentralized", True, False), ("centralized", False, False)]


@pytest.mark.parametrize("critic, shared, agent_id", CASES, ids=[
    "MAPPO", "MAPPO-unshared", "IPPO-unshared", "MAPPO-no-id", "IPPO-no-id", "MAPPO-unshared-no-id"])
def test_each_part_sees_its_inputs_with_its_agents_parameters(nets, critic, shared, agent_id):
    """Policy and value of the trained network on fresh rows, against the network in float64: the actor
    on [id, own observation], the critic (MAPPO) on [id, global state] with its own parameters (with
    agent_id=False, without the id), and without shared parameters each row through its own agent's.
    The run's unshared agents' parameters all moved in training, each by its own amount."""
    nets.SHAPES.clear()
    cfg = config(critic, shared, agent_id)
    train = make_train(cfg)
    # The factory's calls: the row as it is (checked by build_network), then the actor on an agent's
    # observation, and with MAPPO the critic on the global state (every agent's observation).
    assert nets.SHAPES[1:] == [(CUES,)] + ([(A * CUES,)] if critic == "centralized" else [])
    nets.MISFITS.clear()  # from here on each part must read what it was built for
    key = jax.random.key(0)
    start = jax.jit(train.init)(key, train.default_hparams())
    result = jax.jit(train)(key)
    assert np.isfinite(np.asarray(result.metrics["policy_loss"])).all()
    hp = train.default_hparams()
    obs, _ = train.make_env(hp).reset(jax.random.key(1), hp.env_params)  # 8 rows, env-major
    pi, value = train.network.apply(result.params, obs)
    p = result.params["params"]
    agent = None if shared else np.arange(8) % A
    ids = [obs["agent"]] if agent_id else []
    own = np.concatenate([*ids, obs["obs"]], axis=-1).astype(np.float64)
    logits = np.asarray(pi.logits)
    assert (logits[1::2, 0] == MASKED_LOGIT).all()  # the trainer masks what your network outputs
    allowed = np.asarray(obs["action_mask"])
    np.testing.assert_allclose(logits[allowed], linear64(p["actor"]["pi"], own, agent)[allowed], rtol=1e-5,
                               atol=1e-6)
    if critic == "centralized":
        world = np.asarray(obs["world_state"], np.float64)
        np.testing.assert_array_equal(world, np.repeat(np.asarray(obs["obs"]).reshape(4, -1), A, axis=0))
        central = np.concatenate([*ids, world], axis=-1)
        want = linear64(p["critic"]["v"], central, agent)[:, 0]
    else:
        want = linear64(p["actor"]["v"], own, agent)[:, 0]
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    assert nets.MISFITS == []  # the critic is the network built for the global state, the actor its own
    if not shared:
        for (path, before), after in zip(jax.tree_util.tree_leaves_with_path(start.params),
                                         jax.tree.leaves(result.params), strict=True):
            if "actor" in str(path) and "/v" in jax.tree_util.keystr(path, simple=True, separator="/") \
                    and critic == "centralized":
                continue  # MAPPO's actor value head: no gradient
            if "critic" in str(path) and "pi" in str(path):
                continue  # MAPPO's critic policy head: no gradient
            step = np.asarray(after, np.float64) - np.asarray(before, np.float64)  # [A, ...]
            assert step.shape[0] == A
            assert all(np.abs(step[a]).max() > 0 for a in range(A)), path
            assert not np.allclose(step[0], step[1]), path


def test_the_cnn_is_still_refused_by_name(nets):
    with pytest.raises(ValueError, match=r"critic='centralized'.*network='cnn'.*flat"):
        make_train(config("centralized", True).replace(network="cnn"))
