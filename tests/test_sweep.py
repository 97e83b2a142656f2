"""fusedrl.sweep (the package fusedrl.sweeps), fusedrl.streams and fusedrl.data_parallel: one
compile per sweep, slices equal single runs, named axes, tables, errors, sharding over devices
and data parallelism (subprocess with 4 forced host devices)."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fusedrl import data_parallel, sweeps
from fusedrl import streams as stream_lib
from fusedrl.data_parallel import DATA_AXIS, data_parallel_train
from fusedrl.sweeps import SweepResult, sweep
from fusedrl.sweeps import program as sweep_program
from fusedrl.sweeps import space as sweep_space
from fusedrl.train import PPO, PPOConfig, make_train

SMALL = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3,
             update_epochs=2, num_minibatches=2, hidden_sizes=(16,))
LRS = [1e-4, 3e-4, 1e-3]
# A sweep slice is not bit-identical to the single run on XLA:CPU: the same per-run op compiled
# over a batched [runs, ...] array uses another reduction order / vectorisation (measured: the
# first differences are in minibatch means and the loss statistics, ~1e-7 after one update). Over
# these 3 updates the largest difference seen is 2e-6; the bound leaves room for other CPUs.
TOL = dict(rtol=1e-5, atol=1e-5)
EXACT = ("episodes_completed", "env_steps", "learning_rate")


def assert_runs_match(metrics, want_metrics, params, want_params):
    """Every metric of `want_metrics` in `metrics` (exact for the counts, else to TOL), and the
    parameter trees equal to TOL."""
    for name, value in want_metrics.items():
        if name in EXACT:
            np.testing.assert_array_equal(metrics[name], value, err_msg=name)
        else:
            np.testing.assert_allclose(metrics[name], value, err_msg=name, **TOL)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want_params), strict=True):
        np.testing.assert_allclose(a, b, **TOL)


@pytest.fixture(scope="module")
def swept():
    """3 lrs x 2 seeds, then a second sweep of the same shape (new values, other unswept gamma);
    the training loop (`PPO.run`, under the vmap and the streams alike) is traced once for both."""
    sweep_program._program.cache_clear()
    config = PPOConfig(**SMALL)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PPO, "run", chex.assert_max_traces(PPO.run, n=1))
        first = sweep(config, 2, lr=LRS, key=jax.random.key(7))
        second = sweep(config.replace(gamma=0.9), 2, lr=[2e-4, 5e-4, 2e-3], key=jax.random.key(7))
    return config, first, second


@pytest.mark.slow
def test_sweep_shapes_and_axes(swept):
    config, r, second = swept
    assert r.dims == ("seed", "lr") and r.shape == (2, 3) and r.num_runs == 6
    np.testing.assert_allclose(r.axes["lr"], LRS, rtol=1e-6)
    assert r.metrics["episode_return"].shape == (2, 3, config.num_updates)
    assert jax.tree.leaves(r.result.params)[0].shape[:2] == (2, 3)
    # Every run differs from the others (seeds and learning rates both matter).
    losses = r.metrics["policy_loss"].reshape(6, -1)
    assert len({row.tobytes() for row in losses}) == 6
    np.testing.assert_allclose(second.metrics["learning_rate"][0, :, 0], [2e-4, 5e-4, 2e-3], rtol=1e-6)
    np.testing.assert_allclose(second.result.hparams.gamma, 0.9, rtol=1e-6)


@pytest.mark.slow
def test_slices_equal_single_runs(swept):
    config, r, _ = swept
    train = jax.jit(make_train(config))
    for seed in range(2):
        for lr in LRS:
            single = train(r.seed_keys[seed], config.hparams().replace(lr=np.float32(lr)))
            part = r.sel(seed=seed, lr=lr)
            assert part.dims == () and part.metrics["policy_loss"].shape == (config.num_updates,)
            assert_runs_match(part.metrics, single.metrics, part.result.params, single.params)
    # The tolerance is tight enough to tell runs apart: another lr's parameters do not match.
    other = train(r.seed_keys[0], config.hparams().replace(lr=np.float32(LRS[2])))
    mine = r.sel(seed=0, lr=LRS[0]).result.params
    assert not all(np.allclose(a, b, **TOL) for a, b in zip(jax.tree.leaves(mine),
                                                            jax.tree.leaves(other.params), strict=True))


@pytest.mark.slow
def test_evaluate_takes_a_sweeps_result_with_all_its_axes(swept):
    # Before, a [seed, lr] result was refused with "Pass evaluate the PPOConfig the result was
    # trained with", although it was. Now run (s, j) is evaluated as run s * 3 + j of one seed axis
    # (with the key that run gets there).
    import fusedrl

    config, r, _ = swept
    key = jax.random.key(4)
    returns = np.asarray(fusedrl.evaluate(config, r.result, key, num_episodes=3))
    assert returns.shape == (2, 3, 3)
    # The same 6 runs given with one seed axis (a vmapped evaluation either way: a single run's
    # greedy episodes may differ from a vmapped run's by float rounding).
    flat = jax.tree.map(lambda x: x.reshape((6, *x.shape[2:])), r.result)
    by_run = np.asarray(fusedrl.evaluate(config, flat, key, num_episodes=3))
    np.testing.assert_array_equal(returns.reshape(6, 3), by_run)
    assert len({row.tobytes() for row in by_run}) > 1


def test_isel_sel_and_hparams(swept):
    _, r, _ = swept
    part = r.sel(lr=[3e-4, 1e-3])
    assert part.dims == ("seed", "lr") and part.shape == (2, 2)
    np.testing.assert_array_equal(part.metrics["policy_loss"], r.metrics["policy_loss"][:, 1:])
    one = r.isel(seed=1)
    assert one.dims == ("lr",) and one.seed_keys.shape == ()
    np.testing.assert_array_equal(one.metrics["value_loss"], r.metrics["value_loss"][1])
    np.testing.assert_allclose(r.hparams(lr=2).lr, 1e-3, rtol=1e-6)
    with pytest.raises(KeyError, match="lr values"):
        r.sel(lr=5e-4)
    with pytest.raises(KeyError, match="valid names"):
        r.sel(gamma=0.99)


@pytest.mark.slow
def test_selecting_several_seeds_keeps_the_axis_and_the_keys(swept):
    """Lists, slices and arrays of seeds select like any other dim, and the kept runs' metrics,
    parameters and seed keys are the originals' (JAX rejects a list as an index of the keys)."""
    _, r, _ = swept

    def key_data(keys):
        return np.asarray(jax.random.key_data(keys))

    for part, order in [
        (r.sel(seed=[1, 0]), [1, 0]),
        (r.isel(seed=slice(0, 2)), [0, 1]),
        (r.isel(seed=[1]), [1]),
        (r.isel(seed=np.array([1, 0])), [1, 0]),
        (r.sel(seed=[1], lr=[1e-3, 1e-4]).isel(lr=slice(None, None, -1)), [1]),
    ]:
        assert part.dims == ("seed", "lr") and part.shape[0] == len(order)
        np.testing.assert_array_equal(part.axes["seed"], order)
        np.testing.assert_array_equal(key_data(part.seed_keys), key_data(r.seed_keys)[order])
        lrs = [int(np.flatnonzero(r.axes["lr"] == v)[0]) for v in part.axes["lr"]]
        pick = np.ix_(order, lrs)
        np.testing.assert_array_equal(part.metrics["policy_loss"], r.metrics["policy_loss"][pick])
        for a, b in zip(jax.tree.leaves(part.result.params), jax.tree.leaves(r.result.params), strict=True):
            np.testing.assert_array_equal(a, np.asarray(b)[pick])
        # Each kept seed index i still names the run of seed_keys[i]: selecting it again agrees.
        for i, seed in enumerate(order):
            np.testing.assert_array_equal(key_data(part.isel(seed=i).seed_keys), key_data(r.seed_keys[seed]))
    assert r.isel(seed=np.int64(1)).dims == ("lr",) and r.isel(seed=np.array(1)).dims == ("lr",)
    with pytest.raises(TypeError):
        r.isel(seed=1.0)


@pytest.mark.slow
def test_an_env_param_given_as_int_then_float_compiles_for_each():
    # Equal configs (12 == 12.0), but int32 and float32 arrays: the cached executables must differ.
    base = PPOConfig(**SMALL)
    a = sweep(base.replace(env_params={"gravity": 12}), 2, lr=[1e-3, 2e-3], streams=2)
    b = sweep(base.replace(env_params={"gravity": 12.0}), 2, lr=[1e-3, 2e-3], streams=2)
    assert a.metrics["episode_return"].shape == b.metrics["episode_return"].shape == (2, 2, 3)


# ------------------------------------------------------------------------------ tidy tables
def _synthetic(mode="grid", curves=None, field="lr", coord=(1e-4, 3e-4)):
    """A SweepResult with known curves (no training): [seeds, 2 values of `field`, updates];
    by default 2 seeds x 2 lrs x 20 updates."""
    if curves is None:
        curves = np.arange(2 * 2 * 20, dtype=np.float32).reshape(2, 2, 20)
        curves[1, 0, 5] = 1000.0  # a peak: best != final
    seeds, num, updates = curves.shape
    steps = np.broadcast_to(np.arange(1, updates + 1) * 64, curves.shape)
    coord = np.asarray(coord, np.float32)
    if mode == "grid":
        dims, axes = ("seed", field), {"seed": np.arange(seeds), field: coord}
    else:
        dims, axes = ("seed", "trial"), {"seed": np.arange(seeds), "trial": np.arange(num)}
    return SweepResult(
        config=PPOConfig(**SMALL), mode=mode, dims=dims, axes=axes,
        values={field: np.broadcast_to(coord, (seeds, num))},
        metrics={"episode_return": curves, "env_steps": steps}, result=None,
        seed_keys=jax.random.split(jax.random.key(0), seeds),
    )


