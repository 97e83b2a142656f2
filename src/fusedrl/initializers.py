"""Orthogonal initialisation without LAPACK, so it is safe inside `vmap` on any CPU.

`jax.nn.initializers.orthogonal` draws a Gaussian matrix and takes its QR decomposition. Under
`jax.vmap` (many seeds at once) that QR becomes a batched LAPACK custom call, and on a 2-core CPU
XLA's thread pool has been seen to deadlock inside it (both worker threads waiting in the batched
QR). This initialiser draws the same Gaussian matrix and orthonormalises it with Gram-Schmidt
written in plain `jnp` (re-orthogonalised once, "twice is enough"), which is the same Q as QR with
the sign convention jax uses (positive diagonal of R), up to float32 rounding. It lowers to dots and
elementwise ops only: no custom call, nothing for a thread pool to deadlock on.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np


def _orthonormal_columns(z: jax.Array) -> jax.Array:
    """Gram-Schmidt on the columns of z [n, k], n >= k; returns Q [n, k] with Q^T Q = I."""
    n, k = z.shape

    def body(j, q):
        v = z[:, j]
        # Columns of q not yet written are zero, so projecting on all of q only removes the
        # components along columns 0..j-1.
        v = v - q @ (q.T @ v)
        v = v - q @ (q.T @ v)
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    return jax.lax.fori_loop(0, k, body, jnp.zeros((n, k), z.dtype))


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=jnp.float32):
    """Initializer with the semantics (and, for the same key, the values) of
    `jax.nn.initializers.orthogonal(scale, column_axis)`, computed without QR."""

    def init(key, shape, dtype=dtype):
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer needs a shape of rank >= 2, got {shape}.")
        return _orthogonal(key, tuple(shape), float(scale), column_axis, jnp.dtype(dtype))

    return init


# One jitted function behind every initializer `orthogonal` returns: JAX traces it once per
# (shape, scale, axis, dtype) in a process, not once per layer. The actor and critic torsos share
# shapes, and flax's own modules (the conv torso, the recurrent cells) trace each parameter's
# initializer again with `jax.eval_shape` at every call, to check the stored shape. Inlined, so
# the program is the one the plain function gives.
@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4), inline=True)
def _orthogonal(key, shape, scale, column_axis, dtype):
    n_cols = shape[column_axis]
    n_rows = math.prod(shape) // n_cols
    z = jax.random.normal(key, (max(n_rows, n_cols), min(n_rows, n_cols)), dtype)
    q = _orthonormal_columns(z)
    if n_rows < n_cols:
        q = q.T
    q = jnp.reshape(q, tuple(np.delete(shape, column_axis)) + (n_cols,))
    q = jnp.moveaxis(q, -1, column_axis)
    return jnp.asarray(scale, dtype) * q
