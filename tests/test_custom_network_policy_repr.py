"""A loaded policy with a network of its own names that network in its repr, not the MLP's
hidden_sizes it did not use."""

from __future__ import annotations

import jax

import fusedrl
from fusedrl.policy import Policy


def test_the_repr_of_a_policy_names_its_own_network(net_module):
    net_module("repr_nets")
    config = fusedrl.PPOConfig(env_id="CartPole-v1", network="repr_nets:net", num_envs=4, num_steps=8,
                               total_timesteps=64)
    train = fusedrl.make_train(config)
    policy = Policy(config, train.init(jax.random.key(0)), train.default_hparams())
    assert repr(policy) == "Policy('CartPole-v1', network='repr_nets:net')"
    mlp = config.replace(network=None)
    assert repr(Policy(mlp, fusedrl.make_train(mlp).init(jax.random.key(0)), train.default_hparams())) == (
        "Policy('CartPole-v1', hidden_sizes=(64, 64))")
