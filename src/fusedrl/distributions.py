"""The policy distributions the learners need, in a few lines of jnp: categorical (Discrete actions),
factorised categorical (MultiDiscrete), diagonal Gaussian (Box); and action masking.

distrax would pull in TensorFlow Probability; these are small enough to own, and are tested
against SciPy/NumPy references in tests/test_networks.py. Each distribution is a pytree, so it
can be returned from jitted and vmapped functions.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Categorical:
    """Categorical over the last axis of `logits` [..., K].

    Logits must be finite. To rule an action out (a mask), give it `jnp.finfo(jnp.float32).min`,
    not -inf: then it has probability 0 and the entropy and all gradients stay finite, where -inf
    makes `entropy` NaN (0 * log 0). The trainer's networks always give finite logits; guarding
    against -inf here would change the float rounding of every discrete agent's training.
    """

    logits: jax.Array  # [..., K] unnormalised log-probabilities

    @property
    def log_probs(self) -> jax.Array:
        return jax.nn.log_softmax(self.logits, axis=-1)

    @staticmethod
    def noise(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """Standard Gumbel noise for `sample_from_noise`, shape [..., K] (draw many at once)."""
        return jax.random.gumbel(key, shape, jnp.float32)

    def sample_from_noise(self, gumbel: jax.Array) -> jax.Array:
        """The Gumbel-max trick: argmax(logits + g) with g ~ Gumbel(0, 1) is a sample."""
        return jnp.argmax(self.logits + gumbel, axis=-1).astype(jnp.int32)

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_noise(self.noise(key, self.logits.shape))

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """log pi(a) [...] for integer actions a [...]."""
        logp = self.log_probs
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        logp = self.log_probs
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


#: The logit a mask gives a ruled-out action: finite, so 0 * log-prob stays 0 (no NaN in the entropy).
MASKED_LOGIT = float(jnp.finfo(jnp.float32).min)


@struct.dataclass
class MultiCategorical:
    """Independent categoricals, one per component of a `MultiDiscrete(nvec)` action: the logits of
    component i are `logits[..., offset_i : offset_i + nvec[i]]` (offsets the cumulative sums).
    log-prob and entropy are the sums over components. Actions are [..., len(nvec)] int32."""

    logits: jax.Array  # [..., sum(nvec)]
    nvec: tuple[int, ...] = struct.field(pytree_node=False)

    def components(self) -> list[Categorical]:
        """The categorical of each component."""
        out, start = [], 0
        for n in self.nvec:
            out.append(Categorical(self.logits[..., start:start + n]))
            start += n
        return out

    @staticmethod
    def noise(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """Standard Gumbel noise [..., sum(nvec)] for `sample_from_noise` (as `Categorical.noise`)."""
        return Categorical.noise(key, shape)

    def _split(self, x: jax.Array) -> list[jax.Array]:
        out, start = [], 0
        for n in self.nvec:
            out.append(x[..., start:start + n])
            start += n
        return out

    def sample_from_noise(self, gumbel: jax.Array) -> jax.Array:
        parts = zip(self.components(), self._split(gumbel), strict=True)
        return jnp.stack([c.sample_from_noise(g) for c, g in parts], axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_noise(self.noise(key, self.logits.shape))

    def mode(self) -> jax.Array:
        return jnp.stack([c.mode() for c in self.components()], axis=-1)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """Sum over components of log pi_i(a_i); [...] for actions [..., len(nvec)]."""
        parts = [c.log_prob(action[..., i]) for i, c in enumerate(self.components())]
        return sum(parts[1:], parts[0])

    def entropy(self) -> jax.Array:
        parts = [c.entropy() for c in self.components()]
        return sum(parts[1:], parts[0])


def mask_policy(pi, mask: jax.Array):
    """`pi` with the actions where `mask` is False ruled out: their logits become `MASKED_LOGIT`.

    Args:
      pi: a `Categorical` (mask [..., K]) or a `MultiCategorical` (mask [..., sum(nvec)]: each
        component's choices, concatenated as its logits are).
      mask: bool (or 0/1) allowed actions. At least one action (of each component) must be allowed;
        where none is, the masked logits are all equal and the policy is uniform over every action
        (`no_allowed_action` finds such rows: training and `fusedrl.evaluate` stop on them).
    """
    if not isinstance(pi, Categorical | MultiCategorical):
        raise TypeError(f"an action mask needs a categorical policy (Discrete or MultiDiscrete actions), got "
                        f"{type(pi).__name__}.")
    mask = jnp.asarray(mask).astype(bool)
    if mask.shape != pi.logits.shape:
        raise ValueError(f"action_mask has shape {mask.shape}, the policy's logits {pi.logits.shape}: a mask "
                         f"holds one entry per action (sum(nvec) for MultiDiscrete), per observation.")
    return pi.replace(logits=jnp.where(mask, pi.logits, MASKED_LOGIT))


def no_allowed_action(mask: jax.Array, nvec: tuple[int, ...] | None = None) -> jax.Array:
    """Where an action mask [..., K] allows no action (of some component, for `MultiDiscrete(nvec)`:
    the components' masks concatenated, K = sum(nvec)): bool [...]. There `mask_policy` leaves the
    policy uniform over every action, masked ones included, so the learners stop on such a row."""
    mask = jnp.asarray(mask).astype(bool)
    if nvec is None:
        return ~jnp.any(mask, axis=-1)
    parts, start = [], 0
    for n in nvec:
        parts.append(~jnp.any(mask[..., start:start + n], axis=-1))
        start += n
    return jnp.any(jnp.stack(parts, axis=-1), axis=-1)


@struct.dataclass
class DiagGaussian:
    """Independent Gaussians over the last axis: mean [..., D], log_std [..., D] (broadcastable)."""

    mean: jax.Array  # [..., D]
    log_std: jax.Array  # [D] or [..., D]

    @property
    def _log_std(self) -> jax.Array:
        # Explicit broadcast of a state-independent [D] log-std to [..., D] (no rank promotion).
        return jnp.broadcast_to(self.log_std, self.mean.shape)

    @staticmethod
    def noise(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """Standard normal noise for `sample_from_noise`, shape [..., D] (draw many at once)."""
        return jax.random.normal(key, shape, jnp.float32)

    def sample_from_noise(self, z: jax.Array) -> jax.Array:
        return self.mean + jnp.exp(self._log_std) * z

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_noise(self.noise(key, self.mean.shape))

    def mode(self) -> jax.Array:
        return self.mean

    def log_prob(self, action: jax.Array) -> jax.Array:
        """Sum over D of log N(a_d; mean_d, std_d); shape [...]."""
        log_std = self._log_std
        z = (action - self.mean) * jnp.exp(-log_std)
        per_dim = -0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)
        return jnp.sum(per_dim, axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(self._log_std + 0.5 * (1.0 + math.log(2 * math.pi)), axis=-1)
