"""The fused PPO trainer: config validation, the guarantees of DESIGN.md, metrics, evaluation."""

import dataclasses
import functools
import json
import logging
import os
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fusedrl
from fusedrl.train import PPO_ALGORITHM, PPOConfig, Trainer, Tuning, make_train, resolve_tuning
from fusedrl.train.losses import Batch

SMALL = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6,
             update_epochs=2, num_minibatches=2, hidden_sizes=(16,))


@pytest.fixture(scope="module")
def small():
    config = PPOConfig(**SMALL)
    train = make_train(config)
    jitted = jax.jit(train)
    return config, train, jitted, jitted(jax.random.key(0))


# ------------------------------------------------------------------------------------- config
def test_config_derived_values():
    c = PPOConfig(num_envs=8, num_steps=32, total_timesteps=10_000, num_minibatches=4)
    assert (c.batch_size, c.minibatch_size, c.num_updates, c.env_steps) == (256, 64, 39, 9984)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.lr = 1.0


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(num_envs=3, num_steps=5, num_minibatches=4), ValueError,
         ["num_minibatches=4", "15", "[1, 3, 5, 15]"]),
        (dict(num_envs=0), ValueError, ["num_envs", "positive"]),
        (dict(num_steps=-1), ValueError, ["num_steps"]),
        (dict(num_envs=2.0), TypeError, ["num_envs", "int"]),
        (dict(total_timesteps=100), ValueError, ["total_timesteps", "num_envs * num_steps"]),
        (dict(lrr=1e-3), TypeError, ["'lrr'", "Did you mean 'lr'"]),
        (dict(learning_rate=1e-3), TypeError, ["'learning_rate'", "Did you mean 'lr'"]),  # cleanrl's, SB3's
        (dict(gamma=1.5), ValueError, ["gamma", "(0, 1]"]),
        (dict(lr="fast"), TypeError, ["lr", "number"]),
        (dict(activation="sigmoid"), ValueError, ["activation", "tanh"]),
        (dict(hidden_sizes=(64, 0)), ValueError, ["hidden_sizes"]),
        (dict(normalize_obs=1), TypeError, ["normalize_obs"]),
        (dict(log_std_init="low"), TypeError, ["log_std_init", "number"]),
        (dict(log_std_init=float("-inf")), ValueError, ["log_std_init", "finite"]),
        (dict(target_kl=0.0), ValueError, ["target_kl", "> 0", "None"]),
        (dict(target_kl="0.01"), TypeError, ["target_kl", "number"]),
        (dict(lr=float("inf")), ValueError, ["lr", "finite"]),
        (dict(vf_coef=float("inf")), ValueError, ["vf_coef", "finite"]),
        (dict(lr=float("nan")), ValueError, ["lr", "> 0"]),
        (dict(activation=["tanh"]), ValueError, ["activation", "'tanh'", "['tanh']"]),
        (dict(env_params=[1]), TypeError, ["env_params", "mapping", "'gravity'"]),
        (dict(env_params={"gravity": [9.8, 12.0]}), TypeError,
         ["env_params['gravity']", "number", "fusedrl.sweep(config, gravity=[...])"]),
        (dict(clip_eps=0.0), ValueError, ["clip_eps", "> 0"]),
        (dict(clip_eps=-0.2), ValueError, ["clip_eps", "> 0"]),
        (dict(max_grad_norm=0.0), ValueError, ["max_grad_norm", "> 0"]),
        (dict(gae_lambda=-0.1), ValueError, ["gae_lambda", "[0, 1]"]),
        (dict(ent_coef=-0.01), ValueError, ["ent_coef", ">= 0"]),
        (dict(ent_coef=float("inf")), ValueError, ["ent_coef", "finite"]),
        (dict(total_timesteps=2**31), ValueError, ["total_timesteps=2147483648", "2**31"]),
        (dict(env_params={"gravity": float("nan")}), ValueError, ["env_params['gravity']", "NaN"]),
        (dict(lr=True), TypeError, ["lr", "number", "True"]),
        # Values that pass the checks in Python but not in float32, the precision training uses.
        (dict(lr=1e300), ValueError, ["lr must be > 0 and finite, got 1e+300: that is inf in float32"]),
        (dict(lr=1e-50), ValueError, ["lr must be > 0", "that is 0.0 in float32"]),
        (dict(gamma=1e-46), ValueError, ["gamma must be in (0, 1]", "that is 0.0 in float32"]),
        (dict(max_grad_norm=1e-50), ValueError, ["max_grad_norm must be > 0", "0.0 in float32"]),
        # NumPy scalars that are not real numbers (np.bool_(True) trained with lr 1.0).
        (dict(lr=np.bool_(True)), TypeError, ["lr must be a number", "True"]),
        (dict(lr=np.complex64(1e-3 + 1j)), TypeError, ["lr must be a number", "complex64"]),
        (dict(lr=np.str_("0.1")), TypeError, ["lr must be a number", "'0.1'"]),
        (dict(num_envs=np.float64(4.0)), TypeError, ["num_envs must be an int"]),
        # Containers without a layer order (a set's order is arbitrary) or without widths.
        (dict(hidden_sizes={64, 32}), TypeError, ["hidden_sizes must be a list or tuple", "set"]),
        (dict(hidden_sizes={64: 1}), TypeError, ["hidden_sizes must be a list or tuple", "dict"]),
        (dict(hidden_sizes="64"), TypeError, ["hidden_sizes must be a list or tuple", "str"]),
        # A minibatch of one: its normalised advantage is 0, and the policy never learns.
        (dict(num_envs=2, num_steps=8, num_minibatches=16, total_timesteps=160), ValueError,
         ["num_minibatches=16 makes minibatches of one transition", "normalize_adv=False"]),
    ],
)
def test_config_errors_name_the_field_and_the_fix(kwargs, exc, words):
    with pytest.raises(exc) as info:
        PPOConfig(**kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("kwargs", [dict(gamma=1.0), dict(gae_lambda=0.0), dict(gae_lambda=1.0),
                                    dict(ent_coef=0.0), dict(vf_coef=0.0),
                                    dict(max_grad_norm=float("inf"))])
def test_config_accepts_the_closed_ends_of_its_ranges(kwargs):
    assert getattr(PPOConfig(**kwargs), next(iter(kwargs))) == next(iter(kwargs.values()))


def test_config_env_params_are_plain_python_numbers():
    c = PPOConfig(env_params={"gravity": np.float32(12.0), "max_steps_in_episode": np.int64(50)})
    assert type(c.env_params["gravity"]) is float and type(c.env_params["max_steps_in_episode"]) is int
    json.dumps(c.to_dict())  # run folders and checkpoints write the config as JSON


def test_config_takes_numpy_and_jax_scalars_as_python_numbers():
    c = PPOConfig(num_envs=np.int64(4), lr=jnp.float32(1e-3), gamma=np.array(0.98),
                  target_kl=np.float32(0.02), log_std_init=np.float64(-0.5),
                  hidden_sizes=np.array([32, 16]), num_minibatches=np.int32(4))
    assert type(c.num_envs) is int and type(c.num_minibatches) is int
    assert all(type(getattr(c, f)) is float for f in ("lr", "gamma", "target_kl", "log_std_init"))
    assert c.hidden_sizes == (32, 16) and all(type(w) is int for w in c.hidden_sizes)
    assert c.lr == float(np.float32(1e-3))
    hash(c)  # evaluate and the run caches key on the config
    json.dumps(c.to_dict())
    # One minibatch of one transition is fine without advantage normalisation.
    assert PPOConfig(num_envs=2, num_steps=8, num_minibatches=16, total_timesteps=160,
                     normalize_adv=False).minibatch_size == 1


def test_config_docstring_describes_every_field():
    # help(fusedrl.PPOConfig) is where the README sends users: every field is described there, and
    # the value clip's range, which is clip_eps (a sweep of clip_eps changes both clips), is said.
    doc = PPOConfig.__doc__.split("Fields:")[1]
    described = set(re.findall(r"^      (\w+(?:, \w+)*):", doc, re.MULTILINE))
    names = {name for entry in described for name in entry.split(", ")}
    assert names == {f.name for f in dataclasses.fields(PPOConfig)}
    clip_value = doc.split("clip_value_loss:")[1].split("target_kl:")[0]
    assert "clip_eps" in clip_value and "rollout's values" in clip_value


def test_config_replace_and_dict_roundtrip():
    c = PPOConfig(env_params={"gravity": 12.0})
    assert PPOConfig.from_dict(c.to_dict()) == c
    assert hash(c) == hash(PPOConfig.from_dict(c.to_dict()))
    with pytest.raises(TypeError, match="gama"):
        c.replace(gama=0.9)
    with pytest.raises(TypeError, match="read-only"):
        c.env_params["gravity"] = 1.0


def test_unknown_env_and_env_param_fail_at_make_train():
    with pytest.raises(ValueError, match="CartPole-v1"):
        make_train(PPOConfig(env_id="CartPol-v1"))
    with pytest.raises(ValueError, match="gravity"):
        make_train(PPOConfig(env_params={"gravty": 1.0}))


# ---------------------------------------------------------------------------------- guarantees
def test_metrics_shapes_and_values(small):
    config, _, _, result = small
    m = result.metrics
    assert set(m) == {*fusedrl.train.METRIC_NAMES, "env_fault"}
    for name, x in m.items():
        assert x.shape == (config.num_updates,), name
        assert np.all(np.isfinite(np.asarray(x, np.float64))), name
    np.testing.assert_array_equal(m["env_steps"], config.batch_size * np.arange(1, 7))
    # Linear annealing from lr towards 0, constant within an update.
    np.testing.assert_allclose(m["learning_rate"], config.lr * (1 - np.arange(6) / 6), rtol=1e-6)
    assert np.all(m["entropy"] > 0) and np.all(m["entropy"] <= np.log(2) + 1e-6)
    # Random CartPole episodes last ~8-60 steps: every 64-step update after the first completes
    # some; each reported return lies in that range; an update that completes none carries the
    # previous value (0 before any episode ended).
    done = m["episodes_completed"]
    assert np.all(done[1:] > 0)
    ret = np.asarray(m["episode_return"])
    assert np.all((ret[done > 0] >= 8) & (ret[done > 0] <= 100))
    carried = np.concatenate([[0.0], ret[:-1]])
    np.testing.assert_array_equal(ret[done == 0], carried[done == 0])
    np.testing.assert_array_equal(m["episode_return"], m["episode_length"])  # reward 1 per step


def test_episode_return_carried_not_nan_when_no_episode_completes():
    # 200-step Pendulum episodes cannot complete within the 2 updates of 8 steps of this run: the
    # metric must say 0 episodes and report a finite carried value, never NaN.
    config, result = _tiny_run("Pendulum-v1")
    assert config.num_updates * config.num_steps < 200
    m = result.metrics
    np.testing.assert_array_equal(m["episodes_completed"], 0)
    np.testing.assert_array_equal(m["episode_return"], 0.0)


def test_episode_statistics_carry_over_updates_without_an_episode_end():
    # Pendulum episodes last 200 steps: with 1 env and 100-step updates they end in updates 2, 4, 6,
    # and updates 3 and 5 repeat the return of the episode that ended just before.
    c = PPOConfig(env_id="Pendulum-v1", num_envs=1, num_steps=100, total_timesteps=600,
                  num_minibatches=1, update_epochs=1, hidden_sizes=(8,))
    m = jax.jit(make_train(c))(jax.random.key(0)).metrics
    np.testing.assert_array_equal(m["episodes_completed"], [0, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(m["episode_length"], [0, 200, 200, 200, 200, 200])
    ret = np.asarray(m["episode_return"])
    assert ret[0] == 0.0 and ret[1] < 0 and ret[3] != ret[1]
    np.testing.assert_array_equal(ret[[2, 4]], ret[[1, 3]])


def test_same_key_bit_identical(small):
    config, train, jitted, result = small
    again = jax.jit(make_train(config))(jax.random.key(0))  # a fresh compile too
    for name in result.metrics:
        np.testing.assert_array_equal(result.metrics[name], again.metrics[name], err_msg=name)
    chex.assert_trees_all_equal(result.params, again.params)
    other = jitted(jax.random.key(1))
    assert not np.array_equal(other.metrics["policy_loss"], result.metrics["policy_loss"])


def test_no_host_transfers_inside_train(small):
    config, _, jitted, _ = small
    key = jax.random.key(3)
    with jax.transfer_guard("disallow"):
        out = jitted(key)
        jax.block_until_ready(out)
    # The guard sees transfers of arguments and results, not host callbacks inside the program
    # (a jax.debug.callback runs under it unnoticed), so the compiled program is checked too.
    assert "callback" not in jitted.lower(key).as_text()
    with_callback = jax.jit(make_train(config, callback=lambda m: None))
    assert "callback" in with_callback.lower(key).as_text()  # what the check looks for


@pytest.fixture(scope="module")
def seeds8(small):
    """`jax.jit(jax.vmap(train))` over 8 keys, then over 8 new keys; `train.__call__` may be traced
    once only."""
    config, train, _, _ = small
    traced = chex.assert_max_traces(train.__call__, n=1)
    fn = jax.jit(jax.vmap(traced))
    keys = jax.random.split(jax.random.key(0), 8)
    out = fn(keys)
    out2 = fn(jax.random.split(jax.random.key(1), 8))  # new keys: no retrace
    return keys, out, out2


@pytest.mark.slow
def test_vmap_over_seeds_traces_once(small, seeds8):
    config, _, jitted, _ = small
    keys, out, out2 = seeds8
    assert out.metrics["episode_return"].shape == (8, config.num_updates)
    assert out2.metrics["policy_loss"].shape == (8, config.num_updates)
    # Per-seed results: seeds differ, and seed i matches a single run with key i.
    assert len({np.asarray(out.metrics["policy_loss"][i]).tobytes() for i in range(8)}) == 8
    single = jitted(keys[3])
    np.testing.assert_allclose(out.metrics["episode_return"][3], single.metrics["episode_return"],
                               rtol=1e-4)


@pytest.mark.slow
def test_traced_hyperparameters_do_not_retrace(small):
    config, train, _, _ = small
    traced = chex.assert_max_traces(train.__call__, n=1)
    fn = jax.jit(traced)
    hp = config.hparams()
    a = fn(jax.random.key(0), hp)
    b = fn(jax.random.key(0), hp.replace(lr=jnp.float32(1e-2), ent_coef=jnp.float32(0.0)))
    assert not np.array_equal(a.metrics["policy_loss"], b.metrics["policy_loss"])
    np.testing.assert_allclose(b.metrics["learning_rate"][0], 1e-2)
    # Env params are traced too: vmapping over gravity needs no new program.
    hps = jax.tree.map(lambda x: jnp.stack([x, x]), hp)
    hps = hps.replace(env_params=hps.env_params.replace(gravity=jnp.array([9.8, 20.0])))
    out = jax.jit(jax.vmap(train, in_axes=(None, 0)))(jax.random.key(0), hps)
    assert out.metrics["episode_return"].shape == (2, config.num_updates)


@pytest.fixture(scope="module")
def one_update():
    """One update's config (reward normalisation on, so its gamma counts), its jitted train, and
    the params it ends with at its default hyperparameters, key 0."""
    base = PPOConfig(**{**SMALL, "total_timesteps": SMALL["num_envs"] * SMALL["num_steps"],
                        "hidden_sizes": (8,), "normalize_reward": True, "lr": 1e-2})
    train = make_train(base)
    run = jax.jit(train)
    return base, train, run, run(jax.random.key(0), train.default_hparams()).params


@pytest.mark.parametrize("field, value", [("lr", 1e-3), ("gamma", 0.5), ("gae_lambda", 0.3),
                                          ("clip_eps", 0.02), ("ent_coef", 0.5), ("vf_coef", 5.0),
                                          ("max_grad_norm", 1e-6)])
def test_traced_hyperparameters_act_like_the_config_fields(one_update, field, value):
    # Every use of a traced field must read the traced value: training with `hparams.<field> = v`
    # is training with a config whose <field> is v, and differs from training with the default
    # (so the field is used at all). The config's trainer is run on its own default hparams, as
    # `train(key)` runs it: a use of `config.<field>` would show as a difference (and another
    # program); without one, it is `run`'s program again, which the compile cache serves.
    base, train, run, default = one_update
    key = jax.random.key(0)
    traced = run(key, train.default_hparams().replace(**{field: jnp.float32(value)})).params
    other = make_train(base.replace(**{field: value}))
    static = jax.jit(other)(key, other.default_hparams()).params
    chex.assert_trees_all_close(traced, static, rtol=1e-5, atol=1e-7)
    moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in
                zip(jax.tree.leaves(traced), jax.tree.leaves(default), strict=True))
    assert moved > 1e-5, (field, moved)


def test_hparams_type_is_checked(small):
    _, train, _, _ = small
    with pytest.raises(TypeError, match="Hyperparams"):
        train(jax.random.key(0), {"lr": 1e-3})


@pytest.mark.parametrize("name, words", [
    ("num_envs", "it is a static PPOConfig field (it fixes shapes or control flow): "
                 "make_train(config.replace(num_envs=...)) compiles a new program."),
    ("gravity", "it is an env param: hparams.replace(env_params=hparams.env_params.replace(gravity=...))."),
    ("lrr", "the closest are lr."),
    ("zzz", "its fields are lr, gamma, gae_lambda, clip_eps, ent_coef, vf_coef, max_grad_norm, env_params."),
])
def test_hparams_replace_says_where_a_field_that_is_not_traced_lives(name, words):
    # Before: flax's "__init__() got an unexpected keyword argument", whatever the name.
    hp = PPOConfig().hparams()
    with pytest.raises(TypeError, match=re.escape(f"Hyperparams has no field {name!r}: {words}")):
        hp.replace(lr=1e-3, **{name: 1})
    assert hp.replace(lr=1e-3, gamma=0.5).lr == 1e-3  # the fields it has, as before


def test_hparams_of_the_wrong_shape_are_refused_with_the_vmap_that_fits(small):
    # Shape (3,) failed as an opaque broadcasting error deep in Adam; shape (1,) trained, silently
    # giving metrics of shape [num_updates, 1]. The error's in_axes recipe must work as written.
    config, train, _, _ = small
    hp, key = config.hparams(), jax.random.key(0)
    lrs = hp.replace(lr=jnp.array([1e-4, 3e-4, 1e-3]))
    gravities = hp.replace(env_params=hp.env_params.replace(gravity=jnp.array([9.8, 12.0])))
    recipes, ones = {}, hp.replace(gamma=jnp.ones(1))
    for bad, name in [(lrs, "lr"), (ones, "gamma"), (gravities, "env_params.gravity")]:
        message = rf"hparams\.{name} has shape \(\d+,\), expected \(\) for one run"
        with pytest.raises(ValueError, match=message) as e:
            jax.eval_shape(train, key, bad)
        recipes[name] = re.search(r"with (axes = .*?) \(in_axes", str(e.value)).group(1)
    for bad, name, runs in [(lrs, "lr", 3), (gravities, "env_params.gravity", 2)]:
        scope = {"jax": jax, "hparams": hp}
        exec(recipes[name], scope)  # the error's own recipe for in_axes
        out = jax.eval_shape(jax.vmap(train, in_axes=(None, scope["axes"])), key, bad)
        assert out.metrics["episode_return"].shape == (runs, config.num_updates), name


def test_obs_stats_takes_a_vmapped_results_state_and_hparams():
    # The hparams shape check is for one run's train/init/run; obs_stats of a vmapped result (both
    # with a seed axis) returned the seeds' statistics before it, and must still.
    config = PPOConfig(**{**SMALL, "normalize_obs": True})
    train = make_train(config)
    res = jax.eval_shape(jax.vmap(train, in_axes=(0, None)), jax.random.split(jax.random.key(0), 2),
                         config.hparams())
    assert jnp.shape(res.hparams.lr) == (2,)
    stats = train.obs_stats(res.state, res.hparams)
    assert stats.mean.shape[0] == 2


def test_memory_does_not_grow_with_total_timesteps():
    def out_bytes(total):
        train = make_train(PPOConfig(**{**SMALL, "total_timesteps": total}))
        shapes = jax.eval_shape(train, jax.random.key(0))
        state = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes.state))
        metrics = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes.metrics))
        return state, metrics, PPOConfig(**{**SMALL, "total_timesteps": total}).num_updates

    s1, m1, n1 = out_bytes(64 * 10)
    s2, m2, n2 = out_bytes(64 * 10_000)
    assert s1 == s2  # the carried state is the same size
    assert m2 / m1 == n2 / n1  # metrics are per-update scalars only


