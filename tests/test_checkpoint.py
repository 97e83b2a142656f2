"""Checkpoints: exact resume in a new process, and clear errors for mismatched or corrupt ones."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from fusedrl import checkpoint as ckpt
from fusedrl.train import A2CConfig, PPOConfig, ReinforceConfig, make_train

# Both normalisers on, so their statistics are part of what must survive the round trip.
SMALL = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6,
             update_epochs=2, num_minibatches=2, hidden_sizes=(16,), normalize_obs=True,
             normalize_reward=True)
HALF = 3


def _leaves(tree):
    """Leaves as NumPy arrays, PRNG keys as their key data, with their paths."""
    arrays, _, _ = ckpt._flatten(tree)
    return arrays


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    config = PPOConfig(**SMALL)
    train = make_train(config)
    hp = train.default_hparams()
    key = jax.random.key(7)
    full = jax.jit(train)(key, hp)  # 2 * HALF updates in one program
    run_half = jax.jit(train.run, static_argnums=2)
    half = run_half(jax.jit(train.init)(key, hp), hp, HALF)
    path = ckpt.save(tmp_path_factory.mktemp("ckpt") / "checkpoint", config, half.state, half.hparams,
                     extra={"note": "half"})
    return config, full, half, path


@pytest.mark.subprocess
@pytest.mark.slow
def test_resume_in_a_new_process_is_bit_identical(runs, tmp_path):
    config, full, half, path = runs
    out = tmp_path / "resumed.npz"
    script = textwrap.dedent(
        f"""
        import jax, numpy as np
        from fusedrl import checkpoint as ckpt
        from fusedrl.train import make_train
        config, state, hparams, meta = ckpt.restore({str(path)!r})
        assert meta["extra"] == {{"note": "half"}}
        train = make_train(config)
        rest = jax.jit(train.run, static_argnums=2)(state, hparams, {HALF})
        arrays = ckpt._flatten(rest.state)[0]
        arrays.update({{"metric." + k: np.asarray(v) for k, v in rest.metrics.items()}})
        np.savez({str(out)!r}, **arrays)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=500)
    resumed = dict(np.load(out))
    expected = _leaves(full.state)
    assert set(expected) == {k for k in resumed if not k.startswith("metric.")}
    for name, value in expected.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    for name, value in full.metrics.items():
        np.testing.assert_array_equal(resumed["metric." + name], np.asarray(value)[HALF:], err_msg=name)
    # The first half matches too: the checkpoint is the state after HALF updates of the same run.
    np.testing.assert_array_equal(half.metrics["policy_loss"], np.asarray(full.metrics["policy_loss"])[:HALF])


def test_restore_round_trip_in_process(runs):
    config, _, half, path = runs
    restored_config, state, hparams, _ = ckpt.restore(path, config)
    assert restored_config == config
    a, b = _leaves(half.state), _leaves(state)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert jax.dtypes.issubdtype(state.key.dtype, jax.dtypes.prng_key)
    assert isinstance(hparams.env_params.gravity, float)  # Python numbers stay Python numbers
    _, template = ckpt.templates(config, None)
    for want, got in zip(jax.tree.leaves(template), jax.tree.leaves(hparams), strict=True):
        if isinstance(want, bool | int | float):  # ints too (max_steps_in_episode)
            assert type(got) is type(want), (want, got)


def test_env_params_with_a_seed_axis_restore_with_the_dtypes_they_trained_with(x64, tmp_path):
    # Env params default to Python numbers, weakly typed in the trainer (float32 and int32 against
    # the env state). Under x64 they come out of `jax.vmap(train)` as float64 and int64 arrays (and
    # came out of train_run so, before its programs converted them), and are saved so; restored
    # so, they made the env state float64, and evaluating the saved run failed
    # ("CartPole.step_env returned state.x ... float64 ..., but reset_env ... float32").
    import fusedrl
    from fusedrl.train import TrainResult

    config = PPOConfig(**{**SMALL, "normalize_obs": False, "normalize_reward": False})
    train = make_train(config)
    hp = train.default_hparams()
    state = jax.jit(jax.vmap(train.init, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 2), hp)
    seeded = jax.tree.map(lambda x: jax.numpy.broadcast_to(x, (2,)), hp)
    assert seeded.env_params.gravity.dtype == np.float64  # as a vmapped result holds them under x64
    path = ckpt.save(tmp_path / "checkpoint", config, state, seeded, num_seeds=2)
    _, state, hparams, _ = ckpt.restore(path, config)
    dtypes = {name: str(x.dtype) for name, x in _leaves(hparams).items()}
    assert dtypes["env_params.gravity"] == "float32" and dtypes["env_params.max_steps_in_episode"] == "int32"
    assert not {d for d in dtypes.values() if d in ("float64", "int64")}, dtypes
    returns = fusedrl.evaluate(config, TrainResult(state, {}, hparams), jax.random.key(1), num_episodes=2)
    assert returns.shape == (2, 2) and returns.dtype == np.float32


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(hidden_sizes=(32,)), ["hidden_sizes", "[16]", "[32]"]),
        (dict(env_id="Acrobot-v1"), ["env_id", "CartPole-v1", "Acrobot-v1"]),
    ],
)
def test_mismatched_checkpoint_names_the_field(runs, change, words):
    config, _, _, path = runs
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.restore(path, config.replace(**change))
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def _copy_with_meta(path, dest, edit):
    """A copy of the checkpoint at `path` in `dest`, its meta.json changed in place by `edit`."""
    shutil.copytree(path, dest)
    meta = json.loads((dest / "meta.json").read_text())
    edit(meta)
    (dest / "meta.json").write_text(json.dumps(meta))
    ckpt.write_checksums(dest)  # changed on purpose: checked for what it says, not refused as damaged
    return dest


