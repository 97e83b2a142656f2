"""Actor-critic MLPs: separate actor and critic torsos, as PureJaxRL and CleanRL use for PPO."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import numpy as np

from fusedrl.distributions import Categorical, DiagGaussian
from fusedrl.initializers import orthogonal

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def _dense(features: int, scale: float, name: str) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros, name=name)


class ActorCritic(nn.Module):
    """obs [..., obs_dim] -> (policy distribution over actions [...], value [...]).

    Attributes:
      action_dim: number of discrete actions, or the dimension of a continuous action.
      discrete: categorical policy if True, else a diagonal Gaussian with a state-independent
        log-std parameter (initialised at 0).
      hidden_sizes: widths of the hidden layers of each torso.
      activation: a key of ACTIVATIONS.
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs: jax.Array):
        act = ACTIVATIONS[self.activation]
        hidden_scale = float(np.sqrt(2.0))
        x = obs
        for i, width in enumerate(self.hidden_sizes):
            x = act(_dense(width, hidden_scale, f"actor_{i}")(x))
        head = _dense(self.action_dim, 0.01, "actor_head")(x)
        if self.discrete:
            pi = Categorical(logits=head)
        else:
            log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
            pi = DiagGaussian(mean=head, log_std=log_std)
        v = obs
        for i, width in enumerate(self.hidden_sizes):
            v = act(_dense(width, hidden_scale, f"critic_{i}")(v))
        value = _dense(1, 1.0, "critic_head")(v)[..., 0]
        return pi, value


def value_only(network: ActorCritic, params, obs: jax.Array) -> jax.Array:
    """The critic's value [...] for obs [..., obs_dim] (XLA prunes the unused actor)."""
    return network.apply(params, obs)[1]


def param_count(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


__all__ = ["ACTIVATIONS", "ActorCritic", "param_count", "value_only"]
