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


def test_gae_ignores_a_non_finite_terminal_value():
    # A custom env's terminal observation may have a non-finite value; it is never used, and must
    # not turn into 0 * inf = NaN and spread back through the trace.
    r, v, v_next, term, done = hand_built()
    finite = gae(*map(jnp.asarray, (r, v, v_next, term, done)), 0.9, 0.8)
    for bad in (np.inf, -np.inf, np.nan):
        v_bad = v_next.copy()
        v_bad[2] = bad  # the terminated step
        got = gae(*map(jnp.asarray, (r, v, v_bad, term, done)), 0.9, 0.8)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(finite))


@pytest.mark.parametrize("bootstrap", [True, False], ids=["bootstrap", "as-terminal"])
@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_trainer_advantages_on_a_real_rollout_with_both_kinds_of_ends(algo, bootstrap):
    """The trainer's own wiring, not only `gae`: a CartPole rollout under a 12-step time limit ends
    episodes both ways. Which steps terminated or were truncated is worked out here from the
    observations alone (the pole or cart beyond its limit; the 12th step), and the advantages the
    update uses must be the reference GAE of those ends, with V of each pre-reset final
    observation: a truncated step bootstraps from it with `bootstrap_truncation=True`, and ends like
    a terminated one with False (the env reports the truncation either way). PPO's and A2C's alike."""
    from fusedrl import make
    from fusedrl.train import A2CConfig, PPOConfig, make_train

    limit = 12
    one_step = dict(num_minibatches=1, update_epochs=1) if algo == "ppo" else {}
    config = {"ppo": PPOConfig, "a2c": A2CConfig}[algo](
        env_id="CartPole-v1", num_envs=4, num_steps=48, total_timesteps=4 * 48, hidden_sizes=(8,),
        normalize_reward=True, gae_lambda=0.95, env_params={"max_steps_in_episode": limit},
        bootstrap_truncation=bootstrap, **one_step)
    train = make_train(config)
    hparams = train.default_hparams()

    @jax.jit
    def roll(key):
        state = train.init(key, hparams)
        first_obs = state.obs
        state, traj = train.rollout(state, hparams, train.make_env(hparams), key, keep_next_obs=True)
        adv, targets = train.advantages(state.params, traj, hparams)
        return first_obs, traj, adv, targets, train.network.apply(state.params, traj.next_obs)[1]

    first_obs, traj, adv, targets, v_next = jax.device_get(roll(jax.random.key(0)))
    _, params = make("CartPole-v1")
    x, theta = traj.next_obs[..., 0], traj.next_obs[..., 2]
    term = (np.abs(x) > params.x_threshold) | (np.abs(theta) > params.theta_threshold_radians)
    done = np.zeros_like(term)
    length = np.zeros(config.num_envs, int)
    for t in range(config.num_steps):
        length += 1
        done[t] = term[t] | (length == limit)
        length[done[t]] = 0
    assert term.any() and (done & ~term).any()  # both kinds of end occur
    np.testing.assert_array_equal(traj.terminated, term)
    np.testing.assert_array_equal(traj.done, done)
    # The observation acted on next is next_obs inside an episode, the reset one after its end.
    acted_next = np.concatenate([traj.obs[1:], traj.obs[-1:] * np.nan])
    inside = ~done[:-1]
    np.testing.assert_array_equal(traj.next_obs[:-1][inside], acted_next[:-1][inside])
    assert np.all(np.any(traj.next_obs[:-1][~inside] != acted_next[:-1][~inside], axis=-1))
    np.testing.assert_array_equal(traj.obs[0], first_obs)
    ends = term if bootstrap else done  # the ends that do not bootstrap
    for i in range(config.num_envs):
        want = reference_gae(traj.reward[:, i], traj.value[:, i], v_next[:, i], ends[:, i], done[:, i],
                             config.gamma, config.gae_lambda)
        np.testing.assert_allclose(adv[:, i], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(targets, adv + traj.value, rtol=1e-6)



def long_trajectory(T=41, seed=0):
    """A trajectory longer than one unrolled loop iteration (`BACKWARD_UNROLL`) and not a multiple
    of it, with terminations and truncations at random steps."""
    rng = np.random.default_rng(seed)
    r, v, v_next = (rng.normal(size=T).astype(np.float32) for _ in range(3))
    term = rng.random(T) < 0.08
    done = term | (rng.random(T) < 0.08)
    term[T // 3], done[T // 3] = True, True  # at least one end of each kind
    done[2 * T // 3] = True
    return r, v, v_next, term, done


@pytest.mark.parametrize("T", [41, 128])
def test_gae_matches_its_reference_past_one_unrolled_iteration(T):
    """GAE runs `BACKWARD_UNROLL` steps per loop iteration: over several iterations and a
    remainder it still matches the float64 reference step by step (the returns-to-go alike:
    tests/test_reinforce.py)."""
    from fusedrl.train.advantages import BACKWARD_UNROLL

    assert T > 2 * BACKWARD_UNROLL  # several iterations (and, at 41, a remainder)
    r, v, v_next, term, done = long_trajectory(T)
    assert term.any() and (done & ~term).any()
    got = jax.jit(gae)(*map(jnp.asarray, (r, v, v_next, term, done)), 0.99, 0.95)
    np.testing.assert_allclose(np.asarray(got), reference_gae(r, v, v_next, term, done, 0.99, 0.95),
                               rtol=1e-5, atol=1e-5)


def test_unrolling_the_backward_recursions_keeps_every_bit(monkeypatch):
    """`BACKWARD_UNROLL` changes how many steps one loop iteration runs, not the arithmetic or its
    order: jitted on a [T, N] batch as the trainer runs them, GAE and the returns-to-go give the
    rolled loop's (unroll 1) results bit for bit. (A bitwise comparison with NumPy is not possible:
    XLA:CPU contracts multiply-adds into FMAs.)"""
    from fusedrl.train import advantages

    r, v, v_next, term, done = (np.stack([x, x[::-1]], axis=1) for x in long_trajectory(41, seed=1))

    def both():
        adv = jax.jit(jax.vmap(advantages.gae, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1))(
            r, v, v_next, term, done, 0.99, 0.95)
        g, _ = jax.jit(jax.vmap(advantages.returns_to_go, in_axes=(1, 1, None), out_axes=1))(r, done, 0.9)
        return np.asarray(adv), np.asarray(g)

    unrolled = both()
    monkeypatch.setattr(advantages, "BACKWARD_UNROLL", 1)
    for a, b in zip(unrolled, both(), strict=True):
        np.testing.assert_array_equal(a, b)