def test_to_table_last10_rounds_up_and_best_includes_the_first_update():
    # 15 updates: the last 10% is ceil(1.5) = 2 updates; the best return is at update 1.
    curve = np.array([100.0] + list(range(1, 15)), np.float32)
    row = _synthetic(curves=np.broadcast_to(curve, (1, 2, 15)).copy()).to_table()[0]
    assert row["final_return"] == 14.0
    assert row["last10_return"] == 13.5  # mean of updates 14 and 15 (13, 14)
    assert row["best_return"] == 100.0


def test_hparams_of_an_env_param_sweep_carry_the_runs_env_value():
    r = _synthetic(curves=np.zeros((1, 2, 3), np.float32), field="gravity", coord=(9.8, 12.0))
    np.testing.assert_allclose(r.hparams(gravity=1).env_params.gravity, 12.0, rtol=1e-6)
    np.testing.assert_allclose(r.hparams(gravity=0).env_params.gravity, 9.8, rtol=1e-6)


def test_sel_of_a_one_value_list_in_zip_mode_keeps_the_trial_dim():
    r = _synthetic(mode="zip")
    part = r.sel(lr=[3e-4])
    assert part.dims == ("seed", "trial") and part.shape == (2, 1)
    assert part.axes["trial"].tolist() == [1]
    assert r.sel(lr=3e-4).dims == ("seed",)  # a scalar drops it


def test_to_table_rows():
    rows = _synthetic().to_table()
    assert len(rows) == 4
    assert list(rows[0]) == ["seed", "lr", "final_return", "last10_return", "best_return"]
    assert [(r["seed"], r["lr"]) for r in rows] == [(0, 1e-4), (0, 3e-4), (1, 1e-4), (1, 3e-4)]
    r = rows[2]  # seed 1, lr 1e-4: curve 40..59 with a 1000 at update 5
    assert r["final_return"] == 59.0
    assert r["last10_return"] == 58.5  # mean of the last 2 of 20 updates
    assert r["best_return"] == 1000.0
    zipped = _synthetic("zip").to_table()
    assert list(zipped[0])[:3] == ["seed", "trial", "lr"] and zipped[3]["lr"] == 3e-4


def test_to_table_counts_episode_statistics_from_the_first_completed_episode():
    # Negative returns (Pendulum, MountainCar): before a run's first completed episode the trainer
    # reports 0.0 with episode_length 0; that placeholder must not become the best return.
    r = _synthetic()
    curves = -1.0 - np.asarray(r.metrics["episode_return"])
    lengths = np.full(curves.shape, 200)
    lengths[..., :3] = 0  # no episode ended in the first 3 updates
    lengths[1, 1, :] = 0  # nor ever, in one run
    curves[lengths == 0] = 0.0
    metrics = {"episode_return": curves, "episode_length": lengths, "env_steps": r.metrics["env_steps"]}
    rows = dataclasses.replace(r, metrics=metrics).to_table()
    assert rows[0]["best_return"] == -4.0 and rows[0]["final_return"] == -20.0  # curve -1..-20
    assert all(np.isnan(rows[3][k]) for k in ("final_return", "last10_return", "best_return"))
    length_rows = dataclasses.replace(r, metrics=metrics).to_table("episode_length")
    assert length_rows[0]["best_length"] == 200.0 and np.isnan(length_rows[3]["best_length"])
    dataclasses.replace(r, metrics=metrics).plot(by="lr")  # NaN-aware, and no warnings


def test_sweep_cli_summary_puts_combinations_without_episodes_last():
    from fusedrl.sweep_cli import format_summary, summary_rows

    r = _synthetic()
    curves = -1.0 - np.asarray(r.metrics["episode_return"])
    lengths = np.full(curves.shape, 200)
    lengths[1, 0, :] = 0  # seed 1 at lr 1e-4 never completed an episode
    curves[lengths == 0] = 0.0
    r = dataclasses.replace(r, metrics={**r.metrics, "episode_return": curves, "episode_length": lengths})
    rows = summary_rows(r)
    assert [row["lr"] for row in rows] == [3e-4, 1e-4]
    assert rows[0]["last10_return_mean"] == -59.5 and rows[0]["seeds"] == 2  # -39.5 and -79.5
    assert np.isnan(rows[1]["last10_return_mean"])  # not a return: seed 1 has none
    assert format_summary(r).splitlines()[1].startswith("0.0003")


def test_sweep_cli_summary_lists_the_best_combination_first():
    from fusedrl.sweep_cli import format_summary, summary_rows

    r = _synthetic(curves=np.arange(2 * 2 * 20, dtype=np.float32).reshape(2, 2, 20))
    rows = summary_rows(r)  # lr 3e-4 ends higher than lr 1e-4 for both seeds, and every run has episodes
    assert [row["lr"] for row in rows] == [3e-4, 1e-4]
    assert rows[0]["last10_return_mean"] == 58.5  # (38.5 + 78.5) / 2
    header, first = format_summary(r).splitlines()[:2]
    assert first.startswith("0.0003")
    # Each seed's best (39 and 79), averaged: the header says so, for no run's best return was 59.
    assert header.rstrip().endswith("best return (mean over seeds)") and first.rstrip().endswith("  59.0")


def test_summary_is_the_seed_averaged_table_the_cli_writes(tmp_path):
    from fusedrl.sweep_cli import summary_rows

    r = _synthetic()
    rows = r.summary()
    assert rows == summary_rows(r)
    assert [(row["lr"], row["seeds"]) for row in rows] == [(3e-4, 2), (1e-4, 2)]
    # lr 1e-4: seed 0 ends at 19, seed 1 at 59 (its best, 1000, at update 5)
    low = rows[1]
    assert low["final_return_mean"] == 39.0 and low["final_return_std"] == 20.0
    assert low["best_return_mean"] == (19.0 + 1000.0) / 2
    r.to_csv(tmp_path / "summary.csv", summary=True)
    lines = (tmp_path / "summary.csv").read_text().splitlines()
    assert lines[0].split(",")[:3] == ["lr", "seeds", "final_return_mean"] and len(lines) == 3
    zipped = _synthetic("zip").summary()
    assert [(row["trial"], row["lr"]) for row in zipped] == [(1, 3e-4), (0, 1e-4)]


def test_tables_carry_the_final_evaluation():
    r = _synthetic()
    returns = np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3)
    returns[0, 0, 1] = np.nan  # an episode cut at max_steps: left out of the mean
    r = dataclasses.replace(r, eval_returns=returns)
    rows = r.to_table()
    assert list(rows[0])[-1] == "eval_return"
    assert [row["eval_return"] for row in rows] == [1.0, 4.0, 7.0, 10.0]
    low = next(row for row in r.summary() if row["lr"] == 1e-4)
    assert low["eval_return_mean"] == 4.0 and low["eval_return_std"] == 3.0
    one = r.sel(seed=1, lr=3e-4)
    np.testing.assert_array_equal(one.eval_returns, returns[1, 1])


@pytest.mark.slow
def test_sweep_ends_with_a_greedy_evaluation_of_every_run():
    import fusedrl
    from fusedrl.evaluation import EVAL_MAX_STEPS

    config = PPOConfig(**SMALL)
    with pytest.raises(ValueError, match="eval_episodes must be an int >= 1"):
        sweeps.check_sweep(config, 2, lr=LRS[:2], eval_episodes=0)
    r = sweep(config, 2, lr=LRS[:2], eval_episodes=3, streams=1)
    assert r.eval_returns.shape == (2, 2, 3) and r.result is not None
    # CartPole's return is the episode's length: a whole number of at least 1.
    assert np.all(r.eval_returns >= 1) and np.all(r.eval_returns == np.round(r.eval_returns))
    eval_key = jax.random.fold_in(jax.random.key(0), sweep_program._EVAL_SALT)
    want = fusedrl.evaluate(config, r.result, eval_key, 3, max_steps=EVAL_MAX_STEPS)
    np.testing.assert_array_equal(r.eval_returns, want)
    assert [row["eval_return"] for row in r.to_table()] == pytest.approx(want.mean(-1).reshape(-1))
    light = sweep(config, 2, lr=LRS[:2], eval_episodes=3, streams=1, keep_state=False)
    assert light.result is None
    np.testing.assert_array_equal(light.eval_returns, r.eval_returns)


