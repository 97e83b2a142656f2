"""The program an accelerator runs, built and run on this CPU: every platform-dependent choice
made for a GPU (`FUSEDRL_PLATFORM=gpu`, `fusedrl.platform`), across the user surface (train, vmap
over seeds, sweep, `fusedrl train --num-seeds`, evaluate, checkpoint and resume, data parallel).

The trainer's speed record (`fusedrl.train.tuning`) is resolved for the platform too, though today it
is the same on every one: the test below checks that the GPU's training program is the CPU's, so
a CPU-only choice added later shows here. The choice that differs is the host threads ("streams")
that split a sweep's or a multi-seed run's runs on a lone CPU device (none on an accelerator: one
vmapped program). Each test checks the GPU's choice was made and that the promises of the CPU path
hold for the GPU's program too.
"""

import json
import os
import subprocess
import sys
import threading

import chex
import jax
import numpy as np
import pytest

import fusedrl
from fusedrl import checkpoint as ckpt
from fusedrl import runs
from fusedrl.data_parallel import data_parallel_train
from fusedrl.platform import ENV_VAR, choices_for
from fusedrl.streams import resolve_streams, usable_cores
from fusedrl.train import PPOConfig, Tuning, make_train

pytestmark = [pytest.mark.slow]

# 4 updates of 4 envs x 8 steps, one 16-unit layer; the checkpoint test stops after HALF of them.
TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, update_epochs=1,
            num_minibatches=2, hidden_sizes=(16,))
HALF = 2


@pytest.fixture(scope="module", autouse=True)
def accelerator_choices():
    """Every test here, and every process it starts, makes the choices a GPU makes."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_VAR, "gpu")
        yield


def leaves(tree):
    """Leaves as NumPy arrays, PRNG keys as their key data."""
    def data(x):
        return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    return [np.asarray(data(x)) for x in jax.tree.leaves(tree)]


def assert_identical(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def small():
    """(config, trainer, its jitted train, default hparams, the run of key 0): the GPU's program."""
    config = PPOConfig(**TINY)
    train = make_train(config)
    jitted = jax.jit(train)
    hp = train.default_hparams()
    return config, train, jitted, hp, jitted(jax.random.key(0), hp)


# ------------------------------------------------------------------------------------- train
def test_train_builds_the_program_a_gpu_runs(small, monkeypatch):
    config, train, jitted, hp, _ = small
    assert train.tuning == Tuning()
    key = jax.random.key(0)
    gpu_program = jitted.lower(key, hp).as_text()
    monkeypatch.delenv(ENV_VAR)
    cpu = make_train(config)
    assert cpu.tuning == train.tuning and jax.jit(cpu).lower(key, hp).as_text() == gpu_program


def test_train_makes_no_host_transfer_and_repeats_bit_for_bit(small):
    _, _, jitted, hp, result = small
    key = jax.random.key(0)
    on_device = jax.device_put(hp)  # Python numbers in hparams would be implicit transfers
    with jax.transfer_guard("disallow"):
        again = jax.block_until_ready(jitted(key, on_device))
    assert "callback" not in jitted.lower(key, hp).as_text()  # no host callback inside the program
    assert_identical(again.metrics, result.metrics)
    assert_identical(again.state, result.state)
    assert int(result.metrics["episodes_completed"].sum()) > 0


def test_vmap_over_seeds_traces_once(small):
    config, train, jitted, hp, _ = small
    traced = chex.assert_max_traces(train.__call__, n=1)
    fn = jax.jit(jax.vmap(traced, in_axes=(0, None)))
    keys = jax.random.split(jax.random.key(0), 2)
    out = fn(keys, hp)
    out2 = fn(jax.random.split(jax.random.key(1), 2), hp)  # new keys: no retrace
    shape = (2, config.num_updates)
    assert out.metrics["episode_return"].shape == out2.metrics["episode_return"].shape == shape
    assert not np.array_equal(out.metrics["policy_loss"][0], out.metrics["policy_loss"][1])
    single = jitted(keys[1], hp)  # seed 1 of the vmap is the single run of its key
    np.testing.assert_allclose(out.metrics["episode_return"][1], single.metrics["episode_return"], rtol=1e-4)
    np.testing.assert_allclose(out.metrics["policy_loss"][1], single.metrics["policy_loss"], rtol=1e-4,
                               atol=1e-6)


