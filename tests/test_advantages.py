"""GAE against a NumPy reference on a hand-built trajectory with both kinds of episode ends."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fusedrl.train.advantages import gae


def reference_gae(r, v, v_next, term, done, gamma, lam):
    """Textbook GAE written as loops over episodes, independently of the scan formulation."""
    T = len(r)
    adv = np.zeros(T)
    for t in range(T):
        # Sum over k >= t within the same episode of (gamma * lam)^(k - t) * delta_k.
        total, weight = 0.0, 1.0
        for k in range(t, T):
            bootstrap = 0.0 if term[k] else gamma * v_next[k]
            delta = r[k] + bootstrap - v[k]
            total += weight * delta
            if done[k]:
                break
            weight *= gamma * lam
        adv[t] = total
    return adv


def hand_built():
    # 9 steps: an episode that terminates at t=2, one truncated by a time limit at t=5, and one
    # still running when the rollout ends at t=8.
    r = np.array([1.0, 0.5, 2.0, 1.0, 1.0, 3.0, 0.0, 1.0, 2.0], np.float32)
    v = np.array([0.3, 0.2, 0.9, 1.5, 1.1, 2.0, 0.4, 0.6, 0.8], np.float32)
    term = np.array([0, 0, 1, 0, 0, 0, 0, 0, 0], bool)
    trunc = np.array([0, 0, 0, 0, 0, 1, 0, 0, 0], bool)
    done = term | trunc
    # v_next[t] is the value of the observation after step t, before any reset: inside an
    # episode it is v[t+1]; at an episode end it is the value of the final observation.
    v_next = np.append(v[1:], 0.7).astype(np.float32)
    v_next[2] = 5.0  # terminal state's value must be ignored
    v_next[5] = 4.0  # truncated episode bootstraps from its final observation's value
    return r, v, v_next, term, done


@pytest.mark.parametrize("jit", [False, True])
def test_gae_matches_reference_with_termination_and_truncation(jit):
    r, v, v_next, term, done = hand_built()
    gamma, lam = 0.9, 0.8
    fn = jax.jit(gae) if jit else gae
    got = fn(*map(jnp.asarray, (r, v, v_next, term, done)), gamma, lam)
    want = reference_gae(r, v, v_next, term, done, gamma, lam)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    # The two ends are treated differently: the truncated step bootstraps from 4.0, the
    # terminated one ignores its 5.0.
    assert np.isclose(got[5], r[5] + gamma * 4.0 - v[5], atol=1e-6)
    assert np.isclose(got[2], r[2] - v[2], atol=1e-6)


def test_gae_treats_truncation_differently_from_termination():
    r, v, v_next, term, done = hand_built()
    as_terminated = term.copy()
    as_terminated[5] = True  # pretend the time limit was a terminal state
    a = gae(*map(jnp.asarray, (r, v, v_next, term, done)), 0.9, 0.8)
    b = gae(*map(jnp.asarray, (r, v, v_next, as_terminated, done)), 0.9, 0.8)
    assert not np.isclose(a[5], b[5])
    np.testing.assert_allclose(a[6:], b[6:])  # later episodes are unaffected


def test_gae_vmaps_over_envs():
    r, v, v_next, term, done = hand_built()
    stack = [np.stack([x, x[::-1]], axis=1) for x in (r, v, v_next, term, done)]
    got = jax.vmap(gae, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)(*stack, 0.99, 0.95)
    for i in range(2):
        want = reference_gae(*(s[:, i] for s in stack), 0.99, 0.95)
        np.testing.assert_allclose(np.asarray(got[:, i]), want, rtol=1e-5, atol=1e-6)


def test_gae_rejects_batched_input():
    r, v, v_next, term, done = hand_built()
    with pytest.raises(AssertionError):
        gae(*(np.stack([x, x]) for x in (r, v, v_next, term, done)), 0.99, 0.95)