@pytest.mark.slow
def test_resume_continues_the_same_run(small):
    config, train, jitted, result = small
    hp = config.hparams()
    run3 = jax.jit(lambda s: train.run(s, hp, 3))  # one program for both halves
    half = run3(jax.jit(train.init)(jax.random.key(0), hp))
    rest = run3(half.state)
    joined = np.concatenate([half.metrics["policy_loss"], rest.metrics["policy_loss"]])
    np.testing.assert_allclose(joined, result.metrics["policy_loss"], rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_callback_every_k_updates():
    seen = []
    config = PPOConfig(**SMALL)
    train = make_train(config, callback=lambda m: seen.append(int(m["env_steps"])), callback_every=2)
    jax.block_until_ready(jax.jit(train)(jax.random.key(0)))
    jax.effects_barrier()
    assert sorted(seen) == [config.batch_size * u for u in (2, 4, 6)]


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(callback=print, callback_every=0), ValueError, "callback_every must be an int >= 1, got 0"),
    (dict(callback=print, callback_every=2.5), ValueError, "got 2.5"),  # was cut to 2 silently
    (dict(callback=print, callback_every=True), ValueError, "got True"),
    (dict(callback="print"), TypeError, "callback must be a function of the metrics dict"),
])
def test_callback_arguments_are_checked(kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        make_train(PPOConfig(**SMALL), **kwargs)
    make_train(PPOConfig(**SMALL), callback=print, callback_every=np.int64(3))  # as numpy gives it


def _vec_state(env_state):
    while hasattr(env_state, "inner"):
        env_state = env_state.inner
    return env_state


def _retrain_with(small, **choices):
    """The `small` fixture's run (key 0) again, with some speed choices of its `Tuning` changed."""
    tuning = dataclasses.replace(small[1].tuning, **choices)
    return jax.jit(make_train(small[0], tuning=tuning))(jax.random.key(0))


def _assert_same_metrics(a, b):
    for name, x in a.metrics.items():
        np.testing.assert_allclose(x, b.metrics[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_rollout_predraws_resets_and_falls_back_to_the_pool(small):
    """Rollouts take every reset from `VecEnv.predraw` (the per-env pool is never used); when the
    predraw would exceed `Tuning.predraw_max_bytes` they use the pool instead, and still train."""

    def pool_key(state):  # the VecEnv's own key changes only when its pool is redrawn
        return np.asarray(jax.random.key_data(_vec_state(state.env_state).key))

    _, train, _, result = small
    start = pool_key(jax.jit(train.init)(jax.random.key(0)))
    assert int(result.metrics["episodes_completed"].sum()) > 0
    assert bool(_vec_state(result.state.env_state).pool_fresh.all())
    np.testing.assert_array_equal(pool_key(result.state), start)
    pooled = _retrain_with(small, predraw_max_bytes=0)
    assert int(pooled.metrics["episodes_completed"].sum()) > 0
    assert not np.array_equal(pool_key(pooled.state), start)
    for name, x in pooled.metrics.items():
        assert np.all(np.isfinite(np.asarray(x, np.float64))), name


def test_tuning_is_one_record_taken_explicitly():
    # No speed choice has passed the grid (docs/speed.md): every platform gets the same record.
    for backend in ("cpu", "gpu", "tpu"):
        assert resolve_tuning(backend, num_envs=4, batch_size=512) == Tuning()
    with pytest.raises(TypeError, match="tuning must be a fusedrl.train.tuning.Tuning"):
        make_train(PPOConfig(**SMALL), tuning={"predraw_max_bytes": 0})
    with pytest.raises(ValueError, match="predraw_max_bytes must be an int >= 0"):
        Tuning(predraw_max_bytes=-1)
    with pytest.raises(ValueError, match="value_in_rollout must be a bool"):
        Tuning(value_in_rollout=1)


def test_eager_evaluate_compiles_one_program_once(small, caplog):
    """Called outside jit, `evaluate` runs one cached jitted program, not one per operation, and
    the same program whether its episodes are bounded or not."""
    config, _, _, result = small
    key = jax.random.key(2)

    def compiles():
        return sum("Finished XLA compilation" in r.getMessage() for r in caplog.records)

    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        a = fusedrl.evaluate(config, result, key, num_episodes=7)  # 7: no other test's program
        first = compiles()
        b = fusedrl.evaluate(config, result, key, num_episodes=7)
        bounded = fusedrl.evaluate(config, result, key, num_episodes=7, max_steps=3)
        with jax.transfer_guard("disallow"):  # the bound goes to the device explicitly
            far = fusedrl.evaluate(config, result, key, num_episodes=7, max_steps=10_000)
    assert (first, compiles()) == (1, 1)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, far)  # every CartPole episode ends by 500 steps
    assert np.all(np.isnan(bounded))  # no CartPole episode of this briefly trained agent ends in 3 steps


# ----------------------------------------------------------------------------- env varieties
@functools.cache
def _tiny_run(env_id):
    """A 2-update run of `env_id` with both normalisers on (shared by the tests that need one)."""
    c = PPOConfig(env_id=env_id, num_envs=2, num_steps=8, total_timesteps=2 * 8 * 2,
                  num_minibatches=2, update_epochs=1, hidden_sizes=(8,), normalize_obs=True,
                  normalize_reward=True)
    return c, jax.jit(make_train(c))(jax.random.key(0))


@pytest.mark.slow
def test_target_kl_stops_an_update_early():
    # One update on the whole batch per epoch, lr 1e-2: after the first step the policy has moved far
    # more than 1.5 * 1e-7 from the rollout's, so with target_kl=1e-7 the second epoch's step is
    # skipped and the run ends where one epoch of the same step ends (same keys: same rollout).
    base = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=64,
                     num_minibatches=1, hidden_sizes=(16,), lr=1e-2)
    key = jax.random.key(3)
    stopped = jax.jit(make_train(base.replace(update_epochs=2, target_kl=1e-7)))(key)
    one_epoch = jax.jit(make_train(base.replace(update_epochs=1)))(key)
    two_epochs = jax.jit(make_train(base.replace(update_epochs=2)))(key)
    np.testing.assert_array_equal(stopped.metrics["gradient_steps"], [1])
    np.testing.assert_array_equal(one_epoch.metrics["gradient_steps"], [1])
    np.testing.assert_array_equal(two_epochs.metrics["gradient_steps"], [2])
    # Full-batch steps: the epochs' permutations only reorder a sum, hence allclose.
    chex.assert_trees_all_close(stopped.params, one_epoch.params, rtol=1e-5, atol=1e-6)
    far = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))),
                                       two_epochs.params, one_epoch.params))
    assert max(far) > 1e-3  # the second step does move the parameters
    # Reported, as SB3 does: the step taken and the evaluation that stopped the next one, the same
    # two evaluations (same parameters, same full batch) as the two-epoch run's.
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
        np.testing.assert_allclose(stopped.metrics[name], two_epochs.metrics[name], rtol=1e-4, atol=1e-7)
    # The first step starts at the rollout's policy (KL 0); the second evaluation found it > 1.5e-7.
    assert 2 * float(stopped.metrics["approx_kl"][0]) > 1.5e-7
    assert float(one_epoch.metrics["approx_kl"][0]) < 1e-9