def test_corrupt_checkpoints_fail_clearly(runs, tmp_path):
    _, _, _, path = runs
    # Arrays that do not fit the stored config (as if meta.json and arrays came from different runs).
    bad = _copy_with_meta(path, tmp_path / "shapes", lambda m: m["config"].update(hidden_sizes=[32]))
    shapes = r"field state\.params\.\S+ has shape \(16,\).*expected \(32,\)"
    with pytest.raises(ckpt.CheckpointError, match=shapes):
        ckpt.restore(bad)
    # An array of the right shape but another dtype (half-precision parameters from other code).
    import orbax.checkpoint as ocp

    half = tmp_path / "dtype"
    shutil.copytree(path, half)
    checkpointer = ocp.StandardCheckpointer()
    arrays = {k: np.asarray(v) for k, v in checkpointer.restore(half / "arrays").items()}
    name = next(k for k in sorted(arrays) if k.startswith("state.params") and arrays[k].dtype == np.float32)
    arrays[name] = arrays[name].astype(np.float16)
    shutil.rmtree(half / "arrays")
    checkpointer.save(half / "arrays", arrays)
    checkpointer.wait_until_finished()
    checkpointer.close()
    ckpt.write_checksums(half)
    with pytest.raises(ckpt.CheckpointError, match=rf"field {re.escape(name)} has shape .* dtype float16, "
                                                   rf"expected .* float32"):
        ckpt.restore(half)
    # Damaged array files.
    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    shutil.rmtree(broken / "arrays")
    (broken / "arrays").mkdir()
    with pytest.raises(ckpt.CheckpointDamaged, match=r"arrays/\S+ is missing, but checksums\.json lists it"):
        ckpt.restore(broken)
    (broken / "checksums.json").unlink()
    with pytest.raises(ckpt.CheckpointDamaged, match=r"checksums\.json is missing, but meta\.json says"):
        ckpt.restore(broken)
    _copy_with_meta(broken, tmp_path / "before", lambda m: m.pop("checksums"))  # as written before checksums
    (tmp_path / "before" / "checksums.json").unlink()
    with pytest.raises(ckpt.CheckpointError, match="cannot read the checkpoint arrays"), \
            pytest.warns(ckpt.UnverifiedCheckpointWarning, match="has no checksums.json"):
        ckpt.restore(tmp_path / "before")  # orbax finds the damage out
    # Not a checkpoint / garbage meta.json.
    with pytest.raises(ckpt.CheckpointError, match="meta.json is missing"):
        ckpt.restore(tmp_path)
    (broken / "meta.json").write_text("{not json")
    with pytest.raises(ckpt.CheckpointError, match="corrupt"):
        ckpt.restore(broken)
    ckpt.write_checksums(broken)
    (broken / "meta.json").write_text("{not json!")
    with pytest.raises(ckpt.CheckpointDamaged, match=r"meta\.json does not match its checksum"):
        ckpt.restore(broken)


def test_checkpoints_of_another_layout_or_format_fail_clearly(runs, tmp_path):
    _, _, _, path = runs
    leaf = sorted(json.loads((path / "meta.json").read_text())["leaves"])[0]

    def edited(name, edit):
        return _copy_with_meta(path, tmp_path / name, edit)

    # A field the code does not know, and one the checkpoint lacks: each named on its own side.
    bogus = {"state.bogus": {"shape": [], "dtype": "float32"}}
    unknown = edited("unknown", lambda m: m["leaves"].update(bogus))
    with pytest.raises(ckpt.CheckpointError, match=r"missing from the checkpoint \[\], fields the code "
                                                   r"does not know \['state\.bogus'\]"):
        ckpt.restore(unknown)
    missing = edited("missing", lambda m: m["leaves"].pop(leaf))
    with pytest.raises(ckpt.CheckpointError, match=rf"missing from the checkpoint \['{re.escape(leaf)}'\], "
                                                   r"fields the code does not know \[\]"):
        ckpt.restore(missing)
    # Another format, and a stored config that is no valid PPOConfig.
    other = edited("format", lambda m: m.update(format="other-1"))
    with pytest.raises(ckpt.CheckpointError, match=r"not a fusedrl-checkpoint-1 file \(format 'other-1'\)"):
        ckpt.restore(other)
    invalid = edited("config", lambda m: m["config"].update(num_envs="four"))
    with pytest.raises(ckpt.CheckpointError, match="the stored config is invalid: .*num_envs"):
        ckpt.restore(invalid)


