"""Minibatch shuffling: `fusedrl.train.shuffle.permutations` draws uniformly random permutations."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from fusedrl.train import shuffle

# Chi-square critical values at p = 0.001 (scipy.stats.chi2.ppf(0.999, df)).
CHI2_999 = {23: 49.728, 119: 173.617}


def _chi_square(perms: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of the counts of each of the n! permutations of the rows of `perms`."""
    num, n = perms.shape
    codes = np.zeros(num, np.int64)
    for j in range(n):
        codes = codes * n + perms[:, j]
    _, counts = np.unique(codes, return_counts=True)
    cells = math.factorial(n)
    counts = np.concatenate([counts, np.zeros(cells - len(counts))])
    expected = num / cells
    return float(((counts - expected) ** 2 / expected).sum()), cells - 1


@pytest.mark.parametrize("n", [4, 5])
def test_every_permutation_equally_likely(n):
    perms = np.asarray(shuffle.permutations(jax.random.key(n), 200 * math.factorial(n), n))
    stat, df = _chi_square(perms)
    assert stat < CHI2_999[df], (stat, df)


def test_ties_are_broken_by_further_rounds():
    """With 4 random bits per round (index_bits=28), ties are frequent: one round is far from
    uniform (ties keep index order); the rounds the criterion asks for are not."""
    key, num = jax.random.key(7), 96_000
    one = np.asarray(shuffle.permutations(key, num, 4, index_bits=28, rounds=1))
    assert _chi_square(one)[0] > 10 * CHI2_999[23]
    rounds = 3
    assert rounds * 4 >= 3 * math.log2(4) + 4
    many = np.asarray(shuffle.permutations(key, num, 4, index_bits=28, rounds=rounds))
    assert _chi_square(many)[0] < CHI2_999[23]


@pytest.mark.parametrize("n", [1, 2, 512, 1000, 32768 + 3])
def test_rows_are_permutations_with_uniform_positions(n):
    num = 8
    perms = np.asarray(shuffle.permutations(jax.random.key(1), num, n))
    assert perms.shape == (num, n) and perms.dtype == np.int32
    np.testing.assert_array_equal(np.sort(perms, axis=1), np.broadcast_to(np.arange(n), (num, n)))
    if n >= 512:
        # Each row shuffles: its correlation with the identity order is ~N(0, 1/n).
        corr = [np.corrcoef(np.arange(n), row)[0, 1] for row in perms]
        assert np.max(np.abs(corr)) < 5 / math.sqrt(n)
        assert len({row.tobytes() for row in perms}) == num


def test_rounds_meet_the_random_bits_criterion():
    for n in (2, 4, 512, 2048, 32768, 2**20, shuffle.MAX_PACKED):
        index_bits = max(1, (n - 1).bit_length())
        r = shuffle.rounds_for(n)
        assert r * (32 - index_bits) >= 3 * math.log2(n)
        assert (r - 1) * (32 - index_bits) < 3 * math.log2(n) or r == 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="num >= 1 and n >= 1"):
        shuffle.permutations(jax.random.key(0), 4, 0)
    with pytest.raises(ValueError, match=r"index_bits must be in \[10, 31\]"):
        shuffle.permutations(jax.random.key(0), 1, 1000, index_bits=9)


def test_falls_back_to_jax_beyond_the_packed_range(monkeypatch):
    monkeypatch.setattr(shuffle, "MAX_PACKED", 8)
    perms = np.asarray(shuffle.permutations(jax.random.key(0), 3, 20))
    np.testing.assert_array_equal(np.sort(perms, axis=1), np.broadcast_to(np.arange(20), (3, 20)))