@pytest.mark.slow
def test_target_kl_stops_only_beyond_one_and_a_half_times_the_target():
    # SB3's rule: an update stops once approx_kl > 1.5 * target_kl. Two full-batch epochs: the
    # second evaluation's KL (the first is 0) decides whether the second step is taken.
    base = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=64,
                     num_minibatches=1, update_epochs=2, hidden_sizes=(16,), lr=1e-2)
    key = jax.random.key(3)
    free = jax.jit(make_train(base))(key)
    kl = 2 * float(free.metrics["approx_kl"][0])
    assert kl > 1e-4
    for target, steps in ((kl / 1.25, 2), (kl / 1.75, 1)):  # 1.5 * target = 1.2 kl, 0.857 kl
        r = jax.jit(make_train(base.replace(target_kl=target)))(key)
        np.testing.assert_array_equal(r.metrics["gradient_steps"], [steps], err_msg=str(target))


def test_target_kl_stop_is_final_for_the_update():
    # Four 1-sample minibatches, two epochs: two samples start at KL 0 from the rollout's policy, two
    # far beyond 1.5 * target_kl. Once a far one stops the update, the near ones that come after it
    # (KL still ~0: the parameters no longer move) must not restart it: at most the near samples
    # drawn before the first far one are stepped, never all 2 x 2 of them.
    config = PPOConfig(**{**SMALL, "num_envs": 1, "num_steps": 4, "total_timesteps": 4,
                          "num_minibatches": 4, "target_kl": 1e-3, "normalize_adv": False})
    train = make_train(config)
    hp = train.default_hparams()
    state = train.init(jax.random.key(0), hp)
    obs = jnp.asarray(np.random.default_rng(0).normal(0, 1, (4, 4)), jnp.float32)
    action = jnp.array([0, 1, 0, 1], jnp.int32)
    pi, value = train.network.apply(state.params, obs)
    far = jnp.array([0.0, 0.0, 1.0, 1.0])  # log pi_old = log pi - 1: KL (k3) e^1 - 2 = 0.72
    batch = Batch(obs=obs, action=action, log_prob=pi.log_prob(action) - far, value=value,
                  advantage=jnp.array([1.0, -1.0, 0.5, -0.5]), target=value + 1.0)
    for seed in range(4):
        steps = int(jax.jit(train.learn)(state.params, state.opt_state, batch, hp, jax.random.key(seed))[3])
        assert steps <= 2, (seed, steps)