# ------------------------------------------------------------------------------------- sweep
def test_sweep_runs_one_vmapped_program_without_streams(small):
    config, _, jitted, hp, _ = small
    devices = jax.devices()
    assert resolve_streams(None, devices, 4) == 1
    if len(devices) == 1 and usable_cores() > 1:  # what the check looks for: the CPU's threads
        with choices_for("cpu"):
            assert resolve_streams(None, devices, 4) == min(4, usable_cores())
    threads = set()

    def seen(metrics):  # called from inside the running program: which host threads exist then
        threads.update(t.name for t in threading.enumerate())

    out = fusedrl.sweep(config, num_seeds=2, lr=[config.lr, 1e-3], callback=seen,
                        callback_every=config.num_updates)
    assert threads and not any(name.startswith("fusedrl-sweep") for name in threads), threads
    assert out.metrics["episode_return"].shape == (2, 2, config.num_updates)
    # Each run is the run its seed and settings give alone (run [seed 1, config.lr] here).
    single = jitted(out.seed_keys[1], hp)
    np.testing.assert_allclose(out.metrics["episode_return"][1, 0], single.metrics["episode_return"],
                               rtol=1e-4)
    assert not np.array_equal(out.metrics["policy_loss"][1, 0], out.metrics["policy_loss"][1, 1])


# --------------------------------------------------------------------------------------- CLI
@pytest.mark.subprocess
def test_cli_trains_4_seeds_as_one_stream(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, ENV_VAR: "gpu", "FUSEDRL_COMPILE_CACHE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "fusedrl.cli", "train", "--env", "CartPole-v1", "--num-seeds", "4",
         "--total-timesteps", str(TINY["total_timesteps"]), "--set", "num_envs=4", "--set", "num_steps=8",
         "--set", "update_epochs=1", "--set", "num_minibatches=2", "--set", "hidden_sizes=16",
         "--eval-episodes", "2", "--no-progress", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / runs.SUMMARY_FILE).read_text())
    assert summary["status"] == "finished" and summary["num_seeds"] == 4
    assert summary["streams"] == 1  # one vmap of the 4 seeds (the CPU: one thread per core)
    assert len(summary["eval_return_per_seed"]) == 4


def test_programs_cached_for_one_platform_are_not_reused_for_another(small):
    """`fusedrl train`'s programs are cached by config: the platform the choices were made for is
    part of the key, so forcing another one builds its own program."""
    config = small[0]
    with choices_for("cpu"):
        cpu_train, _, _ = runs.compiled_run(config, 1, 0)
    train, _, seconds = runs.compiled_run(config, 1, 0)
    assert cpu_train is not train and train.tuning == Tuning() and seconds > 0


# --------------------------------------------------------------------------------- evaluate
def test_evaluate_makes_no_host_transfer_and_repeats(small):
    config, _, _, _, result = small
    key = jax.random.key(5)
    returns = fusedrl.evaluate(config, result, key, num_episodes=2)
    assert returns.shape == (2,) and np.all(np.isfinite(returns)) and np.all(returns >= 1)
    with jax.transfer_guard("disallow"):
        again = jax.block_until_ready(fusedrl.evaluate(config, result, key, num_episodes=2))
    np.testing.assert_array_equal(again, returns)


# ---------------------------------------------------------------------- checkpoint and resume
def test_checkpoint_and_resume_equal_the_uninterrupted_run(small, tmp_path):
    """Saved after HALF updates, restored, continued: the run of key 0 trained in one go, bit for bit."""
    config, train, _, hp, full = small
    run_half = jax.jit(train.run, static_argnums=2)
    half = run_half(jax.jit(train.init)(jax.random.key(0), hp), hp, HALF)
    path = ckpt.save(tmp_path / "checkpoint", config, half.state, half.hparams)
    restored_config, state, hparams, _ = ckpt.restore(path, config)
    assert restored_config == config
    assert make_train(restored_config).tuning == Tuning()  # the program it continues with: run_half's
    rest = run_half(state, hparams, config.num_updates - HALF)
    assert_identical(rest.state, full.state)
    for name, value in full.metrics.items():
        np.testing.assert_array_equal(rest.metrics[name], np.asarray(value)[HALF:], err_msg=name)
        np.testing.assert_array_equal(half.metrics[name], np.asarray(value)[:HALF], err_msg=name)


# ---------------------------------------------------------------------------- data parallel
def test_data_parallel_on_one_device(small):
    config = small[0]
    dp = data_parallel_train(config, jax.devices()[:1], num_shards=2)
    key = jax.random.key(0)
    agent = dp(key)
    assert agent.state.obs.shape[0] == 2  # [shards, envs per shard, obs]
    assert not np.array_equal(agent.state.obs[0], agent.state.obs[1])  # each shard its own envs
    steps = np.arange(1, config.num_updates + 1) * config.num_envs * config.num_steps  # all shards'
    np.testing.assert_array_equal(agent.metrics["env_steps"], steps)
    assert all(np.all(np.isfinite(x)) for x in leaves(agent.state.params))
    returns = fusedrl.evaluate(config, agent, jax.random.key(1), num_episodes=2)
    assert returns.shape == (2,) and np.all(np.isfinite(returns))
