"""Mixed precision (`compute_dtype="bfloat16"`) for every algorithm and built-in network: MLP, CNN,
GRU and LSTM. Parameters and optimiser state stay float32, the losses are computed in float32 from
the networks' float32 heads, and on one rollout the first update's losses match float32's within
bfloat16's precision (8 bits of mantissa: a relative rounding of 2^-8 per operation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fusedrl.train import A2CConfig, PPOConfig, ReinforceConfig, make_train

pytestmark = pytest.mark.timeout(600)

TINY = dict(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, hidden_sizes=(16, 16), lr=1e-3)
COMBOS = {
    "ppo-mlp": (PPOConfig, dict(env_id="CartPole-v1", update_epochs=2, num_minibatches=2)),
    "ppo-cnn": (PPOConfig, dict(env_id="gymnax:Breakout-MinAtar", network="cnn", update_epochs=1,
                                num_minibatches=2)),
    "ppo-gru": (PPOConfig, dict(env_id="CartPole-v1", recurrent="gru", recurrent_size=16, update_epochs=2,
                                num_minibatches=2)),
    "ppo-lstm": (PPOConfig, dict(env_id="Pendulum-v1", recurrent="lstm", recurrent_size=16, update_epochs=2,
                                 num_minibatches=2)),
    "a2c-mlp": (A2CConfig, dict(env_id="Pendulum-v1")),
    "reinforce-mlp": (ReinforceConfig, dict(env_id="CartPole-v1", env_params={"max_steps_in_episode": 8})),
}
LOSSES = ("policy_loss", "value_loss", "entropy")


def _float_dtypes(tree):
    return {x.dtype for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)}


@pytest.mark.parametrize("combo", [c if c == "ppo-mlp" else pytest.param(c, marks=pytest.mark.slow)
                                   for c in COMBOS])
def test_bfloat16_trains_and_matches_float32_on_the_first_update(combo):
    config_cls, fields = COMBOS[combo]
    config = config_cls(**{**TINY, **fields})
    t32, t16 = make_train(config), make_train(config.replace(compute_dtype="bfloat16"))
    hparams = t32.default_hparams()
    key = jax.random.key(3)
    state = jax.jit(t32.init)(key, hparams)
    start = state.policy_state

    # One float32 rollout; the first update's losses on it, from the same parameters, in each dtype.
    @jax.jit
    def first_update(state):
        state, traj = t32.rollout(state, hparams, t32.make_env(hparams), key)
        return t32.learn_from_rollout(state, traj, hparams, start)[1], t16.learn_from_rollout(
            state, traj, hparams, start)[1]

    # The network's outputs (logits or mean, value; a recurrent carry) come back float32.
    obs = jax.tree.map(lambda x: x[:2], state.obs)
    if t16.recurrent:
        out = jax.eval_shape(t16.network.apply, state.params, jax.tree.map(lambda x: x[:2], start), obs)
    else:
        out = jax.eval_shape(t16.network.apply, state.params, obs)
    assert _float_dtypes(out) == {jnp.dtype(jnp.float32)}, out

    m32, m16 = first_update(state)
    for name in LOSSES:
        a, b = float(m32[name]), float(m16[name])
        assert np.isfinite(b), (name, b)
        # bfloat16's rounding (2^-8 relative) through a few layers; the policy loss, a mean of
        # normalised advantages times ratios near 1, is near 0 and compared absolutely.
        np.testing.assert_allclose(b, a, rtol=0.03, atol=0.01, err_msg=name)
    assert any(float(m32[n]) != float(m16[n]) for n in LOSSES)  # computed in bfloat16, not float32

    # A few updates in bfloat16 from the start: finite, float32 parameters and optimiser state.
    result = jax.jit(t16)(key)
    for name in (*LOSSES, "episode_return"):
        assert np.all(np.isfinite(np.asarray(result.metrics[name]))), name
    float32 = {jnp.dtype(jnp.float32)}
    assert _float_dtypes(result.state.params) == _float_dtypes(result.state.opt_state) == float32
    text = jax.jit(t16).lower(key).as_text()
    assert "bf16" in text and "bf16" not in jax.jit(t32).lower(key).as_text()


def test_presets_bench_compares_dtypes_from_the_same_keys(capsys, monkeypatch):
    """`python -m fusedrl.bench presets --dtypes float32,bfloat16`: one row per dtype, trained and
    evaluated from the same keys, greedily only, at the capped budget, and a comparison whose IQMs
    and z match a float64 NumPy reference computed from the returns `fusedrl.evaluate` gave."""
    import json

    import fusedrl
    from fusedrl.bench import presets as bench_presets

    def iqm64(per_seed):  # the mean of the middle half of 4 seeds' means
        return np.sort(np.asarray(per_seed, np.float64))[1:3].mean()

    # Welch's z of two sides of known per-seed means, against its float64 formula.
    a, b = np.array([1.0, 2.0, 4.0, 9.0]), np.array([3.0, 5.0, 6.0, 10.0])
    def side(m, dtype):  # a row of per-seed means m
        return {"env": "e", "algo": "ppo", "env_steps": 1, "compute_dtype": dtype, "seeds": 4,
                "mean": m.mean(), "std": m.std(), "iqm": iqm64(m), "train_s": 1.0}

    c = bench_presets.compare_dtypes(side(a, "float32"), side(b, "bfloat16"))
    np.testing.assert_allclose(c["z"], (b.mean() - a.mean()) / np.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 4))
    assert (c["mean_diff"], c["iqm_diff"], c["dtypes"]) == (2.0, 2.5, ["float32", "bfloat16"])

    seen = []  # (compute_dtype, greedy, key data, returns [seeds, episodes]) per evaluate call
    evaluate = fusedrl.evaluate

    def recording(config, result, key, num_episodes=64, *, greedy=True):
        out = evaluate(config, result, key, num_episodes, greedy=greedy)
        seen.append((config.compute_dtype, greedy, np.asarray(jax.random.key_data(key)), np.asarray(out)))
        return out

    monkeypatch.setattr(fusedrl, "evaluate", recording)
    argv = ["--env", "CartPole-v1", "--seeds", "4", "--episodes", "3", "--set", "num_steps=16",
            "--max-timesteps", "512", "--dtypes", "float32,bfloat16", "--greedy-only", "--json"]
    assert bench_presets.main(argv) == 0
    out = capsys.readouterr().out
    docs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    rows, (comparison,) = docs[:2], [d["comparison"] for d in docs[2:]]

    assert [r["compute_dtype"] for r in rows] == ["float32", "bfloat16"]
    assert [r["env_steps"] for r in rows] == [512, 512]  # the preset's 500,000 capped
    assert [(dtype, greedy) for dtype, greedy, _, _ in seen] == [("float32", True), ("bfloat16", True)]
    np.testing.assert_array_equal(seen[0][2], seen[1][2])  # evaluated from the same key

    means = [returns.astype(np.float64).mean(axis=1) for _, _, _, returns in seen]
    for row, m in zip(rows, means, strict=True):
        np.testing.assert_allclose(row["iqm"], iqm64(m), rtol=1e-6)
        np.testing.assert_allclose(row["mean"], m.mean(), rtol=1e-6)
    np.testing.assert_allclose(comparison["iqm_diff"], iqm64(means[1]) - iqm64(means[0]), atol=1e-6)
    if means[0].mean() != means[1].mean():  # z is 0 either way when the two sides score alike
        se = np.sqrt((means[0].var(ddof=1) + means[1].var(ddof=1)) / 4)
        np.testing.assert_allclose(comparison["z"], (means[1].mean() - means[0].mean()) / se, rtol=1e-5)
    assert "bfloat16 - float32: mean" in out and "CartPole-v1, bfloat16" in out

    with pytest.raises(SystemExit):
        bench_presets.main(["--env", "CartPole-v1", "--dtypes", "float32"])  # one dtype: nothing to compare


@pytest.mark.parametrize("combo", ["ppo-mlp", "ppo-cnn", "ppo-gru", "ppo-lstm", "a2c-mlp"])
def test_the_rollout_casts_the_layers_once_with_the_same_outputs(combo, monkeypatch):
    """`compute_params` casts every layer's kernel and bias to bfloat16 once (the rollout's loop
    would otherwise cast them at every step) and leaves the rest (Pendulum's log-std) float32. Each
    built-in network gives the same bits on the cast parameters, and so does a whole bfloat16
    rollout, against the same rollout with the casts left to the layers."""
    from fusedrl.networks import compute_params
    from fusedrl.train import trainer as trainer_module

    config_cls, fields = COMBOS[combo]
    t16 = make_train(config_cls(**{**TINY, **fields, "compute_dtype": "bfloat16"}))
    hparams = t16.default_hparams()
    key = jax.random.key(5)
    state = jax.jit(t16.init)(key, hparams)
    cast = compute_params(state.params, "bfloat16")
    leaves = [(p[-1].key, x.dtype) for p, x in jax.tree_util.tree_leaves_with_path(cast)]
    assert {d for name, d in leaves if name in ("kernel", "bias")} == {jnp.dtype(jnp.bfloat16)}
    assert {d for name, d in leaves if name not in ("kernel", "bias")} <= {jnp.dtype(jnp.float32)}
    assert compute_params(state.params, "float32") is state.params

    obs = state.obs
    args = (state.policy_state, obs) if t16.recurrent else (obs,)
    for a, b in zip(jax.tree.leaves(t16.network.apply(cast, *args)),
                    jax.tree.leaves(t16.network.apply(state.params, *args)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    def rollout():
        out = jax.jit(lambda s: t16.rollout(s, hparams, t16.make_env(hparams), key))(state)
        return jax.tree.map(lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(
            x.dtype, jax.dtypes.prng_key) else x, out)

    kernels = {x.shape for p, x in jax.tree_util.tree_leaves_with_path(state.params) if p[-1].key == "kernel"}

    def casts_in_the_step_loop():
        """float32 -> bfloat16 casts of kernel-shaped arrays inside the rollout's scan (jaxpr)."""
        from jax.extend.core import ClosedJaxpr, Jaxpr

        def walk(jaxpr, in_scan):
            found = 0
            for eqn in jaxpr.eqns:
                if in_scan and eqn.primitive.name == "convert_element_type":
                    x = eqn.invars[0].aval
                    found += x.dtype == jnp.float32 and x.shape in kernels
                for v in eqn.params.values():
                    for sub in v if isinstance(v, tuple | list) else [v]:
                        inner = sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub
                        if isinstance(inner, Jaxpr):
                            found += walk(inner, in_scan or eqn.primitive.name == "scan")
            return found

        program = jax.make_jaxpr(lambda s: t16.rollout(s, hparams, t16.make_env(hparams), key))
        return walk(program(state).jaxpr, False)

    once, casts_once = rollout(), casts_in_the_step_loop()
    monkeypatch.setattr(trainer_module, "compute_params", lambda params, dtype: params)
    for a, b in zip(jax.tree.leaves(once), jax.tree.leaves(rollout()), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # Left to the layers, the step loop casts every kernel; cast once, none. (A recurrent carry
    # [envs, H] can share a kernel's shape and is cast in the loop either way: hence the difference.)
    assert casts_in_the_step_loop() - casts_once >= len(kernels)
    assert casts_once == 0 or t16.recurrent