def test_data_parallel_advantage_normalisation_matches_the_plain_agent_on_equal_shards():
    # Two shards holding the same batch: the pooled statistics equal each shard's own, so the
    # data-parallel step must be the plain agent's step (advantages of mean 2 and std 3, so a
    # normalisation by the variance instead of the std would show).
    config = PPOConfig(**SMALL)
    plain, dp = make_train(config), make_train(config, axis_name="shards")
    hp = plain.default_hparams()
    state = plain.init(jax.random.key(0), hp)
    rng = np.random.default_rng(0)
    n = config.batch_size
    batch = Batch(obs=jnp.asarray(rng.normal(0, 1, (n, 4)), jnp.float32),
                  action=jnp.asarray(rng.integers(0, 2, n), jnp.int32),
                  log_prob=jnp.full((n,), np.log(0.5), jnp.float32), value=jnp.zeros(n),
                  advantage=jnp.asarray(rng.normal(2.0, 3.0, n), jnp.float32),
                  target=jnp.asarray(rng.normal(0, 1, n), jnp.float32))
    k = jax.random.key(1)
    want = jax.jit(plain.learn)(state.params, state.opt_state, batch, hp, k)[0]
    both = jax.vmap(dp.learn, in_axes=(None,) * 5, axis_size=2, axis_name="shards")
    got = jax.jit(both)(state.params, state.opt_state, batch, hp, k)[0]
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        np.testing.assert_allclose(b[0], a, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(b[1], a, rtol=1e-4, atol=1e-6)


def test_data_parallel_advantage_normalisation_pools_unequal_shards():
    # Shards holding different batches (advantages of mean 2, std 3 and of mean -1, std 0.5): one
    # minibatch per epoch, so the data-parallel step is the plain agent's step on both batches
    # together, normalised once with the pooled statistics (a shard renormalising with its own would
    # show). Gradients are means over equal shards, so their mean is the pooled batch's gradient.
    config = PPOConfig(**{**SMALL, "num_minibatches": 1, "update_epochs": 1})
    plain, dp = make_train(config), make_train(config, axis_name="shards")
    hp = plain.default_hparams()
    state = plain.init(jax.random.key(0), hp)
    rng = np.random.default_rng(0)
    n = config.batch_size

    def batch(adv_mean, adv_std):
        return Batch(obs=jnp.asarray(rng.normal(0, 1, (n, 4)), jnp.float32),
                     action=jnp.asarray(rng.integers(0, 2, n), jnp.int32),
                     log_prob=jnp.full((n,), np.log(0.5), jnp.float32), value=jnp.zeros(n),
                     advantage=jnp.asarray(rng.normal(adv_mean, adv_std, n), jnp.float32),
                     target=jnp.asarray(rng.normal(0, 1, n), jnp.float32))

    shards = (batch(2.0, 3.0), batch(-1.0, 0.5))
    k = jax.random.key(1)
    pooled = jax.tree.map(lambda *x: jnp.concatenate(x), *shards)
    want = jax.jit(plain.learn)(state.params, state.opt_state, pooled, hp, k)[0]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *shards)
    both = jax.vmap(dp.learn, in_axes=(None, None, 0, None, None), axis_name="shards")
    got = jax.jit(both)(state.params, state.opt_state, stacked, hp, k)[0]
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        np.testing.assert_allclose(b[0], a, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(b[1], a, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_data_parallel_shards_share_normalizer_statistics():
    # Shards of one agent see different observations and rewards; the normalisers pool them, so the
    # shared network sees every shard's inputs scaled alike, and evaluate takes the agent's result.
    from fusedrl.data_parallel import DATA_AXIS, data_parallel_train
    from fusedrl.envs.wrappers import NormalizeObservation, NormalizeReward, find_wrapper_state

    config = PPOConfig(env_id="Pendulum-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3,
                       num_minibatches=2, update_epochs=1, hidden_sizes=(8,), normalize_obs=True,
                       normalize_reward=True)
    dp_train = data_parallel_train(config, jax.devices()[:1], num_shards=2)
    agent = dp_train(jax.random.key(0))  # its env state: [shard, ...], each shard's 2 envs'
    one_shard = make_train(config.replace(num_envs=2, total_timesteps=2 * 8 * 3), axis_name=DATA_AXIS)
    venv = one_shard.make_env(one_shard.default_hparams())  # the wrapper stack, to find the stats
    assert not np.array_equal(agent.state.obs[0], agent.state.obs[1])  # the shards' own envs
    # Samples seen: all 4 envs' (2 per shard) resets and 24 steps' observations, 24 steps' returns.
    pairs = ((NormalizeObservation, "obs_stats", 4 * 25), (NormalizeReward, "return_stats", 4 * 24))
    for cls, field, seen in pairs:
        stats = getattr(find_wrapper_state(venv, agent.state.env_state, cls), field)
        for x in jax.tree.leaves(stats):
            np.testing.assert_array_equal(x[0], x[1], err_msg=cls.__name__)
        np.testing.assert_allclose(stats.count, seen, rtol=1e-5, err_msg=cls.__name__)
    returns = fusedrl.evaluate(config, agent, jax.random.key(1), num_episodes=2)
    assert returns.shape == (2,) and np.all(np.isfinite(returns))
    agents = jax.vmap(dp_train)(jax.random.split(jax.random.key(0), 2))  # 2 seeds of such agents
    returns = fusedrl.evaluate(config, agents, jax.random.key(1), num_episodes=2)
    assert returns.shape == (2, 2) and np.all(np.isfinite(returns))


@pytest.mark.slow
def test_target_kl_never_reached_changes_nothing_and_the_schedule_follows_updates(
    small, user_compiler_options
):
    config, train, _, result = small
    np.testing.assert_array_equal(result.metrics["gradient_steps"],
                                  config.update_epochs * config.num_minibatches)
    # Bit for bit as a user compiles the two programs: XLA:CPU's older emitters, which the suite
    # compiles with (tests/conftest.py), fuse them differently, and their parameters then differ by
    # rounding. Without options the fixture's program is already the user's.
    if user_compiler_options:
        result = jax.jit(train, compiler_options=user_compiler_options)(jax.random.key(0))
    loose = jax.jit(make_train(config.replace(target_kl=1e9)), compiler_options=user_compiler_options)(
        jax.random.key(0))
    chex.assert_trees_all_equal(loose.params, result.params)  # the same training, bit for bit
    loss_stats = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
    for name in result.metrics:  # the loss statistics' means are summed in another order
        if name in loss_stats:
            np.testing.assert_allclose(loose.metrics[name], result.metrics[name], rtol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(loose.metrics[name], result.metrics[name], err_msg=name)
    tight = jax.jit(make_train(config.replace(target_kl=1e-9, lr=1e-2)))(jax.random.key(0))
    steps = np.asarray(tight.metrics["gradient_steps"])
    assert np.all(steps >= 1) and np.all(steps < config.update_epochs * config.num_minibatches), steps
    # Skipped steps still count for the learning-rate schedule, but not for Adam, whose step count
    # (its bias correction) must match the moments it keeps: the steps taken.
    lr_40x = result.metrics["learning_rate"] * 40
    np.testing.assert_allclose(tight.metrics["learning_rate"], lr_40x, rtol=1e-6)
    (schedule,) = _opt_states(tight.state.opt_state, optax.ScaleByScheduleState)
    (adam,) = _opt_states(tight.state.opt_state, optax.ScaleByAdamState)
    assert int(schedule.count) == config.num_updates * config.update_epochs * config.num_minibatches
    assert int(adam.count) == int(steps.sum())


def test_the_optimizer_steps_with_the_reported_learning_rate(small):
    # The metric comes from `PPO.learning_rate`; the steps from the optimizer's own schedule. Fed
    # the same gradient at every step, Adam's update is lr * g / (|g| + eps), so each step's size
    # shows the rate it used: it must be the metric's rate for that update.
    config, train, _, _ = small
    hparams = train.default_hparams()
    opt = train.make_optimizer(hparams)
    params = {"w": jnp.zeros(3)}
    grad = {"w": jnp.array([0.1, -0.2, 0.3])}  # norm < max_grad_norm: not clipped
    state = opt.init(params)
    steps = config.update_epochs * config.num_minibatches
    for u in range(config.num_updates):
        want = float(train.learning_rate(hparams, jnp.int32(u)))
        for _ in range(steps):
            update, state = opt.update(grad, state, params)
            np.testing.assert_allclose(np.abs(update["w"]), want, rtol=1e-3, err_msg=f"update {u}")
    assert want == pytest.approx(config.lr / config.num_updates)


def test_adam_epsilon_is_1e_5(small):
    # PPO's Adam uses eps 1e-5 (PureJaxRL, CleanRL, SB3), not optax's 1e-8: a constant gradient of
    # size g gives steps of lr * g / (g + eps), half the rate at g = 1e-5.
    _, train, _, _ = small
    hparams = train.default_hparams()
    opt = train.make_optimizer(hparams)
    params = {"w": jnp.zeros(2)}
    grad = {"w": jnp.array([1e-5, -1e-5])}
    update, _ = opt.update(grad, opt.init(params), params)
    want = float(train.learning_rate(hparams, jnp.int32(0))) * 1e-5 / (1e-5 + 1e-5)
    np.testing.assert_allclose(np.abs(update["w"]), want, rtol=1e-3)


def test_learning_rate_stays_at_zero_past_the_budget(small):
    # A run resumed past its budget keeps the annealed rate at 0; it never turns negative.
    _, train, _, _ = small
    hp = train.default_hparams()
    n = train.config.num_updates
    assert float(train.learning_rate(hp, jnp.int32(n - 1))) > 0
    for u in (n, n + 1, 3 * n):
        assert float(train.learning_rate(hp, jnp.int32(u))) == 0.0


def test_explained_variance_metric_is_of_the_values_against_the_targets(small):
    _, train, _, _ = small
    hp = train.default_hparams()

    @jax.jit
    def one_update(key):
        state = train.init(key, hp)
        state, traj = train.rollout(state, hp, train.make_env(hp), key)
        _, targets = train.advantages(state.params, traj, hp)
        _, metrics = train.learn_from_rollout(state, traj, hp)
        return traj.value, targets, metrics["explained_variance"]

    value, target, ev = (np.asarray(x, np.float64) for x in one_update(jax.random.key(0)))
    np.testing.assert_allclose(ev, 1 - np.var(target - value) / np.var(target), rtol=1e-4)


@pytest.mark.slow
def test_episode_return_is_the_raw_return_under_reward_normalisation():
    # The trainer reports the env's own returns, not sums of normalised rewards (EpisodeStatistics
    # sits below NormalizeReward): CartPole pays 1 per step, so each return is its length.
    config = PPOConfig(**{**SMALL, "normalize_reward": True})
    m = jax.jit(make_train(config))(jax.random.key(0)).metrics
    done = np.asarray(m["episodes_completed"]) > 0
    assert done.sum() >= 3
    returns, lengths = np.asarray(m["episode_return"]), np.asarray(m["episode_length"])
    np.testing.assert_array_equal(returns[done], lengths[done])


def _opt_states(tree, cls):
    is_leaf = lambda x: isinstance(x, cls)  # noqa: E731
    return [x for x in jax.tree.leaves(tree, is_leaf=is_leaf) if is_leaf(x)]


@pytest.mark.slow
def test_log_std_init_sets_the_gaussian_policy_initial_std():
    # The entropy of a 1-D Gaussian is log_std + 0.5 * (1 + log(2 pi)); after one small update (lr
    # 2.5e-4, gradient norm clipped at 0.5) the log-std has barely moved from where init put it.
    base = PPOConfig(env_id="Pendulum-v1", num_envs=2, num_steps=8, total_timesteps=16,
                     num_minibatches=2, update_epochs=1, hidden_sizes=(8,))
    gaussian_entropy_at_zero = 0.5 * (1.0 + np.log(2.0 * np.pi))
    for log_std in (0.0, -1.0):
        c = base.replace(log_std_init=log_std)
        train = make_train(c)
        params = train.init(jax.random.key(0)).params["params"]
        np.testing.assert_array_equal(params["log_std"], [log_std])
        entropy = jax.jit(train)(jax.random.key(0)).metrics["entropy"]
        np.testing.assert_allclose(entropy, [log_std + gaussian_entropy_at_zero], atol=2e-3)


def test_rollout_stores_the_log_prob_and_value_of_the_sampled_action():
    # The ratio's denominator is log pi_old of the action the policy *sampled*: with a wide initial
    # std most Pendulum actions fall outside [-2, 2], which only the env sees clipped (ClipAction).
    # The reference update (tests/test_update_reference.py) takes the rollout as given, so this
    # pins what the rollout stores: log N(a; mean, std) of the unclipped action and V(obs), both of
    # the observation acted on (normalised, as the network saw it), written out here by hand.
    config = PPOConfig(env_id="Pendulum-v1", num_envs=4, num_steps=16, total_timesteps=64,
                       num_minibatches=2, update_epochs=1, hidden_sizes=(8,), log_std_init=1.0,
                       normalize_obs=True)
    train = make_train(config)
    hp = train.default_hparams()

    @jax.jit
    def roll(key):
        state = train.init(key, hp)
        _, traj = train.rollout(state, hp, train.make_env(hp), key)
        pi, value = train.network.apply(state.params, traj.obs)
        return traj, pi.mean, pi.log_std, value

    traj, mean, log_std, value = (jax.tree.map(lambda x: np.asarray(x, np.float64), x)
                                  for x in roll(jax.random.key(0)))
    action = traj.action
    assert (np.abs(action) > 2).any() and (np.abs(action) < 2).any()
    z = (action - mean) / np.exp(log_std)
    want = np.sum(-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi), axis=-1)
    np.testing.assert_allclose(traj.log_prob, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(traj.value, value, rtol=1e-5, atol=1e-6)


def test_the_rollout_stores_the_value_of_the_observation_acted_on(net_module):
    # V of the observation the action was chosen on, not of the one after it, for the built-in
    # network and for a user's network whose actor and critic share a torso.
    net_module("loop_value_nets")
    for network in (None, "loop_value_nets:net"):
        config = PPOConfig(**{**SMALL, "num_envs": 4, "num_steps": 8, "total_timesteps": 4 * 8,
                              "num_minibatches": 1, "network": network})
        train = make_train(config)
        hp = train.default_hparams()

        @jax.jit
        def roll(key, train=train, hp=hp):
            state = train.init(key, hp)
            _, traj = train.rollout(state, hp, train.make_env(hp), key)
            flat = traj.obs.reshape(-1, traj.obs.shape[-1])
            return traj, train.network.apply(state.params, flat)[1].reshape(traj.value.shape)

        traj, value = roll(jax.random.key(0))
        assert traj.value.shape == (8, 4)
        np.testing.assert_allclose(traj.value, value, rtol=1e-5, atol=1e-6, err_msg=f"{network}")


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "gymnax:Breakout-MinAtar"])
@pytest.mark.slow
def test_other_action_and_observation_spaces_train(env_id):
    c, r = _tiny_run(env_id)
    for name, x in r.metrics.items():
        assert np.all(np.isfinite(np.asarray(x, np.float64))), name
    returns = fusedrl.evaluate(c, r, jax.random.key(1), num_episodes=2)
    assert returns.shape == (2,) and np.all(np.isfinite(returns))


# --------------------------------------------------------------------------------- evaluation
def test_evaluate_single_and_vmapped(small, seeds8):
    config, _, _, result = small
    ev = jax.jit(lambda r, k: fusedrl.evaluate(config, r, k, num_episodes=5))
    a = ev(result, jax.random.key(1))
    assert a.shape == (5,) and np.all(a >= 8) and np.all(a <= 500)
    np.testing.assert_array_equal(a, ev(result, jax.random.key(1)))
    b = fusedrl.evaluate(config, seeds8[1], jax.random.key(1), num_episodes=3)
    assert b.shape == (8, 3) and np.all(b >= 8)
    assert len({row.tobytes() for row in np.asarray(b)}) > 1  # each seed's own policy and key
    with pytest.raises(ValueError, match="num_episodes"):
        fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=0)


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(hidden_sizes=(32,)), ["parameter ['params']['actor_0']['bias'] has shape",
                                    "this config's network has (32,)", "hidden_sizes=(32,)"]),
        (dict(hidden_sizes=(16, 16)), ["another network's", "(layers ['actor_0', 'actor_head',",
                                       "this config's ['actor_0', 'actor_1',", "hidden_sizes=(16, 16)"]),
        (dict(env_id="Acrobot-v1"), ["'Acrobot-v1'", "['actor_0']['kernel'] has shape",
                                     "this config's network has (6, 16)"]),
        (dict(normalize_obs=True), ["another wrapper stack", "normalize_obs=True"]),
        (dict(normalize_reward=True), ["another wrapper stack", "normalize_reward=True"]),
    ],
)
def test_evaluate_names_what_differs_from_the_training_config(small, seeds8, change, words):
    config, _, _, result = small
    for trained in (result, seeds8[1]):  # one agent, and a vmapped result (a seed axis)
        with pytest.raises(ValueError) as info:
            fusedrl.evaluate(config.replace(**change), trained, jax.random.key(1), num_episodes=2)
        for w in [*words, "result does not fit config", "the PPOConfig the result was trained with"]:
            assert w in str(info.value), (w, str(info.value))
    # Two leading axes (a sweep's [seed, *axes]): the runs flattened, as one seed axis.
    stacked = jax.tree.map(lambda x: x[None], seeds8[1])
    returns = fusedrl.evaluate(config, stacked, jax.random.key(1), num_episodes=2)
    flat = fusedrl.evaluate(config, seeds8[1], jax.random.key(1), num_episodes=2)
    assert returns.shape == (1, 8, 2) and np.array_equal(returns[0], flat)
    # A seed axis on some parameters only.
    params = result.params["params"]
    mixed = {"params": {**params, "actor_0": {**params["actor_0"], "bias": params["actor_0"]["bias"][None]}}}
    with pytest.raises(ValueError, match="mix leaves with different numbers of leading seed/run axes"):
        fusedrl.evaluate(config, result.replace(state=result.state.replace(params=mixed)), jax.random.key(1),
                         num_episodes=2)


