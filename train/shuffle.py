"""Uniformly random permutations for minibatch shuffling, fast on every backend.

`jax.random.permutation` sorts (random key, index) pairs, twice for large n, with XLA's generic
sort, which on CPU calls a comparator per comparison. Here each round packs a random key and the
index into one uint32 (random high bits, index low bits) and sorts those alone, which XLA sorts
natively; the low bits of the sorted words are the permutation. Ties between equal random parts
keep their earlier order, so like JAX we sort in several rounds, composing their permutations,
until the random bits across rounds reach 3 * log2(n) (JAX's criterion with 32-bit keys: ties
then bias the result negligibly).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

#: Largest n for the packed-key path (at least 8 random bits per round stay next to the index).
MAX_PACKED = 2**24


def rounds_for(n: int, index_bits: int | None = None) -> int:
    """Sorting rounds for `n` elements: random bits over all rounds >= 3 * log2(n)."""
    index_bits = _index_bits(n) if index_bits is None else index_bits
    return max(1, math.ceil(3 * math.log2(max(n, 2)) / (32 - index_bits)))


def _index_bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def permutations(
    key: jax.Array, num: int, n: int, *, index_bits: int | None = None, rounds: int | None = None
) -> jax.Array:
    """`num` independent uniformly random permutations of range(n): int32 [num, n].

    `index_bits` (>= bits needed for n, <= 31) and `rounds` override the defaults: for tests that
    starve the random part of bits, so ties are frequent.
    """
    num, n = int(num), int(n)
    if n < 1 or num < 1:
        raise ValueError(f"permutations needs num >= 1 and n >= 1, got num={num}, n={n}.")
    if n > MAX_PACKED:
        return jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(key, num))
    if index_bits is None:
        index_bits = _index_bits(n)
    elif not _index_bits(n) <= index_bits <= 31:
        raise ValueError(f"index_bits must be in [{_index_bits(n)}, 31] for n={n}, got {index_bits}.")
    rounds = rounds_for(n, index_bits) if rounds is None else int(rounds)
    low = jnp.uint32((1 << index_bits) - 1)
    bits = jax.random.bits(key, (rounds, num, n), jnp.uint32)
    iota = jnp.broadcast_to(jnp.arange(n, dtype=jnp.uint32), (num, n))
    perm = iota
    for r in range(bits.shape[0]):
        # Position j of this round's order holds the element at position `packed & low` of the last.
        packed = jnp.sort((bits[r] & ~low) | iota, axis=-1)
        perm = jnp.take_along_axis(perm, (packed & low).astype(jnp.int32), axis=-1)
    return perm.astype(jnp.int32)


__all__ = ["permutations", "rounds_for"]