def test_policy_of_a_single_run_checkpoint(runs):
    # A checkpoint saved without num_seeds holds one run: its policy is seed 0's, and no other seed.
    from fusedrl import policy

    _, _, half, path = runs
    with pytest.warns(RuntimeWarning, match="holds update 3 of 6"):  # saved halfway
        pi = policy.load(path, seed=0)
    for a, b in zip(jax.tree.leaves(pi.params), jax.tree.leaves(half.state.params), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(IndexError, match="holds a single run; seed=1 does not exist"):
        policy.load(path, seed=1)


def test_save_replaces_atomically(runs, tmp_path):
    config, _, half, _ = runs
    target = tmp_path / "checkpoint"
    umask = os.umask(0o022)
    try:
        ckpt.save(target, config, half.state, half.hparams)
        assert target.stat().st_mode & 0o777 == 0o755  # a normal directory's mode, not mkdtemp's 0o700
        ckpt.save(target, config, half.state, half.hparams)  # overwrite an existing checkpoint
    finally:
        os.umask(umask)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no temp or old copies left
    assert (target / "meta.json").is_file()


def test_ctrl_c_during_a_save_is_held_until_the_checkpoint_is_complete(runs, tmp_path, monkeypatch, capsys):
    # A Ctrl-C inside orbax's save could leave Python unable to exit (it waited on orbax's threads).
    # It now lands after the save: a whole checkpoint, then the interrupt.
    import signal

    config, _, half, _ = runs
    write, done = ckpt._write, []

    def ctrl_c_while_writing(*args):
        os.kill(os.getpid(), signal.SIGINT)  # its handler runs at once, here, if not held
        write(*args)
        done.append(True)

    monkeypatch.setattr(ckpt, "_write", ctrl_c_while_writing)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            ckpt.save(tmp_path / "checkpoint", config, half.state, half.hparams)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done == [True], "the Ctrl-C interrupted the save"
    assert "Ctrl-C: stopping once saving the checkpoint ends" in capsys.readouterr().err
    _, restored, _, _ = ckpt.restore(tmp_path / "checkpoint")
    for name, value in _leaves(half.state).items():
        np.testing.assert_array_equal(_leaves(restored)[name], value, err_msg=name)


@pytest.mark.parametrize("make_key", [lambda: jax.random.key(5, impl="rbg"), lambda: jax.random.PRNGKey(5)],
                         ids=["rbg", "legacy uint32"])
def test_other_key_kinds_save_and_restore(make_key, tmp_path):
    # A run started from an rbg key keeps rbg keys; one started from a legacy uint32 key gets typed
    # (threefry) keys with the same streams. Both checkpoints restore what was saved.
    config = PPOConfig(**{**SMALL, "total_timesteps": 4 * 16})
    train = make_train(config)
    state = jax.jit(train.init)(make_key())
    path = ckpt.save(tmp_path / "checkpoint", config, state, train.default_hparams())
    _, restored, _, _ = ckpt.restore(path)
    assert jax.random.key_impl(restored.key) == jax.random.key_impl(state.key)
    for name, value in _leaves(state).items():
        np.testing.assert_array_equal(_leaves(restored)[name], value, err_msg=name)
    if make_key().dtype == np.uint32:
        typed = jax.jit(train.init)(jax.random.key(5))
        for name, value in _leaves(typed).items():
            np.testing.assert_array_equal(_leaves(state)[name], value, err_msg=name)


def test_metrics_saved_with_a_checkpoint(runs, tmp_path):
    config, _, half, path = runs
    assert ckpt.restore_metrics(path) is None  # saved without metrics
    saved = ckpt.save(tmp_path / "with", config, half.state, half.hparams, metrics=half.metrics)
    metrics = ckpt.restore_metrics(saved)
    assert sorted(metrics) == sorted(half.metrics)
    for name, value in half.metrics.items():
        np.testing.assert_array_equal(metrics[name], value, err_msg=name)
    missing = tmp_path / "missing"
    shutil.copytree(saved, missing)
    (missing / "metrics.npz").unlink()
    with pytest.raises(ckpt.CheckpointDamaged, match=r"metrics\.npz is missing, but checksums\.json lists"):
        ckpt.restore_metrics(missing)
    (missing / "metrics.npz").write_bytes(b"PK\x03\x04 not a zip file")
    with pytest.raises(ckpt.CheckpointDamaged, match=r"metrics\.npz does not match its checksum"):
        ckpt.restore_metrics(missing)
    (missing / "checksums.json").unlink()
    with pytest.raises(ckpt.CheckpointDamaged, match=r"checksums\.json is missing, but meta\.json says"):
        ckpt.restore_metrics(missing)
    meta = json.loads((missing / "meta.json").read_text())
    del meta["checksums"]  # as written before checksums: the damage is still named
    (missing / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointDamaged, match=r"metrics\.npz cannot be read \(BadZipFile.*damaged"):
        ckpt.restore_metrics(missing)
    (missing / "metrics.npz").unlink()
    with pytest.raises(ckpt.CheckpointDamaged, match=r"metrics\.npz cannot be read \(FileNotFoundError"):
        ckpt.restore_metrics(missing)
    other = _copy_with_meta(saved, tmp_path / "other", lambda m: m.update(metrics=["entropy"]))
    lists = r"holds \[.*'approx_kl'.*\], but meta.json lists \['entropy'\]"
    with pytest.raises(ckpt.CheckpointError, match=lists):
        ckpt.restore_metrics(other)


# A2C and REINFORCE runs: their configs' own fields (optimizer, baseline, ...) and optimiser states
# survive the round trip. REINFORCE's rollouts must reach the time limit, so it is cut to num_steps.
OTHER_ALGOS = {
    "a2c": (A2CConfig, dict(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6,
                            hidden_sizes=(16,), normalize_obs=True, normalize_adv=True)),
    "reinforce": (ReinforceConfig, dict(env_id="CartPole-v1", num_envs=4, num_steps=16,
                                        total_timesteps=4 * 16 * 6, hidden_sizes=(16,), optimizer="rmsprop",
                                        env_params={"max_steps_in_episode": 16})),
}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", sorted(OTHER_ALGOS))
def test_other_algorithms_save_restore_resume_and_load(algo, tmp_path):
    from fusedrl import policy

    cls, fields = OTHER_ALGOS[algo]
    config = cls(**fields)
    train = make_train(config)
    hp = train.default_hparams()
    key = jax.random.key(3)
    full = jax.jit(train)(key, hp)
    run = jax.jit(train.run, static_argnums=2)
    half = run(jax.jit(train.init)(key, hp), hp, HALF)
    path = ckpt.save(tmp_path / "checkpoint", config, half.state, half.hparams)
    assert json.loads((path / "meta.json").read_text())["algo"] == algo
    restored_config, state, hparams, _ = ckpt.restore(path)
    assert type(restored_config) is cls and restored_config == config
    assert ckpt.restore(path, config)[0] == config
    rest = run(state, hparams, HALF)  # the same program continues the run exactly
    for name, value in _leaves(full.state).items():
        np.testing.assert_array_equal(_leaves(rest.state)[name], value, err_msg=name)
    # Expecting another algorithm's config names the algorithm first.
    with pytest.raises(ckpt.CheckpointError, match=rf"differing field\(s\):\n  algo: checkpoint has "
                                                   rf"'{algo}', expected 'ppo'"):
        ckpt.restore(path, PPOConfig(**SMALL))
    with pytest.warns(RuntimeWarning, match="holds update 3 of 6"):
        pi = policy.load(path)
    assert type(pi.config) is cls
    for a, b in zip(jax.tree.leaves(pi.params), jax.tree.leaves(half.state.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert pi.act(np.zeros(4, np.float32)).shape == ()


def test_a_checkpoint_without_its_algorithm_is_ppo_and_an_unknown_one_is_refused(runs, tmp_path):
    config, _, half, path = runs
    assert json.loads((path / "meta.json").read_text())["algo"] == "ppo"
    old = _copy_with_meta(path, tmp_path / "old", lambda m: m.pop("algo"))  # as written before "algo"
    restored_config, state, _, _ = ckpt.restore(old, config)
    assert type(restored_config) is PPOConfig and restored_config == config
    for name, value in _leaves(half.state).items():
        np.testing.assert_array_equal(_leaves(state)[name], value, err_msg=name)
    other = _copy_with_meta(path, tmp_path / "other", lambda m: m.update(algo="dqn"))
    unknown = r"of algorithm 'dqn', which this fusedrl .* does not know; it knows 'ppo', 'a2c', 'reinforce'"
    with pytest.raises(ckpt.CheckpointError, match=unknown):
        ckpt.restore(other)
