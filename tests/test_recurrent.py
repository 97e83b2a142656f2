"""Recurrent PPO (`PPOConfig(recurrent="gru" | "lstm")`): the carry's resets, the replay in the
update, the guarantees, evaluation and `Policy.act`, and a memory task the MLP cannot solve."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl
from fusedrl import PPOConfig, make_train
from fusedrl.policy import Policy

# CartPole truncated every 3 steps: episode ends at known steps (a random policy cannot fail in 3).
TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3, update_epochs=2,
            num_minibatches=2, hidden_sizes=(16,), recurrent="gru", recurrent_size=8,
            env_params={"max_steps_in_episode": 3})


@pytest.fixture(scope="module")
def tiny():
    config = PPOConfig(**TINY)
    train = make_train(config)
    jitted = jax.jit(train)
    return config, train, jitted, jitted(jax.random.key(0))


def _rollout(train, key):
    hp = train.default_hparams()
    state = train.init(key, hp)
    start = state.policy_state
    state, traj = train.rollout(state, hp, train.make_env(hp), jax.random.key(7))
    return state, start, traj


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_carry_resets_exactly_where_an_episode_starts(cell):
    # Step by step by hand: the network from the rollout's carry on each observation, and back to
    # the initial carry after each step that ended an episode (t = 2, 5 with 3-step episodes).
    train = make_train(PPOConfig(**{**TINY, "recurrent": cell}))
    state, start, traj = jax.jit(lambda k: _rollout(train, k))(jax.random.key(0))
    done = np.asarray(traj.done)
    assert done[[2, 5]].all() and not done[[0, 1, 3, 4, 6, 7]].any()
    carry, initial = start, train.initial_policy_state(TINY["num_envs"])
    for t in range(TINY["num_steps"]):
        carry, (pi, value) = train.network.apply(state.params, carry, traj.obs[t])
        np.testing.assert_allclose(traj.log_prob[t], pi.log_prob(traj.action[t]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(traj.value[t], value, rtol=1e-5, atol=1e-6)
        if done[t].any():
            carry = jax.tree.map(lambda s, c, t=t: jnp.where(done[t][:, None], s, c), initial, carry)
    for a, b in zip(jax.tree.leaves(carry), jax.tree.leaves(state.policy_state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # Without the resets the values after the first episode end differ: the check above can fail.
    kept = start
    for t in range(4):
        kept, (_, value) = train.network.apply(state.params, kept, traj.obs[t])
    assert not np.allclose(value, traj.value[3], rtol=1e-5, atol=1e-6)


def test_the_update_replays_each_sequence_from_its_stored_state(tiny):
    # The loss sees the rollout's own policy: the replay of whole env sequences (env-major, from the
    # carry before the rollout) gives back the rollout's log-probabilities and values.
    _, train, _, _ = tiny
    state, start, traj = jax.jit(lambda k: _rollout(train, k))(jax.random.key(1))
    seq = (jnp.swapaxes(traj.obs, 0, 1), jnp.swapaxes(traj.done, 0, 1), start)
    pi, value = train.sequence_apply(state.params, seq)
    np.testing.assert_allclose(pi.log_prob(jnp.swapaxes(traj.action, 0, 1)),
                               jnp.swapaxes(traj.log_prob, 0, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, jnp.swapaxes(traj.value, 0, 1), rtol=1e-5, atol=1e-6)
    # A minibatch of some envs only (what the update takes) replays those envs alone.
    rows = np.array([3, 1])
    sub = jax.tree.map(lambda x: x[rows], seq)
    pi_sub, _ = train.sequence_apply(state.params, sub)
    np.testing.assert_allclose(pi_sub.logits, pi.logits[rows], rtol=1e-5, atol=1e-6)


def test_recurrent_guarantees(tiny):
    config, train, jitted, result = tiny
    assert result.state.policy_state.shape == (config.num_envs, config.recurrent_size)
    again = jitted(jax.random.key(0))
    for name, x in result.metrics.items():
        np.testing.assert_array_equal(x, again.metrics[name], err_msg=name)
    key = jax.random.key(0)
    with jax.transfer_guard("disallow"):
        jax.block_until_ready(jitted(key))
    assert "callback" not in jitted.lower(key).as_text()
    # Resume: the carry is part of the state, so a run continued from its state (one program for
    # both halves, as a resumed run compiles it) trains as one run, up to float rounding.
    hp = train.default_hparams()
    longer = make_train(config.replace(total_timesteps=2 * config.total_timesteps))
    whole = jax.jit(longer)(jax.random.key(0))
    run = jax.jit(lambda s: longer.run(s, hp, config.num_updates))
    half = run(longer.init(jax.random.key(0), hp))
    rest = run(half.state)
    joined = np.concatenate([half.metrics["policy_loss"], rest.metrics["policy_loss"]])
    np.testing.assert_allclose(joined, whole.metrics["policy_loss"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(rest.state.policy_state, whole.state.policy_state, rtol=1e-5, atol=1e-6)


def test_evaluate_and_policy_act_carry_the_state(tiny):
    config, train, _, result = tiny
    returns = fusedrl.evaluate(config, result, jax.random.key(3), num_episodes=4)
    assert returns.shape == (4,) and np.all(returns == 3.0)  # 3-step episodes, every one truncated
    policy = Policy(config, result.state, result.hparams)
    state, start, traj = jax.jit(lambda k: _rollout(train, k))(jax.random.key(2))
    state = state.replace(params=result.params)
    carry = train.initial_policy_state(config.num_envs)
    for t in range(3):  # one episode: act carries the state between calls as the network would
        carry, (pi, _) = train.network.apply(result.params, carry, traj.obs[t])
        np.testing.assert_array_equal(policy.act(traj.obs[t]), pi.mode())
    policy.reset()
    np.testing.assert_array_equal(policy.act(traj.obs[0]), train.network.apply(
        result.params, train.initial_policy_state(config.num_envs), traj.obs[0])[1][0].mode())


@pytest.mark.parametrize("kwargs, words", [
    (dict(recurrent="rnn"), ["recurrent must be None", "'gru', 'lstm'", "'rnn'"]),
    (dict(recurrent="gru", recurrent_size=0), ["recurrent_size must be positive"]),
    (dict(recurrent="gru", num_envs=6, num_steps=8, num_minibatches=4, total_timesteps=48),
     ["num_minibatches=4 must divide num_envs=6", "[1, 2, 3, 6]"]),
    (dict(recurrent="lstm", network="my_nets:net"), ["set one of them"]),
])
def test_recurrent_config_errors_name_the_field_and_the_fix(kwargs, words):
    with pytest.raises(ValueError) as info:
        PPOConfig(**kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


MEMORY = dict(env_id="gymnax:MemoryChain-bsuite", num_envs=16, num_steps=32, total_timesteps=60_000,
              num_minibatches=4, lr=1e-3, hidden_sizes=(32,), recurrent_size=32)


@pytest.mark.parametrize("recurrent", ["gru", None])
def test_a_recurrent_policy_remembers_a_cue_the_mlp_cannot(recurrent):
    # MemoryChain: the cue is seen at the first step only and must be acted on at the last; a
    # correct answer is +1, a wrong one -1, so a policy without memory scores 0 on average.
    config = PPOConfig(**MEMORY, recurrent=recurrent)
    result = jax.jit(make_train(config))(jax.random.key(0))
    score = float(fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=256).mean())
    if recurrent:
        assert score >= 0.9, score
    else:
        assert abs(score) <= 0.3, score


def test_dataclass_fields_of_the_recurrent_config_roundtrip():
    c = PPOConfig(**TINY)
    assert PPOConfig.from_dict(c.to_dict()) == c
    assert dataclasses.replace(c, recurrent=None).recurrent is None