def test_evaluate_refuses_env_params_the_result_was_not_trained_with(small, seeds8):
    # The envs step with the result's own env params: a config's other value was silently ignored.
    config, _, _, result = small
    other = config.replace(env_params={"max_steps_in_episode": 3})
    for trained in (result, seeds8[1]):
        with pytest.raises(ValueError) as info:
            fusedrl.evaluate(other, trained, jax.random.key(1), num_episodes=2)
        for w in ["config.env_params['max_steps_in_episode'] is 3", "trained with max_steps_in_episode=500",
                  "result.hparams.env_params.replace(max_steps_in_episode=...)"]:
            assert w in str(info.value), (w, str(info.value))
    # The way the message gives: the result's params replaced, with the training config.
    env_params = result.hparams.env_params.replace(max_steps_in_episode=3)
    short = result.replace(hparams=result.hparams.replace(env_params=env_params))
    assert np.asarray(fusedrl.evaluate(config, short, jax.random.key(1), num_episodes=4)).max() <= 3
    # The value the result was trained with, given explicitly, is no mismatch.
    same = config.replace(env_params={"max_steps_in_episode": 500})
    assert fusedrl.evaluate(same, result, jax.random.key(1), num_episodes=2).shape == (2,)


def test_run_and_evaluate_refuse_arguments_of_the_wrong_kind(small):
    config, train, _, result = small
    for bad in (2.7, -1, True):  # 2.7 ran 2 updates, -1 none
        with pytest.raises(ValueError, match=re.escape(f"num_updates must be an int >= 0 (or None: the "
                                                       f"config's {config.num_updates}), got {bad!r}")):
            train.run(result.state, None, bad)
    for bad in (None, result.params, result.state):  # were AttributeErrors from deep inside
        with pytest.raises(TypeError, match="result must be the TrainResult that training returned"):
            fusedrl.evaluate(config, bad, jax.random.key(1), num_episodes=2)


