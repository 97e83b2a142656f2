"""A user's network is only ever called on a batch [B, obs_dim] (docs/networks.md), so one that
reads its batch size from obs.shape[0] trains: GAE's bootstrap values were computed on the rollout's
[T, N, obs_dim] observations, which broke such a network with an opaque reshape or vmap error."""

from __future__ import annotations

import jax
import numpy as np

import fusedrl


def test_a_network_that_reads_the_batch_size_from_obs_shape_0_trains(net_module):
    net_module("batch_nets", """
        class BatchNet(nn.Module):
            action_dim: int
            obs_shape: tuple

            @nn.compact
            def __call__(self, obs):
                x = obs.reshape((obs.shape[0],) + self.obs_shape)  # [B, *obs_shape]: the contract's B
                x = nn.tanh(nn.Dense(16)(x.reshape((obs.shape[0], -1))))
                return Categorical(logits=nn.Dense(self.action_dim)(x)), nn.Dense(1)(x)[..., 0]

        def batch_net(action_dim, discrete, obs_shape, config):
            return BatchNet(action_dim, obs_shape)
        """)
    config = fusedrl.PPOConfig(env_id="CartPole-v1", network="batch_nets:batch_net", num_envs=4, num_steps=8,
                               total_timesteps=64, num_minibatches=2, update_epochs=1)
    result = jax.jit(fusedrl.make_train(config))(jax.random.key(0))
    assert np.isfinite(result.metrics["value_loss"]).all()