def test_sweep_cli_eval_episodes_adds_the_evaluation_to_both_tables(tmp_path, capsys):
    import csv

    from fusedrl import sweep_cli

    tiny = ["--env", "CartPole-v1", "--set", "num_envs=2", "--set", "num_steps=8", "--total-timesteps",
            "32", "--set", "num_minibatches=1", "--set", "update_epochs=1", "--set", "hidden_sizes=8",
            "--progress-every", "0", "--no-plots", "--grid", "gamma=0.9,0.99"]
    assert sweep_cli.main([*tiny, "--eval-episodes", "0", "--out", str(tmp_path / "bad")]) == 2
    assert "--eval-episodes must be >= 1, got 0" in capsys.readouterr().err
    out = tmp_path / "s"
    assert sweep_cli.main([*tiny, "--eval-episodes", "2", "--num-seeds", "2", "--out", str(out)]) == 0
    with open(tmp_path / "s" / "table.csv") as f:
        table = list(csv.DictReader(f))
    with open(tmp_path / "s" / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert len(table) == 4 and all(float(row["eval_return"]) >= 1 for row in table)
    assert len(summary) == 2 and all(float(row["eval_return_mean"]) >= 1 for row in summary)


def test_sweep_and_run_modules_form_no_import_cycle_and_share_no_private_names():
    """The modules of sweeps, runs and their orchestration, read as source: no import (at module
    level or inside a function) forms a cycle among them, and none imports another's private
    (underscore) names."""
    import ast
    import pathlib

    import fusedrl

    root = pathlib.Path(fusedrl.__file__).parent
    files = {"fusedrl.files": "files.py", "fusedrl.streams": "streams.py",
             "fusedrl.data_parallel": "data_parallel.py", "fusedrl.runs": "runs.py",
             "fusedrl.plotting": "plotting.py", "fusedrl.sweep_cli": "sweep_cli.py",
             "fusedrl.progress": "progress.py", "fusedrl.sweeps": "sweeps/__init__.py",
             **{f"fusedrl.sweeps.{m}": f"sweeps/{m}.py" for m in ("program", "result", "space")}}
    edges = {}
    for name, path in files.items():
        edges[name] = set()
        for node in ast.walk(ast.parse((root / path).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fusedrl"):
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.endswith("__")
                    assert not private, f"{name} imports {node.module}.{alias.name}"
                    edges[name] |= {m for m in (node.module, f"{node.module}.{alias.name}") if m in files}

    def reachable(start):
        seen, todo = set(), list(edges[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(edges[node])
        return seen

    for name in files:
        assert name not in reachable(name), f"import cycle through {name}"


def test_sel_in_zip_mode_selects_trials():
    r = _synthetic("zip")
    one = r.sel(lr=3e-4, seed=1)
    assert one.dims == () and one.metrics["episode_return"][-1] == 79.0
    assert r.sel(seed=1).sel(lr=3e-4).metrics["episode_return"][-1] == 79.0  # seed dim gone first
    assert r.sel(lr=[1e-4, 3e-4]).shape == (2, 2)


def test_sel_of_fields_and_trials_does_not_depend_on_the_order():
    # 3 zip trials whose curve is their own index: a field selector and trial=[...] together keep
    # the given trials whose value matches, in either order.
    lr = np.array([1e-4, 3e-4, 1e-3], np.float32)
    r = dataclasses.replace(
        _synthetic("zip"), axes={"seed": np.arange(1), "trial": np.arange(3)}, values={"lr": lr[None]},
        metrics={"episode_return": np.broadcast_to(np.arange(3.0)[None, :, None], (1, 3, 2))},
        seed_keys=jax.random.split(jax.random.key(0), 1))
    for lr_value, trial in [(3e-4, 1), (1e-3, 2)]:
        for part in (r.sel(lr=lr_value, trial=[1, 2]), r.sel(trial=[1, 2], lr=lr_value)):
            assert part.dims == ("seed", "trial") and part.axes["trial"].tolist() == [trial]
            np.testing.assert_allclose(part.values["lr"], [[lr_value]], rtol=1e-6)
            assert part.metrics["episode_return"][0, 0, 0] == trial
        assert r.sel(lr=lr_value, trial=trial).dims == ("seed",)
    assert r.sel(trial=[2, 0, 1], lr=[1e-4, 1e-3]).axes["trial"].tolist() == [2, 0]  # trial's order
    with pytest.raises(KeyError, match="no trial matches"):
        r.sel(lr=1e-4, trial=[1, 2])
    # Once the trial dim is dropped, lr has one value: selecting it again changes nothing.
    one = r.sel(trial=1)
    assert one.sel(lr=3e-4).dims == ("seed",)
    assert one.sel(lr=[3e-4, 1e-3]).metrics["episode_return"][0, 0] == 1
    with pytest.raises(KeyError, match="earlier selection left only lr=0.0003"):
        one.sel(lr=1e-3)


def test_to_csv_and_plot(tmp_path):
    r = _synthetic()
    r.to_csv(tmp_path / "t.csv")
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == "seed,lr,final_return,last10_return,best_return" and len(lines) == 5
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    ax = r.plot(by="lr")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "lr=0.0001 (IQM of 2 runs, 95% interval)", "lr=0.0003 (IQM of 2 runs, 95% interval)"]


# ---------------------------------------------------------------------------------- streams
def test_streams_agree_with_the_default_in_run_order(swept):
    """4 streams split the 6 runs as 2+2+2, plus a share of padding (run 0 twice); they agree run
    by run with the fixture's default (2 streams on a 2-core CPU, the vmap on 1 core). The vmapped
    program, sharded over 4 devices, is compared with one device's streams in the test below."""
    config, r, _ = swept
    other = sweep(config, 2, lr=LRS, key=jax.random.key(7), streams=4)
    assert other.shape == r.shape
    assert_runs_match(other.metrics, r.metrics, other.result.params, r.result.params)


def test_streams_run_their_shares_on_separate_threads_in_order(monkeypatch):
    import threading

    from fusedrl.train import TrainResult

    seen = []
    together = threading.Barrier(3, timeout=30)  # broken unless the 3 shares run at the same time

    def init(keys, swept, base):  # a run's "state": its keys, its lr and its update count
        return {"keys": keys, "lr": swept["lr"], "updates": jnp.zeros(keys.shape[0], jnp.int32)}

    def advance(states, swept, base, first, n):
        index = first + jnp.arange(n, dtype=jnp.int32)
        return TrainResult(state={**states, "updates": states["updates"] + n},
                           metrics={"index": jnp.broadcast_to(index, (states["lr"].shape[0], n))},
                           hparams=swept["lr"])

    class Jitted:  # stands in for a jitted program (advance's 5th argument static); its
        def __init__(self, fn):  # compiled form notes the thread that calls it
            self.fn = fn

        def __call__(self, *args):
            return self.fn(*args)

        def lower(self, *args):
            static = args[4:]
            fn = self.fn

            class Lowered:
                out_info = jax.eval_shape(lambda *a: fn(*a, *static), *args[:4])

                def compile(_):
                    def compiled(*args):
                        seen.append(threading.current_thread().name)
                        if self.fn is init:
                            together.wait()
                        return self.fn(*args, *static)
                    return compiled
            return Lowered()

    monkeypatch.setattr(stream_lib, "STREAM_PIECE_UPDATES", 4)
    program = sweep_program.StreamProgram(Jitted(init), Jitted(advance))
    keys = np.arange(12, dtype=np.uint32).reshape(6, 2)
    # 2 runs per stream: pieces of at most 4 // 2 = 2 updates of each run; of 5 updates, 5 pieces
    # of 1 (the first count from ceil(5 / 2) = 3 up that divides 5 is 5)
    out = sweep_program._run_streams(program, 3, keys, {"lr": np.arange(6.0)}, {}, num_updates=5)
    np.testing.assert_array_equal(out.state["keys"], keys)
    np.testing.assert_array_equal(out.state["lr"], np.arange(6.0))
    np.testing.assert_array_equal(out.state["updates"], [5] * 6)
    np.testing.assert_array_equal(out.metrics["index"], np.tile(np.arange(5), (6, 1)))
    threads = set(seen)
    assert len(seen) == 3 * 6 and len(threads) == 3 and all(n.startswith("fusedrl-sweep") for n in threads)


@pytest.mark.parametrize("n, size", [(1, 128), (128, 128), (976, 128), (1220, 128), (131, 128),
                                     (257, 128), (7, 2), (5, 1)])
def test_update_pieces_cover_the_run_in_order(n, size):
    pieces = stream_lib.update_pieces(n, size)
    firsts, counts = zip(*pieces, strict=True)
    assert sum(counts) == n and list(firsts) == list(np.cumsum((0,) + counts[:-1]))
    assert max(counts) <= size and max(counts) - min(counts) <= 1
    assert len(pieces) == max(1, -(-n // size)) or len(set(counts)) == 1  # more pieces only if equal
    if n in (976, 1220):  # the CartPole preset and Breakout at 1e7 steps: one compiled piece length each
        assert len(set(counts)) == 1


@pytest.mark.slow
def test_streams_in_pieces_agree_with_whole_runs_and_call_back_alike(swept, monkeypatch):
    """The fixture's runs (3 updates: one piece) again, with one update per piece: the same
    metrics and final params, and the callback (every 2nd update) made on the same updates."""
    config, whole, _ = swept
    calls = {"whole": 0, "pieces": 0}

    def counter(name):
        def callback(metrics):
            calls[name] += 1
        return callback

    ref = sweep(config, 2, lr=LRS, key=jax.random.key(7), streams=2, callback=counter("whole"),
                callback_every=2)
    monkeypatch.setattr(stream_lib, "STREAM_PIECE_UPDATES", 1)
    assert stream_lib.update_pieces(config.num_updates) == [(0, 1), (1, 1), (2, 1)]
    pieces = sweep(config, 2, lr=LRS, key=jax.random.key(7), streams=2, callback=counter("pieces"),
                   callback_every=2)
    assert_runs_match(pieces.metrics, ref.metrics, pieces.result.params, whole.result.params)
    assert calls["whole"] == calls["pieces"] == 6  # 6 runs, one call each (update 2 of 3)


@pytest.mark.parametrize("streams", [2, 1])
@pytest.mark.slow
def test_sweep_callback_names_each_run_and_padding_runs_stay_silent(streams):
    # 3 runs on 2 streams: one padding run (a copy of run 0) that must not call back; on 1 stream
    # (the vmap) none. Every call carries its run's index into the result's flattened shape.
    config = PPOConfig(**SMALL)
    calls = []
    lock = threading.Lock()

    def record(metrics):
        with lock:
            calls.append((metrics["run"], int(metrics["env_steps"]), float(metrics["policy_loss"])))

    result = sweep(config, 1, lr=LRS, streams=streams, callback=record)
    updates = config.num_updates
    assert sorted((run, steps) for run, steps, _ in calls) == [
        (run, (u + 1) * config.batch_size) for run in range(3) for u in range(updates)]
    for run, steps, loss in calls:
        pos = np.unravel_index(run, result.shape)
        assert loss == result.metrics["policy_loss"][pos][steps // config.batch_size - 1]
    assert "run" not in result.metrics and "_run" not in result.metrics


def test_default_streams_follow_the_devices():
    cpu = jax.devices("cpu")[0]
    cores = stream_lib.usable_cores()
    assert stream_lib.resolve_streams(None, (cpu,), 64) == min(64, cores)
    assert stream_lib.resolve_streams(None, (cpu,), 1) == 1
    assert stream_lib.resolve_streams(None, (cpu, cpu), 64) == 1  # devices split the runs instead
    assert stream_lib.resolve_streams(3, (cpu,), 2) == 3


def test_sweep_cli_progress_counts_calls_across_runs():
    import io

    from fusedrl.sweep_cli import _Progress

    out = io.StringIO()
    progress = _Progress(num_runs=3, calls_per_run=10, steps_per_call=100, file=out)
    for _ in range(3 * 10):
        progress({"env_steps": 0})
    lines = out.getvalue().splitlines()
    assert [float(x.split("%")[0]) for x in lines] == pytest.approx([10 * i for i in range(1, 11)], abs=0.5)
    assert "steps/s total" in lines[-1]


def test_sweep_cli_progress_rate_counts_the_steps_since_the_first_report(monkeypatch):
    import io
    import types

    from fusedrl import sweep_cli

    clock = iter(float(t) for t in range(100))  # one call per second; the first starts the clock
    monkeypatch.setattr(sweep_cli, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    out = io.StringIO()
    progress = sweep_cli._Progress(num_runs=1, calls_per_run=10, steps_per_call=100, file=out)
    for _ in range(10):
        progress({"env_steps": 0})
    lines = out.getvalue().splitlines()
    assert lines and all("~100 steps/s total" in x for x in lines), lines


# ----------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(num_envs=[4, 8]), ["cannot sweep 'num_envs'", "static field", "shapes",
                                 "config.replace(num_envs=v)", "gravity"]),
        (dict(hidden_sizes=[(16,), (32,)]), ["cannot sweep 'hidden_sizes'", "static"]),
        (dict(log_std_init=[-1.0, 0.0]), ["cannot sweep 'log_std_init'", "initial parameters"]),
        (dict(lrr=[1e-3]), ["unknown sweep axis 'lrr'", "Did you mean 'lr'", "gae_lambda", "gravity"]),
        (dict(mode="zip", lr=[1e-4, 1e-3], gamma=[0.9, 0.95, 0.99]),
         ["same length", "'lr': 2", "'gamma': 3"]),
        (dict(lr=1e-3), ["needs a list", "config.replace(lr=...)"]),
        (dict(gamma=[0.9, 1.5]), ["gamma", "(0, 1]"]),
        (dict(mode="random", lr=(1e-5, 1e-3)), ["num_samples"]),
        (dict(mode="sobol", lr=[1e-3]), ["mode must be one of"]),
        (dict(seed=[0, 1]), ["num_seeds"]),
        (dict(streams=0), ["streams must be a positive int"]),
        (dict(streams="2"), ["streams must be a positive int"]),
        (dict(streams=2, devices=jax.devices("cpu") * 2), ["streams=2", "one CPU device", "2 cpu device"]),
        (dict(lr=[1e-3], callback_every=0), ["callback_every must be an int >= 1, got 0"]),
        (dict(lr=[1e-3], callback=print, callback_every=2.5), ["callback_every must be an int >= 1"]),
        (dict(lr=[1e-3], callback="print"), ["callback must be a function", "'print'"]),
        # Values a cast to int32 / float32 would change: numpy wraps 2**32 + 5 around to 5 (the run
        # trained with a time limit of 5) and turns 3e9 into -2**31.
        (dict(max_steps_in_episode=[10, 2**32 + 5]),
         ["max_steps_in_episode", "[4294967301]", "out of range", "[-2147483648, 2147483647]"]),
        (dict(max_steps_in_episode=[10, 2**32 + 5, 3e9]),
         ["max_steps_in_episode", "4294967301", "3000000000", "[-2147483648, 2147483647]"]),
        (dict(max_steps_in_episode=[10, 2**70]), ["max_steps_in_episode", str(2**70), "out of range"]),
        (dict(max_steps_in_episode=[10, float("nan")]),
         ["max_steps_in_episode is an integer field", "got nan among its values", "whole numbers in"]),
        (dict(mode="random", num_samples=4, max_steps_in_episode=(10, 2**32)),
         ["max_steps_in_episode", "bounds [4294967296] out of range", "2147483647"]),
        (dict(gravity=[9.8, 1e39]), ["gravity", "[1e+39]", "float32", "3.403e+38"]),
        (dict(gravity=[9.8, 1e-50]), ["gravity", "[1e-50]", "float32", "1.175e-38"]),
        (dict(mode="random", num_samples=4, gravity=(1.0, 1e39)), ["gravity", "bounds [1e+39]", "float32"]),
        # NaN env params train to NaN without an error (PPOConfig and make refuse them too).
        (dict(gravity=[9.8, float("nan")]), ["sweep axis gravity", "got nan", "must be a number"]),
        (dict(mode="zip", gravity=[float("nan"), 9.8]), ["sweep axis gravity", "got nan"]),
        # make's other checks of an env param: a time limit below 1 gave one-step episodes.
        (dict(max_steps_in_episode=[0, 10]), ["sweep axis max_steps_in_episode: got 0",
                                              "max_steps_in_episode must be >= 1"]),
        (dict(mode="random", num_samples=4, gravity=[9.8, float("nan")]), ["sweep axis gravity", "got nan"]),
        # Random search with no field to draw: num_samples identical trials.
        (dict(mode="random", num_samples=3), ["mode='random' needs at least one field spec",
                                              "lr=(1e-5, 1e-3)", "num_seeds=3"]),
        (dict(mode="random", num_samples=2.5, lr=(1e-5, 1e-3)), ["num_samples must be an int", "2.5"]),
        (dict(mode="random", num_samples=True, lr=(1e-5, 1e-3)), ["num_samples must be an int", "True"]),
        (dict(lr=[1e-3], devices=["cpu"]), ["devices must be jax.Device objects", "jax.devices('cpu')",
                                            "'cpu' (str)"]),
        (dict(lr=[1e-3], devices="cpu"), ["devices must be a list of jax.Device objects", "got 'cpu'"]),
        (dict(lr=[1e-3], devices=jax.devices("cpu")[0]), ["devices must be a list of jax.Device objects"]),
    ],
)
def test_clear_errors(kwargs, words):
    with pytest.raises((TypeError, ValueError)) as info:
        sweep(PPOConfig(**SMALL), 2, **kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    # check_sweep (what the CLI calls first) refuses the same input with the same message.
    with pytest.raises(info.type) as checked:
        sweeps.check_sweep(PPOConfig(**SMALL), 2, **kwargs)
    assert str(checked.value) == str(info.value)


def test_a_gymnax_cartpole_mass_is_not_swept_without_the_params_gymnax_derives_from_it():
    config = PPOConfig(**{**SMALL, "env_id": "gymnax:CartPole-v1"})
    with pytest.raises(ValueError, match=r"cannot sweep masspole of gymnax:CartPole-v1 without "
                                         r"total_mass: gymnax stores total_mass \(computed from"):
        sweeps.check_sweep(config, 1, masspole=[0.1, 1.0])
    with pytest.raises(ValueError, match="cannot sweep length of gymnax:CartPole-v1 without polemass_length"):
        sweeps.check_sweep(config, 1, length=[0.5, 1.0])
    assert sweeps.check_sweep(config, 1, mode="zip", masspole=[0.1, 1.0], total_mass=[1.1, 2.0],
                                    polemass_length=[0.05, 0.5]) is None
    assert sweeps.check_sweep(PPOConfig(**SMALL), 1, masspole=[0.1, 1.0]) is None  # ours computes them


def test_check_sweep_takes_every_argument_of_sweep():
    import inspect

    assert inspect.signature(sweeps.check_sweep).parameters.keys() == inspect.signature(
        sweep).parameters.keys()
    assert sweeps.check_sweep(PPOConfig(**SMALL), 2, lr=[1e-3], keep_state=False, callback=print,
                                    callback_every=3) is None


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda c: sweep(c, 1, lr=[1e-3], key=0), TypeError, ["key must be a JAX PRNG key",
                                                               "jax.random.key(0)"]),
        (lambda c: sweep(c, 1, lr=["fast"]), ValueError, ["lr: values must be numbers", "'fast'"]),
        (lambda c: sweep(c, 1, lr=["1e-3", "3e-4"]), ValueError, ["lr: values must be numbers",
                                                                   "not '1e-3'"]),
        (lambda c: sweep(c.replace(env_id="gymnasium:CartPole-v1"), 1, lr=[1e-3]), ValueError,
         ["cannot sweep gymnasium:CartPole-v1", "host", "'CartPole-v1'",
          "fusedrl train --env gymnasium:CartPole-v1 --seed S"]),
        (lambda c: sweep(c, 1, lr=[1e-3], devices=[]), ValueError, ["devices is empty", "None"]),
        (lambda c: sweep(c, 1, lr=[1e-3, 3e-4, 1e-3]), ValueError, ["lr lists [0.001] more than once",
                                                                     "num_seeds"]),
        (lambda c: _synthetic().hparams(lr=1, gama=0), TypeError, ["['gama']", "not dims",
                                                                  "('seed', 'lr')"]),
        # Random draws of an integer field are checked as grid values are, never truncated.
        (lambda c: sweep(c, 1, mode="random", num_samples=4, max_steps_in_episode=[100.5, 150.7]),
         ValueError, ["max_steps_in_episode is an integer field", "[100.5, 150.7]", "whole numbers"]),
        (lambda c: sweep(c, 1, mode="random", num_samples=4,
                         max_steps_in_episode=sweeps.Uniform(0.5, 2.5)),
         ValueError, ["max_steps_in_episode is an integer field", "whole numbers", "Uniform(1, 2)"]),
        (lambda c: sweep(c, 1, mode="random", num_samples=4, lr=sweeps.Choice(("1e-3",))),
         ValueError, ["lr: choices must be numbers"]),
        (lambda c: sweep(c, 1, mode="random", num_samples=4, gamma=[0.9, 1.5]), ValueError,
         ["gamma", "(0, 1]"]),
        # One value on a random axis: every trial the same (`fusedrl sweep --random lr=1e-5` ran
        # the same run num_samples times).
        (lambda c: sweep(c, 1, mode="random", num_samples=4, lr=[1e-5, 1e-5]), ValueError,
         ["lr=[1e-05, 1e-05]: a random-search axis with one value gives every trial 1e-05",
          "config.replace(lr=...); --set lr=V", "a range (low, high)"]),
        (lambda c: sweep(c, 1, mode="random", num_samples=4, gamma=sweeps.Uniform(0.9, 0.9 + 1e-10)),
         ValueError, ["gamma=Uniform(low=0.9, high=0.9000000001): a random-search axis with one value gives "
                      "every trial 0.9"]),
    ],
    ids=["key-int", "lr-word", "lr-strings", "gymnasium-env", "no-devices", "grid-repeats",
         "hparams-typo", "random-int-choices", "random-int-uniform", "random-string-choice",
         "random-gamma-range", "random-one-choice", "random-empty-range"],
)
def test_bad_inputs_name_the_argument_and_the_fix(call, error, words):
    with pytest.raises(error) as info:
        call(PPOConfig(**SMALL))
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_random_integer_uniform_bounds_are_both_drawn():
    config = PPOConfig(**SMALL)
    fields = sweep_space.env_param_fields(config)
    for spec in [(100, 101), sweeps.Uniform(100, 101)]:
        values = sweep_space.layout(config, 1, "random", 64, jax.random.key(0),
                                      {"max_steps_in_episode": spec}, fields)[2]
        assert set(values["max_steps_in_episode"][0].tolist()) == {100, 101}, spec


def test_values_at_the_edges_of_their_dtype_are_kept_exactly():
    config = PPOConfig(**SMALL)
    fields = sweep_space.env_param_fields(config)
    axes = dict(max_steps_in_episode=[1, 2**31 - 1], gravity=[0.0, 3e38], max_grad_norm=[0.5, float("inf")])
    values = sweep_space.layout(config, 1, "grid", None, jax.random.key(0), axes, fields)[2]
    assert values["max_steps_in_episode"][0, :, 0, 0].tolist() == [1, 2**31 - 1]
    np.testing.assert_array_equal(values["gravity"][0, 0, :, 0], np.float32([0.0, 3e38]))
    assert values["max_grad_norm"][0, 0, 0, 1] == np.inf  # inf: no gradient clipping, as in PPOConfig
    # An infinite env param may be a limit that never binds, as make and PPOConfig take it.
    assert sweeps.check_sweep(config, 1, x_threshold=[2.4, float("inf")]) is None
    # Random integer bounds at int32's top, and numpy ints for num_samples.
    spec = (2**31 - 2, 2**31 - 1)
    drawn = sweep_space.layout(config, 1, "random", np.int64(64), jax.random.key(0),
                                 {"max_steps_in_episode": spec}, fields)[2]["max_steps_in_episode"][0]
    assert drawn.shape == (64,) and set(drawn.tolist()) == {2**31 - 2, 2**31 - 1}
    # The whole int32 range is drawn (what randint's span cannot hold); as a time limit its
    # negative draws are then refused, as make refuses them.
    spec = (-(2**31), 2**31 - 1)
    drawn = sweep_space._sample("max_steps_in_episode", spec, np.int32, 64, jax.random.key(0))
    assert drawn.shape == (64,) and drawn.min() >= spec[0] and drawn.max() <= spec[1], spec
    assert drawn.min() < 0 < drawn.max()
    with pytest.raises(ValueError, match="sweep axis max_steps_in_episode: got -"):
        sweep_space.layout(config, 1, "random", 64, jax.random.key(0), {"max_steps_in_episode": spec},
                             fields)


@pytest.mark.parametrize("streams", [1, 2])  # one vmap; two streams of `lax.map`
@pytest.mark.slow
def test_sweeps_in_float32_with_jax_enable_x64(x64, streams):
    # Under x64 the unswept env params (Python floats, weakly typed float32 in the trainer) were
    # passed as float64 arrays: the env state turned float64 and the training loop's scan refused
    # its carry ("env_state.x float32 vs float64"). See test_ppo's x64 test for the trainer.
    tiny = PPOConfig(num_envs=2, num_steps=8, total_timesteps=64, num_minibatches=2, update_epochs=1,
                     hidden_sizes=(8,))
    axes = dict(lr=[1e-3, 3e-4], max_steps_in_episode=[5, 500])
    r = sweep(tiny, 1, streams=streams, **axes)
    leaves = [*jax.tree.leaves(r.result), *r.metrics.values()]
    wide = {str(x.dtype) for x in leaves if str(x.dtype) in ("float64", "int64")}
    assert not wide and r.result.hparams.env_params.gravity.dtype == np.float32, wide
    assert r.values["lr"].dtype == np.float32 and r.values["max_steps_in_episode"].dtype == np.int32
    jax.config.update("jax_enable_x64", False)  # the same sweep in JAX's default 32 bits
    want = sweep(tiny, 1, streams=streams, **axes)
    for name, value in want.metrics.items():
        np.testing.assert_allclose(r.metrics[name], value, err_msg=name, **TOL)


def test_random_fields_with_the_same_spec_are_drawn_independently():
    config = PPOConfig(**SMALL)
    fields = sweep_space.env_param_fields(config)
    axes = dict(vf_coef=(0.1, 1.0), ent_coef=(0.1, 1.0))
    values = sweep_space.layout(config, 1, "random", 64, jax.random.key(0), axes, fields)[2]
    a, b = values["vf_coef"][0], values["ent_coef"][0]
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.5  # one key for both would draw the same values (1.0)


def test_random_layout_is_reproducible_and_in_range():
    config = PPOConfig(**SMALL)
    fields = sweep_space.env_param_fields(config)
    axes = dict(lr=(1e-5, 1e-2), clip_eps=(0.1, 0.3), max_steps_in_episode=(100, 200),
                ent_coef=[0.0, 0.01])
    key = jax.random.key(3)
    dims, coords, values = sweep_space.layout(config, 2, "random", 64, key, axes, fields)
    again = sweep_space.layout(config, 2, "random", 64, key, axes, fields)[2]
    assert dims == ("seed", "trial") and values["lr"].shape == (2, 64)
    for name in axes:
        np.testing.assert_array_equal(values[name], again[name])
        np.testing.assert_array_equal(values[name][0], values[name][1])  # same trial for each seed
    lr = values["lr"][0]
    assert lr.min() >= 1e-5 and lr.max() <= 1e-2
    assert np.mean(lr < 1e-3) > 0.4  # log-uniform: ~2/3 of draws below 1e-3 (uniform: ~10%)
    assert values["max_steps_in_episode"].dtype == np.int32
    assert set(np.unique(values["ent_coef"])) <= {0.0, np.float32(0.01)}


# ---------------------------------------------------------------------------------- devices
MULTI_DEVICE = textwrap.dedent(
    """
    import json, jax, numpy as np
    from fusedrl import data_parallel_train, sweep
    from fusedrl.train import PPOConfig
    assert jax.device_count() == 4, jax.devices()
    config = PPOConfig(**{small})
    diff = lambda a, b: max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y))))
                            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    # 6 runs over 4 devices (padded to 8, trimmed); the test compares them with the same sweep
    # on the one device of its own process.
    many = sweep(config, 2, lr={lrs}, key=jax.random.key(7))
    out = {{"sweep_metrics": {{k: np.asarray(v).tolist() for k, v in many.metrics.items()}},
           "sweep_params": [np.asarray(x).tolist() for x in jax.tree.leaves(many.result.params)],
           # Trimmed on the host (no all-gather program per leaf): each leaf on one device.
           "sweep_leaf_devices": sorted({{len(x.devices()) for x in jax.tree.leaves(many.result)}}),
           "sweep_key_leaves": sum(jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                                   for x in jax.tree.leaves(many.result))}}
    # One agent, 8 envs as 4 shards of 2: shard_map over 4 devices vs vmap on one device.
    big = config.replace(num_envs=8, total_timesteps=8 * 16 * 3)
    # Finished before dp1 is compiled and run: the two never share the device threads.
    dp4 = jax.block_until_ready(data_parallel_train(big)(jax.random.key(1)))
    dp1 = data_parallel_train(big, jax.devices()[:1], num_shards=4)(jax.random.key(1))
    out["dp_metrics"] = diff(dp4.metrics, dp1.metrics)
    out["dp_params"] = diff(dp4.params, dp1.params)
    out["dp_env_steps"] = np.asarray(dp4.metrics["env_steps"]).tolist()
    out["dp_obs_shape"] = list(dp4.state.obs.shape)
    # One device given: the runs execute there, by streams (the default) and by the vmap.
    out["one_device"] = [sorted({{d.id for x in jax.tree.leaves(r.result) for d in x.devices()}})
                         for r in (sweep(config, 2, lr=[1e-3], devices=[jax.devices()[1]], streams=s)
                                   for s in (None, 1))]
    print("RESULT " + json.dumps(out))
    """
)


def _run_forced_devices(script: str, timeout: int = 1200) -> dict:
    # XLA:CPU aborts when a collective waits 40 s for the other device threads; that once happened
    # to a sweep's all-gather in CI, on a 2-core machine shared with the other test worker. The
    # limit is raised to the subprocess's: a slow rendezvous passes, a hung one still fails.
    flags = ("--xla_force_host_platform_device_count=4"
             f" --xla_cpu_collective_call_terminate_timeout_seconds={timeout}")
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {flags}", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


# A REINFORCE agent for the data-parallel tests: 4 envs (one per shard), episodes ending inside rollouts.
REINFORCE_DP = dict(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3,
                    hidden_sizes=(8,), env_params={"max_steps_in_episode": 8})


REINFORCE_MULTI_DEVICE = textwrap.dedent(
    """
    import json, jax, numpy as np
    from fusedrl import data_parallel_train
    from fusedrl.train import ReinforceConfig
    assert jax.device_count() == 4, jax.devices()
    config = ReinforceConfig(**{small})
    diff = lambda a, b: max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y))))
                            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    dp4 = jax.block_until_ready(data_parallel_train(config)(jax.random.key(1)))
    dp1 = data_parallel_train(config, jax.devices()[:1], num_shards=4)(jax.random.key(1))
    out = {{"metrics": diff(dp4.metrics, dp1.metrics), "params": diff(dp4.params, dp1.params),
           "episodes": int(np.asarray(dp4.metrics["episodes_completed"]).sum()),
           "env_steps": np.asarray(dp4.metrics["env_steps"]).tolist()}}
    print("RESULT " + json.dumps(out))
    """
)


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.timeout(1500)  # two compiles in the subprocess: minutes on a loaded 2-core machine
def test_data_parallel_reinforce_on_four_devices_matches_one_device():
    # One REINFORCE agent, 4 envs as 4 shards of 1: shard_map over 4 (forced CPU) devices vs the vmap
    # on one device that the in-process test checks against the plain agent.
    out = _run_forced_devices(REINFORCE_MULTI_DEVICE.format(small=repr(REINFORCE_DP)))
    assert out["metrics"] <= 1e-5 and out["params"] <= 1e-5, out
    assert out["episodes"] > 0 and out["env_steps"] == [32, 64, 96]


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.timeout(1500)  # three compiles in the subprocess: minutes on a loaded 2-core machine
def test_sharded_sweep_and_data_parallel_match_one_device(swept):
    config, reference, _ = swept
    out = _run_forced_devices(MULTI_DEVICE.format(small=repr(SMALL), lrs=repr(LRS)))
    # Tolerances: each device compiles the per-run program over its own batch (2 runs, not 6)
    # and the data-parallel pmean sums shards in another order than vmap; float32 rounding only.
    assert set(out["sweep_metrics"]) == set(reference.metrics)
    for name, value in out["sweep_metrics"].items():
        assert np.shape(value) == (2, 3, config.num_updates), name
        np.testing.assert_allclose(value, reference.metrics[name], err_msg=name, **TOL)
    leaves = jax.tree.leaves(reference.result.params)
    assert len(out["sweep_params"]) == len(leaves)
    for value, ref in zip(out["sweep_params"], leaves, strict=True):
        np.testing.assert_allclose(value, ref, **TOL)
    assert out["sweep_leaf_devices"] == [1]
    # PRNG keys come back from the host as typed keys, as in the one-device sweep.
    key_leaves = sum(jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                     for x in jax.tree.leaves(reference.result))
    assert key_leaves > 0 and out["sweep_key_leaves"] == key_leaves
    assert out["dp_metrics"] <= 1e-5 and out["dp_params"] <= 1e-5, out
    assert out["dp_env_steps"] == [128, 256, 384]  # the whole agent's steps: 8 envs x 16 x update
    assert out["dp_obs_shape"] == [4, 2, 4]  # [shards, envs per shard, obs]
    assert out["one_device"] == [[1], [1]]  # devices=[jax.devices()[1]], streams None and 1


@pytest.mark.slow
def test_data_parallel_shards_stop_early_together():
    # With target_kl, each shard's minibatch KL differs (its own envs), so each shard alone would
    # stop at its own step and the parameters would drift apart; the decision uses the mean KL.
    config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 4,
                       update_epochs=4, num_minibatches=2, hidden_sizes=(16,), lr=1e-2, target_kl=1e-3)
    # The program `data_parallel_train` runs on one device, kept per shard to compare the shards.
    train = make_train(config.replace(num_envs=2, total_timesteps=2 * 16 * 4), axis_name=DATA_AXIS)
    per_shard = jax.vmap(train, in_axes=None, axis_size=2, axis_name=DATA_AXIS)
    shards = jax.jit(per_shard)(jax.random.key(0), train.default_hparams())
    steps = np.asarray(shards.metrics["gradient_steps"])
    kl = np.asarray(shards.metrics["approx_kl"])
    assert not np.array_equal(kl[0], kl[1])  # the shards do see different KLs
    np.testing.assert_array_equal(steps[0], steps[1])
    full = config.update_epochs * config.num_minibatches
    assert steps.min() >= 1 and steps.min() < full, steps  # some update did stop early
    chex.assert_trees_all_equal(*(jax.tree.map(lambda x, i=i: x[i], shards.state.params) for i in (0, 1)))
    agent = data_parallel_train(config, jax.devices()[:1], num_shards=2)(jax.random.key(0))
    np.testing.assert_array_equal(agent.metrics["gradient_steps"], steps[0])


def test_data_parallel_refuses_a_host_env_and_bad_devices_by_name():
    config = PPOConfig(env_id="gymnasium:CartPole-v1", num_envs=4, num_steps=8, total_timesteps=64)
    with pytest.raises(ValueError, match="gymnasium:CartPole-v1.*host.*CartPole-v1"):
        data_parallel_train(config, jax.devices()[:1], num_shards=2)
    # devices as sweep takes them: [] was a ZeroDivisionError, "cpu" three shards named c, p and u.
    config = config.replace(env_id="CartPole-v1")
    for devices, error, words in (([], ValueError, "devices is empty"),
                                  ("cpu", TypeError, "list of jax.Device"),
                                  (jax.devices()[0], TypeError, "list of jax.Device")):
        with pytest.raises(error, match=words):
            data_parallel_train(config, devices)


def _agent_episodes(n, values):
    """The agent's episode metric from per-shard [S, U] counts and values, one update at a time:
    the episode-weighted mean, else the latest update's that had an episode, else 0."""
    out, latest = [], 0.0
    for u in range(n.shape[1]):
        if n[:, u].sum() > 0:
            latest = float((values[:, u] * n[:, u]).sum() / n[:, u].sum())
        out.append(latest)
    return np.array(out)


def test_data_parallel_metrics_invent_no_episodes():
    # Shard 1 completes its first episode (return 16) at update 1, shard 0 its (return 10) at
    # update 2; in updates 0 and 3 none completes. Update 3 repeats update 2's 10 (averaging the
    # carried-over 10 and 16 would invent an episode of 13), update 0 is 0.0 with length 0.
    n = np.array([[0, 0, 1, 0, 0], [0, 1, 0, 0, 2]], np.int32)
    ret = np.array([[0, 0, 10, 10, 10], [0, 16, 16, 16, 20]], np.float32)
    length = np.array([[0, 0, 9, 9, 9], [0, 15, 15, 15, 30]], np.float32)
    per_shard = {"episodes_completed": n, "episode_return": ret, "episode_length": length,
                 "env_steps": np.tile(np.arange(1, 6) * 8, (2, 1)), "learning_rate": np.full((2, 5), 1e-3),
                 "gradient_steps": np.ones((2, 5), np.int32), "policy_loss": np.ones((2, 5), np.float32)}
    agent = jax.jit(data_parallel._combine)(per_shard)
    np.testing.assert_array_equal(agent["episode_return"], [0, 16, 10, 10, 20])
    np.testing.assert_array_equal(agent["episode_length"], [0, 15, 9, 9, 30])
    np.testing.assert_array_equal(agent["episodes_completed"], [0, 1, 1, 0, 2])
    np.testing.assert_array_equal(agent["episode_return"], _agent_episodes(n, ret))
    np.testing.assert_array_equal(agent["env_steps"], np.arange(1, 6) * 16)  # the shards' total


@pytest.mark.slow
def test_data_parallel_episode_statistics_are_the_agents():
    """A real 2-shard agent (the reviewer's case): 1 env x 4 steps per shard, so most updates end
    no episode (key 0: shard 1's first at update 3, none again until update 8); the agent's
    metrics and its final `last_return`/`last_length` are those of all its shards' episodes."""
    config = PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=4, total_timesteps=2 * 4 * 12,
                       update_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    train = make_train(config.replace(num_envs=1, total_timesteps=4 * 12), axis_name=DATA_AXIS)
    per_shard = jax.vmap(train, in_axes=None, axis_size=2, axis_name=DATA_AXIS)
    shards = jax.jit(per_shard)(jax.random.key(0), train.default_hparams())
    agent = data_parallel_train(config, jax.devices()[:1], num_shards=2)(jax.random.key(0))
    n = np.asarray(shards.metrics["episodes_completed"])
    assert (n.sum(0) == 0).any() and (n.sum(0) > 0).any()  # updates with episodes and without
    state = agent.state
    for name, last in (("episode_return", state.last_return), ("episode_length", state.last_length)):
        want = _agent_episodes(n, np.asarray(shards.metrics[name]))
        np.testing.assert_allclose(agent.metrics[name], want, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(last, want[-1], rtol=1e-6, err_msg=name)


def _four_shards_and_one_agent(config, monkeypatch):
    """`config` trained data-parallel over 4 shards on one device, the shards' trainer (caught as
    data_parallel builds it), and one agent of the same config with its first rollout:
    (agent's TrainResult, shard trainer, single trainer, hp, state, traj)."""
    built = []

    def spy(*args, **kwargs):
        built.append(make_train(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(data_parallel, "make_train", spy)
    agent = data_parallel_train(config, jax.devices()[:1], num_shards=4)(jax.random.key(0))
    (shard,) = built
    single = make_train(config)
    hp = single.default_hparams()
    state = single.init(jax.random.key(0), hp)
    state, traj = single.rollout(state, hp, single.make_env(hp), jax.random.key(1))
    return agent, shard, single, hp, state, traj


@pytest.mark.slow
def test_data_parallel_normalizes_advantages_over_the_agents_minibatch(monkeypatch):
    """4 shards of 1 env x 1 step: each shard's minibatch is one transition, the agent's four.
    The advantages are normalised over the agent's four, so the run is valid (PPOConfig refuses
    one-transition minibatches under normalize_adv only because they would all be 0) and learns
    as one agent with the four envs learns from the same rollout."""
    config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=1, total_timesteps=4 * 3,
                       update_epochs=2, num_minibatches=1, hidden_sizes=(8,))
    agent, shard, single, hp, state, traj = _four_shards_and_one_agent(config, monkeypatch)
    assert np.isfinite(agent.metrics["policy_loss"]).all()
    want = single.learn_from_rollout(state, traj, hp)[0].params
    per_shard = jax.tree.map(lambda x: jnp.stack(jnp.split(x, 4, axis=1)), traj)  # env i on shard i
    got = jax.vmap(lambda t: shard.learn_from_rollout(state, t, hp)[0].params, axis_name=DATA_AXIS)(per_shard)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, np.broadcast_to(b, a.shape), rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------------------- multi-host
MULTI_HOST = textwrap.dedent(
    """
    import json, sys, jax, numpy as np
    process_id, port = int(sys.argv[1]), sys.argv[2]
    jax.distributed.initialize(coordinator_address=f"localhost:{{port}}", num_processes=2,
                               process_id=process_id, initialization_timeout=120)
    from fusedrl import sweep
    from fusedrl.train import PPOConfig
    assert (jax.process_count(), jax.device_count(), jax.local_device_count()) == (2, 4, 2)
    r = sweep(PPOConfig(**{small}), 2, lr={lrs}, key=jax.random.key(7))
    data = lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    print("RESULT " + json.dumps({{
        "metrics": {{k: np.asarray(v).tolist() for k, v in r.metrics.items()}},
        "params": [np.asarray(x).tolist() for x in jax.tree.leaves(r.result.params)],
        "result": [np.asarray(data(x)).tolist() for x in jax.tree.leaves(r.result)],
    }}))
    jax.distributed.shutdown()
    """
)


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.timeout(1500)
def test_two_processes_on_localhost(swept, tmp_path):
    """`jax.distributed` with the CPU backend (gloo collectives): 2 processes x 2 devices; every
    process gets every run (metrics and final state), equal to the single-process sweep up to
    float32 rounding (metrics and parameters)."""
    import socket

    _, reference, _ = swept
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    script = MULTI_HOST.format(small=repr(SMALL), lrs=repr(LRS))
    # Output to files, not pipes: a process blocked on a full pipe that is not being read (the
    # other process's, while this one is waited for) never reaches the shutdown barrier.
    logs = [(tmp_path / f"out{i}", tmp_path / f"err{i}") for i in range(2)]
    procs = []
    for i, (out, err) in enumerate(logs):
        with open(out, "w") as stdout, open(err, "w") as stderr:
            procs.append(subprocess.Popen([sys.executable, "-c", script, str(i), port], env=env,
                                          stdout=stdout, stderr=stderr))
    outs = []
    try:
        for p, (out, err) in zip(procs, logs, strict=True):
            p.wait(timeout=1200)
            assert p.returncode == 0, err.read_text()[-4000:]
            lines = out.read_text().splitlines()
            outs.append(json.loads([x for x in lines if x.startswith("RESULT ")][-1][7:]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert outs[0] == outs[1]  # both hosts hold the same, complete result: metrics and final states
    assert len(outs[0]["result"]) == len(jax.tree.leaves(reference.result))
    for name, value in outs[0]["metrics"].items():
        np.testing.assert_allclose(value, reference.metrics[name], err_msg=name, **TOL)
    leaves = jax.tree.leaves(reference.result.params)
    assert len(outs[0]["params"]) == len(leaves)
    for value, ref in zip(outs[0]["params"], leaves, strict=True):
        np.testing.assert_allclose(value, ref, **TOL)


# ------------------------------------------------------------------------------------- CLI
def test_cli_parses_axes_and_settings():
    import argparse

    from fusedrl.sweep_cli import SweepCLIError, add_sweep_parser, build_config, parse_axes
    from fusedrl.sweeps import LogUniform

    parser = argparse.ArgumentParser()
    add_sweep_parser(parser.add_subparsers(dest="command"))

    def parse(*argv):
        return parser.parse_args(["sweep", "--env", "CartPole-v1", *argv])

    args = parse("--grid", "lr=1e-4,3e-4", "--grid", "gravity=9.8,12", "--set", "num_envs=8",
                 "--set", "masscart=2.0", "--set", "hidden_sizes=32,32", "--total-timesteps", "4096")
    assert parse_axes(args) == ("grid", {"lr": [1e-4, 3e-4], "gravity": [9.8, 12.0]})
    config = build_config(args)
    assert (config.num_envs, config.hidden_sizes, config.total_timesteps) == (8, (32, 32), 4096)
    assert dict(config.env_params) == {"masscart": 2.0}
    mode, axes = parse_axes(parse("--random", "lr=log:1e-5:1e-3", "--random", "clip_eps=0.1:0.3",
                                  "--random", "ent_coef=0,0.01", "--num-samples", "4"))
    assert mode == "random" and axes == {"lr": LogUniform(1e-5, 1e-3), "clip_eps": (0.1, 0.3),
                                         "ent_coef": [0.0, 0.01]}
    for argv, words in [
        (("--grid", "lr=1e-4", "--zip", "gamma=0.9"), "one kind of axis"),
        (("--random", "lr=1e-5:1e-3",), "--num-samples"),
        (("--grid", "lr=fast",), "not a number"),
    ]:
        with pytest.raises(SweepCLIError, match=words):
            parse_axes(parse(*argv))
    with pytest.raises(SweepCLIError, match="unknown field 'lrr'"):
        build_config(parse("--set", "lrr=1"))
    # A field both swept and fixed: the sweep would override the --set without a word.
    for argv in [("--grid", "lr=1e-4,3e-4", "--set", "lr=1e-3"),
                 ("--zip", "gravity=9.8,12", "--set", "env_params.gravity=15"),
                 ("--random", "total_timesteps=4096,8192", "--num-samples", "2",
                  "--total-timesteps", "4096")]:
        args = parse(*argv)
        with pytest.raises(SweepCLIError, match=r"is both swept .* and fixed .*drop one of them"):
            build_config(args, parse_axes(args)[1])


# ------------------------------------------------------------------ stopping streams early
PIECES = [(0, 10), (10, 10), (20, 10), (30, 10), (40, 10)]


def _piece_log(monkeypatch, stop_at=None, stop=None):
    """(events, advance): `advance` records each launch and returns a result whose state is the
    piece's first update; `jax.block_until_ready` records each wait; piece `stop_at` sets `stop`."""
    from fusedrl.train.ppo import TrainResult

    events = []
    monkeypatch.setattr(jax, "block_until_ready", lambda out: events.append(("wait", out.state)) or out)

    def advance(states, first, n):
        events.append(("launch", first))
        if first == stop_at:
            stop.set()  # e.g. a Ctrl-C while this piece runs
        return TrainResult(state=first, metrics={"x": jnp.full((1, n), first)}, hparams=None)

    return events, advance


def test_continue_in_pieces_stops_once_asked_with_two_pieces_in_flight(monkeypatch):
    from fusedrl.streams import continue_in_pieces

    stop = threading.Event()
    events, advance = _piece_log(monkeypatch, stop_at=30, stop=stop)
    with pytest.raises(KeyboardInterrupt):
        continue_in_pieces(None, advance, PIECES, stop)
    # Each piece is launched once the one two before it has ended, and none after the stop.
    # The pieces still running are waited for (a process exiting while one runs can abort).
    assert events == [("launch", 0), ("launch", 10), ("wait", 0), ("launch", 20), ("wait", 10),
                      ("launch", 30), ("wait", 20), ("wait", 30)]

    for stop in (None, threading.Event()):  # without a stop, or one never set: every piece, joined
        events, advance = _piece_log(monkeypatch)
        out = continue_in_pieces(None, advance, PIECES, stop)
        launches = [e for e in events if e[0] == "launch"]
        assert launches == [("launch", f) for f, _ in PIECES]
        assert len(events) == (5 if stop is None else 8)  # waits only with a stop
        np.testing.assert_array_equal(out.metrics["x"][0], np.repeat([0, 10, 20, 30, 40], 10))


@pytest.mark.parametrize("with_stop", [False, True])
@pytest.mark.slow
def test_continue_in_pieces_keeps_no_earlier_pieces_states(with_stop, monkeypatch):
    # A piece's result holds its states (every run's params, optimiser and envs): keeping them all
    # grew a long sweep's memory by pieces x states.
    import gc
    import weakref

    from fusedrl.streams import continue_in_pieces
    from fusedrl.train.ppo import TrainResult

    class States:
        pass

    monkeypatch.setattr(jax, "block_until_ready", lambda out: out)
    refs = []

    def advance(states, first, n):
        gc.collect()
        assert all(r() is None for r in refs[:-2]), f"states of earlier pieces kept at update {first}"
        out = TrainResult(state=States(), metrics={"x": jnp.full((1, n), first)}, hparams=None)
        refs.append(weakref.ref(out.state))
        return out

    continue_in_pieces(None, advance, PIECES, threading.Event() if with_stop else None)


def _wait_for_stop(stop, seen, i):
    seen[i] = stop.wait(timeout=30)  # True: told to stop; False: left to run on (the bug)
    return {"x": jnp.zeros(1)}


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_run_shares_stops_the_other_shares_when_one_fails(failing):
    # Whichever share fails: not only once the shares before it have returned.
    from fusedrl.streams import run_shares

    seen = {}

    def part(i, stop):
        if i == failing:
            time.sleep(0.1)
            raise ValueError(f"share {i} failed")
        return _wait_for_stop(stop, seen, i)

    with pytest.raises(ValueError, match=f"share {failing} failed"):
        run_shares(part, 3, "test")
    assert seen == {i: True for i in range(3) if i != failing}


def test_a_one_stream_sweep_holds_ctrl_c_while_compiling(monkeypatch):
    # As the streams' compile (progress.hold_interrupt): with jax 0.10.2, `fusedrl sweep` of one run
    # crashed at exit (exit -11/-6) in 5 of 6 Ctrl-Cs during its compile (helper-31, before the hold).
    import signal

    compile_, done = jax.stages.Lowered.compile, []

    def ctrl_c_while_compiling(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        out = compile_(self, *args, **kwargs)
        done.append(True)
        return out

    monkeypatch.setattr(jax.stages.Lowered, "compile", ctrl_c_while_compiling)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep(PPOConfig(**SMALL), 1, streams=1, lr=[3e-4])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done == [True], "the Ctrl-C interrupted the compile"


def test_run_shares_stops_its_shares_on_ctrl_c():
    # Ctrl-C reaches the main thread while it waits for the shares; before, the shares then trained
    # to their end (a sweep interrupted at 10% ran to 100% before exiting).
    import signal

    from fusedrl.streams import run_shares

    seen, started = {}, threading.Barrier(2)

    def part(i, stop):
        started.wait(timeout=60)
        if i == 0:
            time.sleep(0.2)  # the main thread is waiting for the shares by now
            os.kill(os.getpid(), signal.SIGINT)
        return _wait_for_stop(stop, seen, i)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as in a shell
    try:
        with pytest.raises(KeyboardInterrupt):
            run_shares(part, 2, "test")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == {0: True, 1: True}


@pytest.mark.slow
def test_a_replaced_env_is_never_run_through_the_programs_of_the_env_it_replaced(monkeypatch, tmp_path):
    # The compiled programs of evaluate, train_run and sweep are cached per PPOConfig, which names
    # its env by id only: an env registered again under that id (overwrite=True) was still trained
    # and evaluated through the old env's programs, silently.
    import fusedrl
    from fusedrl.envs import registry
    from fusedrl.envs.cartpole import CartPole
    from fusedrl.runs import train_run

    class Louder(CartPole):  # CartPole, rewards x100: the first rollout's returns are 100x, exactly
        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, info = super().step_env(key, state, action, params)
            return obs, state, 100.0 * reward, terminated, info

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    config = PPOConfig(**{**SMALL, "env_id": "Replaced-v0", "num_steps": 64, "total_timesteps": 4 * 64 * 2})

    def first_returns(evaluated=None):
        run = train_run(config, num_seeds=1, eval_episodes=3, progress=False)
        # In pieces (one per update), the other program of train_run.
        pieces = train_run(config, tmp_path / str(evaluated is None), num_seeds=1, eval_episodes=3,
                           progress=False, checkpoint_every=1)
        swept = sweep(config, 1)
        assert run.result.metrics["episodes_completed"][0, 0] > 0  # returns to compare
        # Evaluation: of one result, the first run's (each run's agent learnt from its rewards).
        evaluated = run.result if evaluated is None else evaluated
        returns = [run.result.metrics["episode_return"][0, 0], pieces.result.metrics["episode_return"][0, 0],
                   swept.metrics["episode_return"][0, 0],
                   fusedrl.evaluate(config, evaluated, jax.random.key(3), num_episodes=3)]
        return returns, evaluated

    fusedrl.register("Replaced-v0", CartPole)
    quiet, result = first_returns()
    fusedrl.register("Replaced-v0", Louder, overwrite=True)
    loud, _ = first_returns(result)
    names = ["train_run", "train_run in pieces", "sweep", "evaluate"]
    for what, q, lo in zip(names, quiet, loud, strict=True):
        np.testing.assert_allclose(lo, 100 * np.asarray(q), rtol=1e-6, err_msg=what)


# ------------------------------------------------------------------------ other algorithms
A2C_SMALL = dict(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3, hidden_sizes=(16,))


@pytest.mark.slow
def test_an_a2c_config_sweeps_its_traced_fields():
    from fusedrl.train import A2CConfig, ReinforceConfig

    config = A2CConfig(**A2C_SMALL)
    r = sweep(config, 1, lr=LRS[:2], gae_lambda=[0.9], key=jax.random.key(7))
    assert r.dims == ("seed", "lr", "gae_lambda") and r.shape == (1, 2, 1)
    train = jax.jit(make_train(config))
    for lr in LRS[:2]:
        hp = r.hparams(lr=LRS.index(lr), gae_lambda=0)
        assert float(hp.gae_lambda) == np.float32(0.9) and type(r.config) is A2CConfig
        single = train(r.seed_keys[0], hp)
        part = r.sel(seed=0, lr=lr, gae_lambda=0.9)
        assert_runs_match(part.metrics, single.metrics, part.result.params, single.params)
    # PPO's fields are not A2C's: the error names A2C's class.
    with pytest.raises(ValueError, match="unknown sweep axis 'clip_eps'"):
        sweep(config, lr=LRS[:2], clip_eps=[0.1, 0.2])
    with pytest.raises(ValueError, match="it is a static field of A2CConfig"):
        sweep(config, rmsprop_alpha=[0.9, 0.99])
    # REINFORCE's sweepable names are its own (no gae_lambda), checked before anything compiles.
    reinforce = ReinforceConfig(**{**A2C_SMALL, "env_params": {"max_steps_in_episode": 8}})
    with pytest.raises(ValueError, match=r"unknown sweep axis 'gae_lambda'.*Sweepable .*: lr, gamma, "
                                         r"ent_coef, vf_coef, max_grad_norm"):
        sweep_program.check_sweep(reinforce, gae_lambda=[0.9, 0.95])
    sweep_program.check_sweep(reinforce, vf_coef=[0.25, 0.5])
    with pytest.raises(TypeError, match="sweep takes an algorithm's config"):
        sweep(A2C_SMALL, lr=LRS)  # fields, not a config


@pytest.mark.slow
def test_data_parallel_a2c_normalizes_advantages_over_the_agents_batch(monkeypatch):
    """As for PPO: 4 shards of 1 env x 1 step under normalize_adv learn as one A2C agent with the
    four envs learns from the same rollout (A2CConfig refuses a one-transition batch on its own)."""
    from fusedrl.train import A2CConfig

    config = A2CConfig(env_id="CartPole-v1", num_envs=4, num_steps=1, total_timesteps=4 * 3,
                       hidden_sizes=(8,), normalize_adv=True)
    agent, shard, single, hp, state, traj = _four_shards_and_one_agent(config, monkeypatch)
    assert np.isfinite(agent.metrics["policy_loss"]).all()
    assert np.asarray(agent.metrics["env_steps"]).tolist() == [4, 8, 12]
    assert type(shard.config) is A2CConfig and shard.config.num_envs == 1
    want = single.learn_from_rollout(state, traj, hp)[0].params
    per_shard = jax.tree.map(lambda x: jnp.stack(jnp.split(x, 4, axis=1)), traj)
    got = jax.vmap(lambda t: shard.learn_from_rollout(state, t, hp)[0].params, axis_name=DATA_AXIS)(per_shard)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, np.broadcast_to(b, a.shape), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match=r"takes a PPOConfig, A2CConfig, ReinforceConfig, got dict"):
        data_parallel_train(dict(A2C_SMALL), jax.devices()[:1], num_shards=2)


@pytest.mark.slow
def test_data_parallel_reinforce_takes_its_means_over_the_agents_steps(monkeypatch):
    """REINFORCE's returns are per env, so each shard computes its envs' exactly; its loss means and
    return normalisation are over the steps whose episode ended in the rollout, which fall unequally
    among the shards. 4 shards of 1 env learn as the one agent with the 4 envs does from the same
    rollout (the mean of the shards' own weighted means would not)."""
    from fusedrl.train import ReinforceConfig

    config = ReinforceConfig(**REINFORCE_DP)
    agent, shard, single, hp, state, traj = _four_shards_and_one_agent(config, monkeypatch)
    assert np.isfinite(agent.metrics["policy_loss"]).all() and agent.metrics["episodes_completed"].sum() > 0
    assert np.asarray(agent.metrics["env_steps"]).tolist() == [32, 64, 96]
    assert type(shard.config) is ReinforceConfig and shard.config.num_envs == 1
    # Episode ends [T, N] that give the shards 5, 0, 8 and 2 steps with a return.
    done = np.zeros((8, 4), bool)
    done[[2, 4], 0] = done[7, 2] = done[1, 3] = True
    traj = traj._replace(done=jnp.asarray(done), terminated=jnp.asarray(done))
    want_state, want_metrics = single.learn_from_rollout(state, traj, hp)
    per_shard = jax.tree.map(lambda x: jnp.stack(jnp.split(x, 4, axis=1)), traj)
    learn = jax.vmap(lambda t: shard.learn_from_rollout(state, t, hp), axis_name=DATA_AXIS)
    got, got_metrics = learn(per_shard)
    for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want_state.params), strict=True):
        np.testing.assert_allclose(a, np.broadcast_to(b, a.shape), rtol=1e-5, atol=1e-6)
    for name in ("policy_loss", "value_loss", "entropy"):  # the agent's: the mean of the shards' values
        np.testing.assert_allclose(got_metrics[name].mean(), want_metrics[name], rtol=1e-5, atol=1e-6)