@pytest.mark.parametrize("bad", [0, 2.5, True])
def test_data_parallel_train_refuses_a_num_shards_of_the_wrong_kind(bad):
    words = f"num_shards must be an int >= 1 (or None: one per device), got {bad!r}"
    with pytest.raises(ValueError, match=re.escape(words)):
        fusedrl.data_parallel_train(PPOConfig(**SMALL), num_shards=bad)


def _episode_lengths_env():
    """A CartPole-shaped env (obs float32 [4] zeros, Discrete(2)) whose episodes last k = 2 or 12
    steps, k drawn at reset, with reward r ~ U(0, 1) (drawn at reset) every step: return k * r."""
    from flax import struct

    from fusedrl.envs import Discrete, Environment, EnvParams, EnvState

    @struct.dataclass
    class State(EnvState):
        k: jax.Array
        r: jax.Array
        time: jax.Array

    @struct.dataclass
    class Params(EnvParams):
        max_steps_in_episode: int = 100

    class Lengths(Environment):
        deterministic_step = True

        @property
        def default_params(self):
            return Params()

        def reset_env(self, key, params):
            k1, k2 = jax.random.split(key)
            state = State(k=jnp.where(jax.random.bernoulli(k1), 2, 12), r=jax.random.uniform(k2),
                          time=jnp.int32(0))
            return self.get_obs(state), state

        def step_env(self, key, state, action, params):
            state = state.replace(time=state.time + 1)
            return self.get_obs(state), state, state.r, self.is_terminated(state, params), {}

        def get_obs(self, state, params=None, key=None):
            return jnp.zeros(4, jnp.float32)

        def is_terminated(self, state, params):
            return state.time >= state.k

        def action_space(self, params=None):
            return Discrete(2)

    return Lengths()


def _first_episode_returns(train, result, max_steps=None):
    """`episode_returns` (with `max_steps`) of 32 envs of `_episode_lengths_env` from key 1's reset:
    (the returns, each env's episode length k (2 or 12), the return k * r each first episode has)."""
    from fusedrl.envs import VecEnv
    from fusedrl.envs.wrappers import EpisodeStatistics
    from fusedrl.evaluation import episode_returns

    env = _episode_lengths_env()
    venv = EpisodeStatistics(VecEnv(env, 32))
    obs, state = venv.reset(jax.random.key(1), env.default_params)
    first = state.inner.env_state
    hparams = result.hparams.replace(env_params=env.default_params)
    run = jax.jit(lambda o, s: episode_returns(train, result.replace(hparams=hparams), venv, o, s,
                                               jax.random.key(2), True, max_steps))
    return np.asarray(run(obs, state)), np.asarray(first.k), np.asarray(first.k * first.r)


def test_evaluate_reports_each_envs_first_episode(small):
    """Short episodes finish again (and again) while long ones run: each env's return is still
    that of its first episode, not its latest."""
    _, train, _, result = small
    got, k, want = _first_episode_returns(train, result)
    assert (k == 2).any() and (k == 12).any()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_evaluate_max_steps_bounds_the_loop_and_reports_unfinished_episodes_as_nan(small):
    # Without a bound, an episode that never ends (an env whose time limit does not work) kept
    # evaluate running forever. With max_steps, episodes unfinished by then report NaN.
    config, train, _, result = small
    for max_steps in [2, 11, 12, None]:  # episodes of 2 or 12 steps
        got, k, want = _first_episode_returns(train, result, max_steps)
        done = (k == 2) | (max_steps is None or max_steps >= 12)
        np.testing.assert_allclose(got[done], want[done], rtol=1e-6, err_msg=str(max_steps))
        assert np.isnan(got[~done]).all() and (~done).any() == (max_steps in (2, 11)), max_steps
    key = jax.random.key(1)
    full = np.asarray(fusedrl.evaluate(config, result, key, num_episodes=4))
    np.testing.assert_array_equal(fusedrl.evaluate(config, result, key, 4, max_steps=500), full)
    cut = np.asarray(fusedrl.evaluate(config, result, key, 4, max_steps=int(full.min()) - 1))  # CartPole:
    assert np.isnan(cut[full == full.min()]).all()  # an episode's return is its length
    for bad in [0, 2.5, True]:
        with pytest.raises(ValueError, match=rf"max_steps must be an int >= 1 .*, got {bad!r}"):
            fusedrl.evaluate(config, result, jax.random.key(1), 4, max_steps=bad)


def _greedy_returns_by_hand(train, result, key, n, observe=lambda obs: obs):
    """What the policy's mode earns from each of the n start states `evaluate` draws with `key`,
    stepping the raw env one episode at a time; `observe` maps the env's observation [1, ...] to
    the network's input."""
    from fusedrl.envs import VecEnv
    from fusedrl.envs.wrappers import find_wrapper_state
    from fusedrl.evaluation import eval_reset

    venv, _, state, _ = eval_reset(train, result, key, n)
    starts = find_wrapper_state(venv, state, VecEnv).env_state
    env, params = train.env, result.hparams.env_params
    space = env.action_space(params)

    def greedy_return(s):
        def body(carry):
            s, ret, _ = carry
            action = train.network.apply(result.params, observe(env.get_obs(s)[None]))[0].mode()[0]
            if not train.discrete:
                action = jnp.clip(action, space.low, space.high)
            _, s, reward, terminated, _ = env.step_env(None, s, action, params)
            return s, ret + reward, terminated | env.is_truncated(s, params)

        return jax.lax.while_loop(lambda c: ~c[2], body, (s, jnp.float32(0.0), jnp.bool_(False)))[1]

    return np.asarray(jax.jit(jax.vmap(greedy_return))(starts))


def test_evaluate_does_not_run_a_diverged_policy(small):
    # NaN parameters: argmax of NaN logits is action 0, which scored plausible CartPole returns.
    config, _, _, result = small
    leaves, tree = jax.tree.flatten(result.params)
    broken = jax.tree.unflatten(tree, [leaves[0].at[0].set(jnp.nan), *leaves[1:]])
    diverged = result.replace(state=result.state.replace(params=broken))
    assert np.isnan(np.asarray(fusedrl.evaluate(config, diverged, jax.random.key(1), 4))).all()
    assert np.isfinite(np.asarray(fusedrl.evaluate(config, result, jax.random.key(1), 4))).all()
    inf = jax.tree.unflatten(tree, [leaves[0].at[0].set(jnp.inf), *leaves[1:]])
    returns = fusedrl.evaluate(config, result.replace(state=result.state.replace(params=inf)),
                               jax.random.key(1), 4, greedy=False, max_steps=10)
    assert np.isnan(np.asarray(returns)).all()


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(num_episodes=2.7), ValueError, "num_episodes must be an int >= 1, got 2.7"),  # gave 2
    (dict(num_episodes=True), ValueError, "num_episodes must be an int >= 1, got True"),
    (dict(num_episodes="3"), ValueError, "num_episodes must be an int >= 1, got '3'"),
    (dict(num_episodes=0), ValueError, "num_episodes must be an int >= 1, got 0"),
    (dict(greedy="no"), TypeError, "greedy must be True (the policy's mode) or False"),  # was greedy
])
def test_evaluate_arguments_of_the_wrong_kind_are_refused(small, kwargs, exc, words):
    config, _, _, result = small
    with pytest.raises(exc, match=re.escape(words)):
        fusedrl.evaluate(config, result, jax.random.key(1), **{"num_episodes": 4, **kwargs})
    assert fusedrl.evaluate(config, result, jax.random.key(1), np.int64(2)).shape == (2,)


@pytest.mark.slow
def test_evaluate_is_greedy_and_each_seed_gets_its_own_key(small):
    """`evaluate` (greedy) returns what the policy's mode earns, stepped alone from the start states
    `evaluate` draws; a vmapped result evaluates every seed with its own key (8 copies of one agent
    give 8 different rows)."""
    config, train, _, result = small
    key, n = jax.random.key(3), 16
    got = np.asarray(fusedrl.evaluate(config, result, key, num_episodes=n))
    want = _greedy_returns_by_hand(train, result, key, n)
    assert len(set(want.tolist())) > 1  # episode lengths differ: a real check
    np.testing.assert_array_equal(got, want)
    # Sampling is another policy: its returns are not the greedy ones.
    sampled = np.asarray(fusedrl.evaluate(config, result, key, num_episodes=n, greedy=False))
    assert not np.array_equal(sampled, want)

    stacked = jax.tree.map(lambda x: jnp.stack([x] * 8), result)
    rows = np.asarray(fusedrl.evaluate(config, stacked, key, num_episodes=n))
    assert rows.shape == (8, n) and len({row.tobytes() for row in rows}) == 8


def test_evaluate_normalises_observations_with_the_runs_frozen_statistics():
    """With normalize_obs, `evaluate` feeds the policy observations normalised with the run's final
    statistics, frozen (not statistics of its own episodes): its returns are those of stepping the
    raw env from the same starts with the observations normalised by hand."""
    from fusedrl.envs.wrappers import NormalizeObservation, find_wrapper

    config, result = _tiny_run("Pendulum-v1")
    train = make_train(config)
    # A greedy torque that follows the observation closely, so how it is scaled shows in the return.
    head = result.params["params"]["actor_head"]
    params = {"params": {**result.params["params"], "actor_head": {**head, "kernel": head["kernel"] * 300.0}}}
    result = result.replace(state=result.state.replace(params=params))
    key, n = jax.random.key(3), 4
    got = np.asarray(fusedrl.evaluate(config, result, key, num_episodes=n))
    stats = train.obs_stats(result.state, result.hparams)
    wrapper = find_wrapper(train.make_env(result.hparams, num_envs=1), NormalizeObservation)
    want = _greedy_returns_by_hand(
        train, result, key, n, lambda obs: stats.normalize(obs, epsilon=wrapper.epsilon, clip=wrapper.clip))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.slow
def test_evaluation_stack_never_normalises_rewards():
    # `evaluate`, `eval_reset` and saved policies build the evaluation stack: frozen observation
    # statistics and no reward normaliser. Without normalize_obs (no statistics to pass) it was the
    # training stack, a NormalizeReward with fresh statistics included (harmless for the raw
    # returns EpisodeStatistics reports below it, but not the stack the docstring describes).
    from fusedrl.envs.wrappers import NormalizeObservation, NormalizeReward, find_wrapper
    from fusedrl.evaluation import eval_reset

    for normalize_obs in (False, True):
        config = PPOConfig(**{**SMALL, "total_timesteps": 64, "normalize_reward": True,
                              "normalize_obs": normalize_obs})
        train = make_train(config)
        result = jax.jit(train)(jax.random.key(0))
        venv = eval_reset(train, result, jax.random.key(1), 2)[0]
        assert find_wrapper(venv, NormalizeReward) is None, normalize_obs
        norm = find_wrapper(venv, NormalizeObservation)
        assert (norm is not None and not norm.update) if normalize_obs else norm is None
        returns = fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=2)
        assert np.all(np.isfinite(returns))


@pytest.mark.subprocess
@pytest.mark.slow
def test_trains_in_float32_with_jax_enable_x64():
    # Under jax_enable_x64 (a process-wide flag, hence a subprocess) Python-float hyperparameters
    # and JAX's default dtypes become float64; training stays float32 and runs (GAE's scan failed
    # on a float64 carry, and biases and Gaussian actions were float64).
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import jax, fusedrl
        for env in ["CartPole-v1", "Pendulum-v1"]:
            c = fusedrl.PPOConfig(env_id=env, num_envs=2, num_steps=8, total_timesteps=48,
                                  num_minibatches=2, update_epochs=1, hidden_sizes=(8,),
                                  normalize_obs=True, normalize_reward=True)
            r = jax.jit(fusedrl.make_train(c))(jax.random.key(0))
            leaves = [*jax.tree.leaves(r.params), *r.metrics.values(), *jax.tree.leaves(r.state.env_state)]
            wide = [str(x.dtype) for x in leaves if str(x.dtype) in ("float64", "int64")]
            assert not wide, (env, wide)
            assert fusedrl.evaluate(c, r, jax.random.key(1), num_episodes=2).dtype == "float32"
        print("ok", jax.config.jax_enable_x64)
        """
    )
    env = {**os.environ, "JAX_ENABLE_X64": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["ok", "True"], out.stderr[-3000:]


@pytest.mark.parametrize("num_envs", [4, 512])
@pytest.mark.slow
def test_no_prng_key_is_used_twice_across_updates(monkeypatch, num_envs):
    """The keys of every update's rollout and of every epoch's shuffle are all different: a key
    carried to the next update that had already drawn a permutation would correlate the next
    rollout's actions and resets with the last update's minibatches."""
    from fusedrl.train import update

    used = []

    def record(kind, key):
        data = jax.random.key_data(key)
        jax.debug.callback(lambda d: used.append((kind, tuple(np.asarray(d).ravel().tolist()))), data)

    original = update.permutations

    def recorded_permutations(key, *args):
        record("shuffle", key)
        return original(key, *args)

    class Recorded(Trainer):
        def rollout(self, state, hparams, venv, key):
            record("rollout", key)
            return super().rollout(state, hparams, venv, key)

    monkeypatch.setattr(update, "permutations", recorded_permutations)
    config = PPOConfig(**{**SMALL, "update_epochs": 3, "num_envs": num_envs,
                          "total_timesteps": num_envs * SMALL["num_steps"] * 3})
    train = Recorded(config, PPO_ALGORITHM)
    jax.block_until_ready(jax.jit(train)(jax.random.key(0)))
    kinds = [kind for kind, _ in used]
    assert kinds.count("rollout") == config.num_updates
    assert kinds.count("shuffle") == config.num_updates * config.update_epochs
    assert len({key for _, key in used}) == len(used), used


def test_accelerator_choices_can_be_forced_on_cpu(monkeypatch):
    # The platform the choices are made for: forced by choices_for or $FUSEDRL_PLATFORM.
    from fusedrl.platform import ENV_VAR, choices_for, choices_platform

    monkeypatch.delenv(ENV_VAR, raising=False)
    assert choices_platform() == jax.default_backend()
    with choices_for("gpu"):
        assert choices_platform("cpu") == "gpu"
    assert choices_platform("cpu") == "cpu"
    monkeypatch.setenv(ENV_VAR, "GPU")
    assert choices_platform("cpu") == "gpu"
