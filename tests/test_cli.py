"""The `fusedrl` CLI in-process, run folders, per-seed progress logging, Ctrl-C, policy loading.

One tiny config is compiled once (module fixture); every later run of the same config, seed count
and progress interval reuses the compiled program (fusedrl.runs caches it).
"""

import contextlib
import csv
import importlib
import io
import json
import os
import re
import signal
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fusedrl import cli, policy, run_driver, run_report, runs, sweep_cli
from fusedrl._json import dumps as strict_json
from fusedrl.loggers import (
    CSV_COLUMNS,
    CSVLogger,
    TensorBoardLogger,
    WandbLogger,
    format_rows,
    metrics_to_rows,
)
from fusedrl.progress import Monitor, interrupt_guard
from fusedrl.train import PPOConfig, preset
from fusedrl.train.ppo import METRIC_NAMES, has_episode

TINY = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6, update_epochs=2, num_minibatches=2,
            hidden_sizes=(16,))
TINY_ARGS = ["--set", "num_envs=4", "--set", "num_steps=16", "--total-timesteps", "384",
             "--set", "update_epochs=2", "--set", "num_minibatches=2", "--set", "hidden_sizes=16"]
RUN_ARGS = ["--num-seeds", "2", "--eval-episodes", "4", "--progress-every", "2"]


class Recorder:
    def __init__(self):
        self.calls = []

    def log(self, update, rows):
        self.calls.append((update, [dict(r) for r in rows]))

    def close(self):
        pass


@pytest.fixture(scope="module")
def trained(run_cli, tmp_path_factory):
    """A 2-seed run through the library (with a recording logger), then the same through the CLI."""
    root = tmp_path_factory.mktemp("runs")
    config = preset("CartPole-v1", **TINY)
    recorder = Recorder()
    run = runs.train_run(config, root / "lib", num_seeds=2, eval_episodes=4, progress_every=2,
                         loggers=[recorder], progress_file=io.StringIO())
    code, out, err = run_cli("train", "--env", "CartPole-v1", *TINY_ARGS, *RUN_ARGS, "--out", root / "cli")
    assert code == 0, err
    return config, run, recorder, root / "cli", out, err


# --------------------------------------------------------------------------------- progress
def test_callback_rows_are_per_seed_and_in_order(trained):
    config, run, recorder, *_ = trained
    assert [u for u, _ in recorder.calls] == [2, 4, 6]
    for update, rows in recorder.calls:
        assert [r["seed"] for r in rows] == [0, 1]
        for r in rows:
            for name in METRIC_NAMES:  # the exact values of that seed and update, not an average
                assert r[name] == np.asarray(run.result.metrics[name])[r["seed"], update - 1], name
    # The two seeds really differ (so a mix-up would show).
    assert recorder.calls[-1][1][0]["policy_loss"] != recorder.calls[-1][1][1]["policy_loss"]


@pytest.mark.slow
def test_seeds_vmapped_in_one_share_are_told_apart(trained, monkeypatch, tmp_path):
    # On 2 cores the fixture's 2 seeds run one per share (each the share's vmap index 0); here both
    # run in one vmap, so each row's seed comes from the vmapped axis index.
    config, *_ = trained
    monkeypatch.setattr(run_driver, "num_streams", lambda num_seeds: 1)
    recorder = Recorder()
    run = runs.train_run(config, tmp_path / "one", num_seeds=2, eval_episodes=1, progress_every=2,
                         loggers=[recorder], progress_file=io.StringIO())
    assert run.summary["streams"] == 1 and [u for u, _ in recorder.calls] == [2, 4, 6]
    for update, rows in recorder.calls:
        assert [r["seed"] for r in rows] == [0, 1]
        for r in rows:
            assert r["policy_loss"] == np.asarray(run.result.metrics["policy_loss"])[r["seed"], update - 1]


def test_shares_in_pieces_log_the_same_updates_and_seeds(trained, monkeypatch, tmp_path):
    """The fixture's library run again with one update per piece (each host thread's share runs
    6 executions): the logger sees updates 2, 4, 6 for seeds 0 and 1, with the result's values,
    and the result matches the fixture's run (one piece per share)."""
    import importlib

    config, ref, *_ = trained
    if runs.num_streams(2) < 2:
        pytest.skip("one usable core: the seeds run as one vmap, in one piece")
    monkeypatch.setattr(importlib.import_module("fusedrl.streams"), "STREAM_PIECE_UPDATES", 1)
    recorder = Recorder()
    run = runs.train_run(config, tmp_path / "pieces", num_seeds=2, eval_episodes=4, progress_every=2,
                         loggers=[recorder], progress_file=io.StringIO())
    assert [u for u, _ in recorder.calls] == [2, 4, 6]
    for update, rows in recorder.calls:
        assert [r["seed"] for r in rows] == [0, 1]
        for r in rows:
            assert r["policy_loss"] == np.asarray(run.result.metrics["policy_loss"])[r["seed"], update - 1]
    for name, value in ref.result.metrics.items():
        np.testing.assert_allclose(run.result.metrics[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


def test_monitor_regroups_calls_arriving_in_any_order():
    rec = Recorder()
    m = Monitor(num_seeds=3, batch_size=10, loggers=[rec])
    for update, seed in [(1, 2), (1, 0), (2, 1), (1, 1), (2, 2), (2, 0)]:
        m({"env_steps": np.int32(10 * update), "seed": np.int32(seed), "episode_return": np.float32(seed)})
    assert [(u, [r["seed"] for r in rows]) for u, rows in rec.calls] == [(1, [0, 1, 2]), (2, [0, 1, 2])]


def test_num_streams_splits_seeds_evenly_over_the_cores(monkeypatch):
    import importlib

    streams_module = importlib.import_module("fusedrl.streams")
    monkeypatch.setattr(streams_module, "usable_cores", lambda: 4)
    assert [runs.num_streams(n) for n in (1, 2, 3, 4, 6, 8, 9)] == [1, 2, 3, 4, 3, 4, 3]
    monkeypatch.setattr(streams_module, "usable_cores", lambda: 2)
    assert [runs.num_streams(n) for n in (1, 2, 3, 8)] == [1, 2, 1, 2]


def test_seeds_split_over_threads_train_as_the_single_vmap(trained):
    """Two streams (one seed per host thread) against one vmap of both seeds: the same runs up to
    float32 rounding (the two programs are compiled for different batch sizes). The programs have
    the fixture's progress interval, so one of them is already compiled; with no monitor active
    their callbacks are dropped."""
    config = trained[0]
    every = int(RUN_ARGS[RUN_ARGS.index("--progress-every") + 1])
    keys = jax.random.split(jax.random.key(3), 2)
    out = {}
    for streams in (2, 1):
        train, run, _ = runs.compiled_run(config, 2, every, streams)
        out[streams] = run(keys, train.default_hparams())
    for name, value in out[1].metrics.items():
        assert value.shape == (2, config.num_updates), name
        np.testing.assert_allclose(out[2].metrics[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
    for a, b in zip(jax.tree.leaves(out[2].params), jax.tree.leaves(out[1].params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert not np.allclose(out[1].metrics["policy_loss"][0], out[1].metrics["policy_loss"][1])
    with pytest.raises(ValueError, match="must divide num_seeds"):
        runs.compiled_run(config, 3, 0, 2)


# ------------------------------------------------------------------------------- run folder
def test_run_folder_contents(trained):
    config, run, _, run_dir, out, err = trained
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == [".lock", "checkpoint", "config.json", "learning_curve.png", "metrics.csv",
                     "summary.json"]
    assert (run_dir / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(int(r["update"]), int(r["seed"])) for r in rows] == [(u, s) for u in range(1, 7) for s in (0, 1)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and len(summary["eval_return_per_seed"]) == 2
    timings = ("compile_seconds", "train_seconds", "eval_seconds", "sps")
    assert {k: v for k, v in summary.items() if k not in timings} == {
        k: v for k, v in run.summary.items() if k not in timings
    }
    # The summary table and the progress lines.
    assert "mean" in out and "greedy return" in out and "compile" in out
    assert "update 6/6" in err and "SPS" in err


def test_config_file_round_trip(trained, tmp_path):
    config, _, _, run_dir, *_ = trained
    args = cli.build_parser().parse_args(["train", "--config", str(run_dir / "config.json")])
    again, options = cli.resolve(args)
    assert again == config
    assert (options.num_seeds, options.eval_episodes, options.progress_every) == (2, 4, 2)
    # CLI flags win over the file; a flat TOML file of PPOConfig fields works too.
    args = cli.build_parser().parse_args(
        ["train", "--config", str(run_dir / "config.json"), "--set", "lr=1e-3", "--num-seeds", "3"]
    )
    changed, options = cli.resolve(args)
    assert changed == config.replace(lr=1e-3) and options.num_seeds == 3
    for name in ("c.toml", "C.TOML"):  # read as TOML whatever the suffix's case, not refused as JSON
        toml = tmp_path / name
        toml.write_text('env_id = "Pendulum-v1"\nhidden_sizes = [8, 8]\nnormalize_obs = true\n')
        got, _ = cli.resolve(cli.build_parser().parse_args(["train", "--config", str(toml)]))
        assert got == PPOConfig(env_id="Pendulum-v1", hidden_sizes=(8, 8), normalize_obs=True)
    # The run folder itself: named as a folder, with its config.json, not "does not exist".
    with pytest.raises(cli.CLIError, match=f"is a folder; its run's config is {re.escape(str(run_dir))}"):
        cli.resolve(cli.build_parser().parse_args(["train", "--config", str(run_dir)]))


def test_existing_run_folder_is_refused_then_overwritten(run_cli, trained):
    config, _, _, run_dir, *_ = trained
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}
    code, _, err = run_cli("train", "--env", "CartPole-v1", *TINY_ARGS, *RUN_ARGS, "--out", run_dir)
    assert code == 2 and "already exists" in err and "--overwrite" in err
    assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()} == before
    code, out, err = run_cli("train", "--env", "CartPole-v1", *TINY_ARGS, *RUN_ARGS, "--out", run_dir,
                             "--overwrite")
    assert code == 0, err
    assert json.loads((run_dir / "summary.json").read_text())["compile_seconds"] == 0.0  # program reused


# ----------------------------------------------------------------------------- evaluate/load
def test_evaluate_command(run_cli, trained):
    *_, run_dir, _, _ = trained
    code, out, err = run_cli("evaluate", run_dir, "--episodes", "4")
    assert code == 0, err
    assert "seed   0" in out and "seed   1" in out and "mean" in out
    code, _, err = run_cli("evaluate", run_dir.parent / "missing")  # no such folder: said so
    assert code == 2 and f"{run_dir.parent / 'missing'} does not exist." in err
    (run_dir.parent / "not-a-run").mkdir(exist_ok=True)  # a folder, but not a run's
    code, _, err = run_cli("evaluate", run_dir.parent / "not-a-run")
    assert code == 2 and "config.json is missing" in err


def test_default_evaluate_reproduces_the_summary(run_cli, trained):
    *_, run_dir, _, _ = trained
    summary = json.loads((run_dir / "summary.json").read_text())
    code, out, err = run_cli("evaluate", run_dir)
    assert code == 0, err
    assert f"over {summary['eval_episodes']} episodes per seed" in out
    for i, r in enumerate(summary["eval_return_per_seed"]):
        assert f"seed {i:>3}  {r:10.1f}" in out, (r, out)
    assert f"mean      {summary['eval_return_mean']:10.1f}" in out, out
    assert summary["eval_seed"] == summary["seed"] + 1
    got = runs.evaluate_run(run_dir)
    np.testing.assert_allclose(got["per_seed"], summary["eval_return_per_seed"], atol=1e-3)
    assert got["update"] == got["num_updates"] == summary["num_updates"] and "not finished" not in out


def test_a_saved_run_is_evaluated_by_the_program_that_evaluated_its_fresh_result(trained, monkeypatch):
    # Evaluating a run again from its folder (`fusedrl evaluate`, `evaluate_run`) compiled the
    # evaluation again (1.4 s to 2.5 s on this project's CPU): the restored result had no metrics,
    # and its env params were arrays of the dtypes training used where the fresh result's were
    # weakly typed, so the two did not share a signature.
    from fusedrl import evaluation

    config, run, *_ = trained
    options = runs.load_run_config(run.path)[1]
    real, traces = evaluation._evaluate_any, []

    def counted(*args, **kwargs):
        traces.append("traced")
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "_evaluate_any", counted)
    evaluation._EVALUATORS.clear()
    try:
        fresh = runs.evaluate_seeds(config, run.result, runs.eval_key(options), options.eval_episodes,
                                    max_steps=runs.EVAL_MAX_STEPS)
        again = runs.evaluate_run(run.path)
    finally:
        evaluation._EVALUATORS.clear()  # no program built on `counted` outlives this test
    assert len(traces) == 1, "the restored result was evaluated by a program of its own"
    np.testing.assert_array_equal(again["per_seed"], fresh.mean(axis=1))


@pytest.mark.slow
def test_evaluate_sampled_takes_the_policys_samples(run_cli, trained):
    # `--sampled`: the returns fusedrl.evaluate(..., greedy=False) gives with the same key.
    import fusedrl
    from fusedrl import checkpoint as ckpt

    *_, run_dir, _, _ = trained
    config, options = runs.load_run_config(run_dir)
    _, state, hparams, _ = ckpt.restore(run_dir / "checkpoint", config)
    result = fusedrl.TrainResult(state=state, metrics={}, hparams=hparams)
    key = jax.random.key(options.seed + 1)
    want = {greedy: np.asarray(fusedrl.evaluate(config, result, key, 8, greedy=greedy)).mean(axis=1)
            for greedy in (True, False)}
    assert not np.allclose(want[True], want[False])  # the two tell apart on this briefly trained agent
    code, out, err = run_cli("evaluate", run_dir, "--episodes", 8, "--sampled")
    assert code == 0 and "sampled-action return over 8 episodes per seed" in out, err
    for i, r in enumerate(want[False]):
        assert f"seed {i:>3}  {r:10.1f}" in out, (r, out)
    np.testing.assert_allclose(runs.evaluate_run(run_dir, num_episodes=8)["per_seed"], want[True], atol=1e-4)


def test_evaluate_names_the_bad_field_of_config_json(run_cli, trained, tmp_path):
    import shutil

    *_, run_dir, _, _ = trained
    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad)
    doc = json.loads((bad / "config.json").read_text())
    doc["ppo"]["num_envs"] = "four"
    (bad / "config.json").write_text(json.dumps(doc))
    code, _, err = run_cli("evaluate", bad)
    assert code == 2 and str(bad / "config.json") in err and "num_envs must be an int" in err, err
    assert "Traceback" not in err


def test_load_policy_single_batch_and_seed(trained):
    config, run, _, run_dir, *_ = trained
    obs = np.asarray(jax.random.normal(jax.random.key(0), (5, 4)) * 0.05, np.float32)
    for seed in (0, 1):
        pi = policy.load(run_dir, seed=seed)
        batch = np.asarray(pi.act(obs))
        assert batch.shape == (5,) and set(batch.tolist()) <= {0, 1}
        assert [int(pi.act(o)) for o in obs] == batch.tolist()
        # Greedy = the network's argmax on the raw obs (CartPole's preset has no obs normalisation).
        params = jax.tree.map(lambda x, i=seed: x[i], run.result.state.params)
        logits = pi.trainer.network.apply(params, obs)[0].logits
        np.testing.assert_array_equal(batch, np.argmax(logits, axis=-1))
        # With a key: a sample of the same distribution, drawn with that key.
        sampled = np.asarray(pi.act(obs, jax.random.key(1)))
        dist = pi.trainer.network.apply(params, obs)[0]
        np.testing.assert_array_equal(sampled, dist.sample(jax.random.key(1)))
        assert not np.array_equal(sampled, batch)  # a sample, not the mode: a real check
    # Params replaced after the first act are the ones used: not constants of the first trace.
    head = pi.params["params"]["actor_head"]
    for bias, action in (([100.0, -100.0], 0), ([-100.0, 100.0], 1)):
        pi.params["params"]["actor_head"] = {**head, "bias": jnp.array(bias)}
        assert np.asarray(pi.act(obs)).tolist() == [action] * 5
    with pytest.raises(IndexError, match="seeds 0..1"):
        policy.load(run_dir, seed=2)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        policy.load(run_dir).act(np.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(4,\) or a batch .*got \(2, 3\)"):
        policy.load(run_dir).act(np.zeros((2, 3)))


def test_load_checks_the_checkpoint_against_the_run_folders_config(trained, tmp_path):
    import shutil

    from fusedrl.checkpoint import CheckpointError

    *_, run_dir, _, _ = trained
    edited = tmp_path / "edited"
    shutil.copytree(run_dir, edited)
    doc = json.loads((edited / "config.json").read_text())
    doc["ppo"]["gamma"] = 0.5
    (edited / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=r"gamma: checkpoint has 0\.99, expected 0\.5"):
        policy.load(edited)


@pytest.mark.slow
def test_loaded_policy_normalises_observations_as_training_did(tmp_path):
    # Pendulum with normalize_obs: greedy = the network's mode on observations normalised with the
    # run's frozen statistics (the wrapper's epsilon and clip), clipped to the run's action space.
    from fusedrl.envs import wrappers as W

    config = PPOConfig(env_id="Pendulum-v1", num_envs=2, num_steps=16, total_timesteps=2 * 16 * 2,
                       num_minibatches=2, update_epochs=1, hidden_sizes=(8,), normalize_obs=True,
                       env_params={"max_torque": 4.0})  # the run's action bounds: +-4, not +-2
    run = runs.train_run(config, tmp_path / "run", eval_episodes=1, progress_file=io.StringIO())
    pi = policy.load(tmp_path / "run")
    # Greedy torques beyond 2 (an actor bias of 3), so clipping to the default bounds would show.
    head = pi.params["params"]["actor_head"]
    pi.params["params"]["actor_head"] = {**head, "bias": head["bias"] + 3.0}
    obs = np.asarray(jax.random.normal(jax.random.key(0), (64, 3)) * 3.0, np.float32)
    state = jax.tree.map(lambda x: x[0], run.result.state)
    stats = pi.trainer.obs_stats(state, run.result.hparams)
    assert float(jnp.max(jnp.abs(stats.mean))) > 0.01  # the statistics moved: normalising matters
    wrapper = W.find_wrapper(pi.trainer.make_env(run.result.hparams, num_envs=1), W.NormalizeObservation)
    x = stats.normalize(jnp.asarray(obs), epsilon=wrapper.epsilon, clip=wrapper.clip)
    mode = np.asarray(pi.trainer.network.apply(pi.params, x)[0].mode())
    assert np.any(np.abs(mode) > 2.5)
    np.testing.assert_allclose(np.asarray(pi.act(obs)), np.clip(mode, -4.0, 4.0), rtol=1e-6)
    raw = np.asarray(pi.trainer.network.apply(pi.params, jnp.asarray(obs))[0].mode())
    assert not np.allclose(np.clip(raw, -4.0, 4.0), np.clip(mode, -4.0, 4.0))
    # A sweep's run keeps its own env params in hparams (policy.load slices them per run), not in
    # the config: the bounds come from hparams.
    hparams = jax.tree.map(lambda x: x[0] if np.ndim(x) else x, run.result.hparams)
    swept = policy.Policy(config.replace(env_params={}), state.replace(params=pi.params), hparams)
    np.testing.assert_allclose(np.asarray(swept.act(obs)), np.clip(mode, -4.0, 4.0), rtol=1e-6)


def test_loaded_sweep_policy_takes_its_runs_hparams_and_both_action_bounds(tmp_path):
    # A checkpoint of two runs with their own hyperparameters (as a sweep's): seed i's policy uses
    # run i's, here its lr and its action bounds; MountainCarContinuous's min_action makes the Box
    # asymmetric, so clipping must use the low bound, not -high.
    from fusedrl import checkpoint as ckpt
    from fusedrl.train import make_train

    config = PPOConfig(env_id="MountainCarContinuous-v0", num_envs=2, num_steps=8, total_timesteps=16,
                       num_minibatches=1, update_epochs=1, hidden_sizes=(8,))
    train = make_train(config)
    states = jax.jit(jax.vmap(train.init))(jax.random.split(jax.random.key(0), 2))
    base = train.default_hparams()
    hparams = base.replace(lr=jnp.array([1e-3, 3e-4], jnp.float32),
                           env_params=base.env_params.replace(min_action=jnp.array([-1.0, -0.25])))
    ckpt.save(tmp_path / "ckpt", config, states, hparams, num_seeds=2)
    obs = np.zeros((3, 2), np.float32)
    for seed, lr, low in ((0, 1e-3, -1.0), (1, 3e-4, -0.25)):
        for shift, want in ((-3.0, low), (3.0, 1.0)):  # greedy throttle far below, then above, the bounds
            with pytest.warns(RuntimeWarning, match="holds update 0 of 1"):  # untrained states
                pi = policy.load(tmp_path / "ckpt", seed=seed)
            assert float(pi.hparams.lr) == pytest.approx(lr)
            head = pi.params["params"]["actor_head"]
            pi.params["params"]["actor_head"] = {**head, "bias": head["bias"] + shift}
            np.testing.assert_allclose(np.asarray(pi.act(obs)), want, err_msg=f"seed {seed}, shift {shift}")


# -------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "argv, words",
    [
        (["--env", "CartPol-v1"], ["Unknown environment id 'CartPol-v1'", "CartPole-v1"]),
        (["--env", "CartPole-v1", "--set", "lrr=1e-3"], ["unknown field 'lrr'", "Did you mean 'lr'"]),
        (["--env", "CartPole-v1", "--set", "num_envs=four"], ["num_envs expects an integer", "'four'"]),
        (["--env", "CartPole-v1", "--set", "normalize_obs=maybe"], ["normalize_obs expects true or false"]),
        (["--env", "CartPole-v1", "--set", "lr=fast"], ["lr expects a number"]),
        (["--env", "CartPole-v1", "--set", "hidden_sizes=64,x"],
         ["--set hidden_sizes=64,x:", "hidden_sizes expects an integer per layer", "'64,x'"]),
        (["--env", "CartPole-v1", "--set", "hidden_sizes=64 64"],  # not one layer of 6464
         ["hidden_sizes expects an integer per layer, comma-separated", "'64 64'"]),
        (["--env", "CartPole-v1", "--set", "hidden_sizes=64,,64"], ["hidden_sizes expects an integer"]),
        (["--env", "Pendulum-v1", "--set", "g=nan"], ["env_params['g'] must be a number, got NaN"]),
        (["--env", "CartPole-v1", "--set", "env_params.gravity=abc"],
         ["--set env_params.gravity=abc", "gravity expects a number", "'abc'"]),
        (["--env", "CartPole-v1", "--set", "total_timesteps=2048", "--total-timesteps", "4096"],
         ["--set total_timesteps=2048 conflicts with --total-timesteps 4096"]),
        (["--env", "CartPole-v1", "--set", "gamma=1.5"], ["gamma must be in (0, 1]"]),
        (["--env", "CartPole-v1", "--set", "lr"], ["FIELD=VALUE"]),
        (["--env", "CartPole-v1", "--set", "target_kl=small"], ["target_kl expects a number"]),
        (["--env", "CartPole-v1", "--set", "target_kl=0"], ["target_kl must be > 0"]),
        (["--env", "CartPole-v1", "--set", "env_params.gravty=1"], ["gravity"]),
        (["--env", "CartPole-v1", "--num-seeds", "0"], ["num_seeds must be a positive int"]),
        (["--env", "CartPole-v1", "--seed", "-1"], ["--seed", "from 0 to 4294967294, got -1"]),
        (["--env", "CartPole-v1", "--seed", "4294967295"], ["--seed", "to 4294967294, got 4294967295"]),
        (["--env", "CartPole-v1", "--seed", "1.5"], ["--seed", "expected an integer seed, got '1.5'"]),
        ([], ["--env ID"]),
    ],
)
def test_bad_train_input_is_a_clear_error(run_cli, argv, words, tmp_path):
    code, out, err = run_cli("train", *argv, "--out", tmp_path / "run")
    assert code == 2, (out, err)
    for w in words:
        assert w in err, (w, err)
    assert not (tmp_path / "run").exists()  # nothing was created


@pytest.mark.parametrize(
    "doc, words",
    [
        ({"ppo": 3}, ["'ppo' must be a table/object", "got 3 (int)"]),
        ({"ppo": {"env_id": "CartPole-v1"}, "run": 5}, ["'run' must be a table/object", "got 5 (int)"]),
        ({"env_id": "CartPole-v1", "env_params": 5}, ["'env_params' must be a table/object"]),
        ({"env_id": "CartPole-v1", "env_params": "gravity=12"}, ["'env_params' must be a table/object"]),
    ],
)
def test_malformed_config_file_is_a_clear_error(run_cli, doc, words, tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(doc))
    code, out, err = run_cli("train", "--config", tmp_path / "c.json", "--out", tmp_path / "run")
    assert code == 2, (out, err)
    for w in words:
        assert w in err, (w, err)
    assert not (tmp_path / "run").exists()


def test_run_files_are_strict_json(trained, tmp_path):
    # NaN (say, the greedy return after training diverged) is not JSON: jq and JavaScript refuse a
    # file holding it. It is written as null, and inf (max_grad_norm=inf: no clipping) as 1e999,
    # which reads back as inf.
    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))

    runs.write_json(tmp_path / "s.json", {"eval_return_per_seed": [np.float32("nan"), 1.5],
                                          "limits": (float("inf"), -np.inf)})
    assert strict((tmp_path / "s.json").read_text()) == {"eval_return_per_seed": [None, 1.5],
                                                         "limits": [float("inf"), float("-inf")]}
    config = trained[0].replace(max_grad_norm=float("inf"), env_params={"x_threshold": 1e9})
    runs.write_json(tmp_path / "config.json", runs.config_document(config, runs.RunOptions()))
    strict((tmp_path / "config.json").read_text())
    assert runs.load_run_config(tmp_path)[0] == config
    from fusedrl import checkpoint as ckpt

    ckpt.save(tmp_path / "ckpt", config, trained[1].result.state, trained[1].result.hparams, num_seeds=2)
    strict((tmp_path / "ckpt" / "meta.json").read_text())
    assert ckpt.restore(tmp_path / "ckpt", config)[0] == config


def test_metrics_csv_has_a_column_per_metric_with_its_values():
    # [2 seeds, 3 updates] per metric, each value telling its metric, seed and update apart.
    metrics = {name: np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * i
               for i, name in enumerate(METRIC_NAMES)}
    rows = list(csv.DictReader(io.StringIO(format_rows(metrics_to_rows(metrics), header=True))))
    assert len(rows) == 6
    assert set(rows[0]) == {"update", "seed", *METRIC_NAMES}
    for row in rows:
        u, s = int(row["update"]) - 1, int(row["seed"])
        for i, name in enumerate(METRIC_NAMES):
            assert float(row[name]) == 3 * s + u + 10 * i, name


def test_metrics_csv_leaves_episode_cells_empty_before_a_seeds_first_episode():
    # Pendulum's first rows read episode_return 0.0, better than any return it can reach: the
    # metrics' placeholder (episode_length 0) must not reach the CSV as a return.
    metrics = {name: np.ones((2, 3), np.float32) for name in METRIC_NAMES}
    metrics["episode_return"] = np.array([[0.0, -900.0, -800.0], [0.0, 0.0, -700.0]], np.float32)
    metrics["episode_length"] = np.array([[0, 200, 200], [0, 0, 200]], np.float32)
    rows = list(csv.DictReader(io.StringIO(format_rows(metrics_to_rows(metrics), header=True))))
    got = [(r["update"], r["seed"], r["episode_return"], r["episode_length"]) for r in rows]
    assert got == [("1", "0", "", ""), ("1", "1", "", ""), ("2", "0", "-900.0", "200.0"), ("2", "1", "", ""),
                   ("3", "0", "-800.0", "200.0"), ("3", "1", "-700.0", "200.0")]
    assert all(r["policy_loss"] == "1.0" for r in rows)  # the other metrics as they are


def test_csv_logger_appending_to_a_file_writes_the_header_once(tmp_path):
    path = tmp_path / "metrics.csv"
    row = {name: 1.0 for name in METRIC_NAMES}
    for update in (1, 2):  # e.g. a second logger continuing the file
        logger = CSVLogger(path)
        logger.log(update, [{"update": update, "seed": 0, **row}])
        logger.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and lines[0].startswith("update,seed,env_steps")
    assert [r["update"] for r in csv.DictReader(io.StringIO(path.read_text()))] == ["1", "2"]


def test_strict_json_writes_numpy_arrays_as_lists():
    text = strict_json({"per_seed": np.array([1.5, np.nan, np.inf, -np.inf], np.float32), "n": np.int64(3)})
    strict = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert strict == {"per_seed": [1.5, None, float("inf"), float("-inf")], "n": 3}


def test_summary_statistics_are_over_seeds_of_all_their_steps(trained):
    # The std is over the seeds' mean returns (not all episodes); steps/s counts every seed's steps;
    # the final training return is the last update's (None for a seed with no episode yet).
    config, run, *_ = trained
    s = run.summary
    per_seed = np.asarray(s["eval_return_per_seed"])
    returns = runs.evaluate_seeds(config, run.result, runs.eval_key(runs.RunOptions()), 4)
    np.testing.assert_allclose(per_seed, returns.mean(axis=1), atol=1e-3)  # each seed's own mean
    assert s["eval_return_std"] == pytest.approx(per_seed.std(), abs=2e-3)
    assert s["eval_return_mean"] == pytest.approx(per_seed.mean(), abs=2e-3)
    assert s["train_seconds"] > 0
    ratio = s["sps"] / (s["env_steps_per_seed"] * s["num_seeds"] / s["train_seconds"])
    assert 0.7 < ratio < 1.4, ratio  # train_seconds is rounded to 1 ms; one seed's steps would be 0.5
    m = {k: np.asarray(run.result.metrics[k]) for k in ("episode_return", "episode_length")}
    last = {k: v[:, -1] for k, v in m.items()}
    want = [round(float(x), 3) if e else None
            for x, e in zip(last["episode_return"], has_episode(last), strict=True)]
    assert s["final_train_return_per_seed"] == want and any(w is not None for w in want)
    assert not np.array_equal(m["episode_return"][:, -1], m["episode_return"][:, -2])  # tells them apart


def test_stop_guard_is_on_when_the_only_callback_is_the_last_update():
    # progress_every == num_updates: one callback, at the end; the first Ctrl-C must still wait
    # for it (a clean stop), not reach the handler installed before.
    hits = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: hits.append(signum))
    try:
        monitor = Monitor(1, 10)
        with run_driver.stop_guard(monitor, 5, 5):
            os.kill(os.getpid(), signal.SIGINT)
        assert monitor.stop_requested and not hits
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_shares_of_several_seeds_number_their_seeds_from_the_shares_first(monkeypatch):
    # 4 seeds on 2 host threads: 2 seeds per share; the logger sees seeds 0..3 at every update.
    monkeypatch.setattr(run_driver, "num_streams", lambda num_seeds: 2)
    recorder = Recorder()
    config = PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=16, total_timesteps=2 * 16 * 3,
                       num_minibatches=2, update_epochs=1, hidden_sizes=(8,))
    run = runs.train_run(config, None, num_seeds=4, eval_episodes=1, progress=False, progress_every=1,
                         loggers=[recorder])
    assert run.summary["streams"] == 2
    assert [u for u, _ in recorder.calls] == [1, 2, 3]
    for update, rows in recorder.calls:
        assert [r["seed"] for r in rows] == [0, 1, 2, 3]
        for r in rows:
            assert r["policy_loss"] == np.asarray(run.result.metrics["policy_loss"])[r["seed"], update - 1]


def test_set_parses_optional_numbers():
    from fusedrl.cli import parse_overrides

    parsed = parse_overrides(["target_kl=0.02", "log_std_init=-0.5"])
    assert parsed == {"target_kl": 0.02, "log_std_init": -0.5}
    assert parse_overrides(["target_kl=none"]) == {"target_kl": None}


def test_set_refuses_two_values_for_one_field(run_cli):
    from fusedrl._argtypes import UsageError, parse_overrides

    with pytest.raises(UsageError, match=r"--set lr=1e-3 and --set lr=3e-4 give lr two values"):
        parse_overrides(["lr=1e-3", "ent_coef=0.01", "lr=3e-4"])
    # An env param by its bare name and by env_params.NAME is one field.
    with pytest.raises(UsageError, match=r"give env_params.gravity two values"):
        parse_overrides(["gravity=12", "env_params.gravity=15"], {"gravity": 9.8})
    # The same value twice is harmless: kept, not an error.
    assert parse_overrides(["lr=1e-3", "lr=0.001"]) == {"lr": 0.001}
    code, _, err = run_cli("train", "--env", "CartPole-v1", "--set", "gamma=0.9", "--set", "gamma=0.99")
    assert code == 2 and "give gamma two values; give each field once" in err


def test_flat_config_file_without_env_id_says_so(run_cli, tmp_path):
    flat = tmp_path / "flat.json"
    flat.write_text('{"lr": 0.001}')
    code, _, err = run_cli("train", "--config", flat, "--out", tmp_path / "run")
    assert code == 2 and f"config file {flat} has no env_id" in err and "--env" in err
    assert not (tmp_path / "run").exists()


SWEEP_SETTINGS = ["--set", "target_kl=none", "--set", "normalize_obs=on", "--set", "hidden_sizes=16,16",
                  "--set", "gravity=12", "--set", "env_params.max_steps_in_episode=1e2"]


def test_train_and_sweep_parse_set_alike():
    from fusedrl import sweep_cli

    train_args = cli.build_parser().parse_args(["train", "--env", "CartPole-v1", *SWEEP_SETTINGS])
    sweep_args = cli.build_parser().parse_args(["sweep", "--env", "CartPole-v1", *SWEEP_SETTINGS])
    config, _ = cli.resolve(train_args)
    assert sweep_cli.build_config(sweep_args) == config
    assert config.target_kl is None and config.normalize_obs and config.hidden_sizes == (16, 16)
    assert dict(config.env_params) == {"gravity": 12.0, "max_steps_in_episode": 100}
    assert isinstance(config.env_params["gravity"], float)  # typed like the env's default


@pytest.mark.parametrize("algo", ["a2c", "reinforce"])
def test_sweep_takes_algo_as_train_does(run_cli, algo):
    # The same --algo and --set give the same config (the algorithm's class and preset) in both commands,
    # and a field the algorithm lacks is the same error, naming the field and why.
    from fusedrl import sweep_cli
    from fusedrl.train.config import config_class

    argv = ["--env", "CartPole-v1", "--algo", algo, "--set", "hidden_sizes=16", "--set", "gravity=12"]
    config, _ = cli.resolve(cli.build_parser().parse_args(["train", *argv]))
    swept = sweep_cli.build_config(cli.build_parser().parse_args(["sweep", *argv]))
    assert type(swept) is config_class(algo) and swept == config
    for command in ("train", "sweep"):
        code, _, err = run_cli(command, "--env", "CartPole-v1", "--algo", algo, "--set", "clip_eps=0.1")
        name = {"a2c": "A2C", "reinforce": "REINFORCE"}[algo]
        assert code == 2 and "clip_eps" in err and f"{name} has no clipping" in err, (command, err)


@pytest.mark.slow
def test_sweep_cli_runs_another_algorithm_and_refuses_its_missing_axes(run_cli, tmp_path):
    tiny = ["--env", "CartPole-v1", "--set", "num_envs=2", "--set", "num_steps=8", "--total-timesteps", "32",
            "--set", "hidden_sizes=8", "--progress-every", "0", "--no-plots"]
    code, _, err = run_cli("sweep", "--algo", "a2c", *tiny, "--grid", "lr=1e-3,7e-3", "--out", tmp_path / "s")
    assert code == 0, err
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert doc["algo"] == "a2c" and "rmsprop_alpha" in doc["config"] and "clip_eps" not in doc["config"]
    assert doc["axes"] == {"seed": [0], "lr": [1e-3, 7e-3]}
    assert "sweep CartPole-v1 (a2c)" in err
    # A PPO-only axis is refused before anything compiles, naming it and the algorithm's sweepable fields.
    code, _, err = run_cli("sweep", "--algo", "reinforce", *tiny, "--grid", "gae_lambda=0.9,0.95",
                           "--out", tmp_path / "r")
    assert code == 2 and "unknown sweep axis 'gae_lambda'" in err and "vf_coef" in err, err
    assert "Traceback" not in err and not (tmp_path / "r").exists()
    code, _, err = run_cli("sweep", "--algo", "a2c", "--env", "gymnasium:CartPole-v1", "--out", tmp_path)
    assert code == 2 and "fusedrl train --env gymnasium:CartPole-v1 --algo a2c" in err, err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--set", "masspole=abc"], ["--set masspole=abc", "masspole expects a number", "'abc'"]),
        (["--set", "total_timesteps=2048", "--total-timesteps", "4096"],
         ["--set total_timesteps=2048 conflicts with --total-timesteps 4096"]),
        (["--set", "hidden_sizes=64,a"], ["--set hidden_sizes=64,a:", "'64,a'"]),
        (["--seed", "4294967296"], ["--seed", "from 0 to 4294967294, got 4294967296"]),
    ],
)
def test_bad_sweep_settings_are_usage_errors(run_cli, argv, words, tmp_path):
    code, out, err = run_cli("sweep", "--env", "CartPole-v1", *argv, "--out", tmp_path / "sweep")
    assert code == 2, (out, err)
    for w in words:
        assert w in err, (w, err)
    assert "Traceback" not in err and not (tmp_path / "sweep").exists()


def test_sweep_refuses_an_out_file_and_a_gymnasium_env(run_cli, tmp_path):
    taken = tmp_path / "file"
    taken.write_text("")
    code, _, err = run_cli("sweep", "--env", "CartPole-v1", "--out", taken)
    assert code == 2 and "exists and is not a directory" in err and "--out" in err
    code, _, err = run_cli("sweep", "--env", "gymnasium:CartPole-v1", "--out", tmp_path / "sweep")
    assert code == 2, err
    for w in ["sweeps need a JAX environment", "--env CartPole-v1",
              "fusedrl train --env gymnasium:CartPole-v1"]:
        assert w in err, (w, err)
    assert not (tmp_path / "sweep").exists()


def test_sweep_overwrite_replaces_an_earlier_sweeps_outputs_only(run_cli, tmp_path):
    out = tmp_path / "sweep"
    out.mkdir()
    for name in ("sweep.json", "curves_by_lr.png", "notes.txt"):  # an earlier sweep over lr, a user file
        (out / name).write_text("old")
    tiny = ["--set", "num_envs=2", "--set", "num_steps=8", "--total-timesteps", "32", "--set",
            "num_minibatches=1", "--set", "update_epochs=1", "--set", "hidden_sizes=8",
            "--progress-every", "0", "--no-plots"]
    code, _, err = run_cli("sweep", "--env", "CartPole-v1", *tiny, "--grid", "gamma=0.9,0.99", "--out", out)
    assert code == 2 and "pass --overwrite" in err
    code, _, err = run_cli("sweep", "--env", "CartPole-v1", *tiny, "--grid", "gamma=0.9,0.99", "--out", out,
                           "--overwrite")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["curves.npz", "notes.txt", "summary.csv", "sweep.json",
                                                      "table.csv"]  # no plot of the lr sweep left
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["axes"] == {"seed": [0], "gamma": [0.9, 0.99]}
    # A grid's values are its axes; the base config's gamma (no run's) is left out as null.
    assert doc["values"] == {} and doc["config"]["gamma"] is None and doc["config"]["lr"] == 2.5e-4
    other = tmp_path / "other"  # not a sweep's folder: --overwrite does not write into it
    other.mkdir()
    (other / "data.csv").write_text("mine")
    code, _, err = run_cli("sweep", "--env", "CartPole-v1", *tiny, "--grid", "gamma=0.9,0.99", "--out", other,
                           "--overwrite")
    assert code == 2 and "has no sweep.json" in err
    assert [p.name for p in other.iterdir()] == ["data.csv"]


def test_help_and_envs(run_cli):
    code, out, _ = run_cli("--help")  # argparse exits with status 0
    assert code == 0 and "usage: fusedrl" in out and "train" in out
    code, out, _ = run_cli("envs")
    assert code == 0
    assert "CartPole-v1" in out and "Discrete(2)" in out and "Box((3,), -8..8)" in out
    # The preset column does not depend on --gymnax (which only adds the gymnax envs' spaces).
    from fusedrl.envs import suites
    from fusedrl.train.presets import PRESETS

    listed = {line.split()[0] for line in out.splitlines()[1:] if line and not line.startswith("(")}
    marked = {line.split()[0] for line in out.splitlines()[1:] if line.endswith("  yes")}
    assert marked == {i for i in PRESETS if i in listed} >= {
        "CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0",
        "gymnax:Breakout-MinAtar", "gymnax:SpaceInvaders-MinAtar", "gymnax:MemoryChain-bsuite"}
    for prefix, suite in suites.SUITES.items():  # an installed suite's ids, else its install command
        if suites.is_installed(prefix):
            assert f"{prefix}:" in " ".join(listed), prefix
        else:
            assert f"({prefix}: {suite.about}; not installed: {suite.install})" in out


# ------------------------------------------------------------------------------------ Ctrl-C
def test_ctrl_c_keeps_config_and_whole_rows(run_cli, trained, interrupt_at, tmp_path):
    """A KeyboardInterrupt raised from inside the jitted run (where a real Ctrl-C lands on CPU)."""
    interrupt_at(4)
    run_dir = tmp_path / "run"
    code, _, err = run_cli("train", "--env", "CartPole-v1", *TINY_ARGS, *RUN_ARGS, "--out", run_dir)
    assert code == 130 and "keeps config.json metrics.csv summary.json (the metrics logged so far)." in err
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == [".lock", "config.json", "metrics.csv", "summary.json"]
    config, options = runs.load_run_config(run_dir)
    assert config == trained[0] and options.num_seeds == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["updates_logged"] == 4
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["update"]), int(r["seed"])) for r in rows] == [(2, 0), (2, 1), (4, 0), (4, 1)]
    assert all(None not in r.values() and "" not in r.values() for r in rows)  # whole rows only


def test_ctrl_c_message_names_only_the_files_kept(run_cli, monkeypatch, tmp_path):
    def interrupted_early(config, out, **kwargs):  # e.g. Ctrl-C while compiling: no metrics yet
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "train_run", interrupted_early)
    code, _, err = run_cli("train", "--env", "CartPole-v1", "--out", tmp_path / "run")
    assert code == 130 and err.rstrip().endswith("keeps config.json."), err


def test_an_error_in_one_share_of_the_seeds_is_not_reported_as_an_interrupt(trained, interrupt_at, tmp_path):
    """With the seeds split over threads (2 cores), a logger's error in one share does not stop
    the other as if Ctrl-C had been pressed, and surfaces as itself."""
    interrupt_at(2, ValueError("logger broke"))
    longer = trained[0].replace(total_timesteps=4 * 16 * 200)  # the other share is still running
    with pytest.raises(BaseException) as info:
        runs.train_run(longer, tmp_path / "run", num_seeds=2, eval_episodes=4, progress_every=2,
                       progress_file=io.StringIO())
    assert not isinstance(info.value, KeyboardInterrupt) and "logger broke" in str(info.value)


def test_a_failed_run_says_so_in_its_summary(trained, monkeypatch, tmp_path):
    """Any error other than Ctrl-C, in training or after it: summary.json says "failed" with the
    error's type and message, and the error surfaces as itself."""

    class Broken(Recorder):
        def log(self, update, rows):
            raise RuntimeError("logger broke")

    config = trained[0]
    with pytest.raises(Exception, match="logger broke") as info:  # may come wrapped by jax
        runs.train_run(config, tmp_path / "train", num_seeds=2, eval_episodes=4, progress_every=2,
                       loggers=[Broken()], progress_file=io.StringIO())
    summary = json.loads((tmp_path / "train" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_while"] == "training"
    assert summary["error"]["type"] == type(info.value).__name__
    assert "logger broke" in summary["error"]["message"]

    def broken_evaluate(*args, **kwargs):
        raise ValueError("evaluation broke")

    monkeypatch.setattr(run_report, "evaluate", broken_evaluate)
    with pytest.raises(ValueError, match="evaluation broke"):
        runs.train_run(config, tmp_path / "eval", num_seeds=2, eval_episodes=4, progress_every=2,
                       progress_file=io.StringIO())
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_while"] == "evaluating"
    assert summary["error"] == {"type": "ValueError", "message": "evaluation broke"}
    assert (tmp_path / "eval" / "checkpoint").is_dir()  # the training's results were kept


def test_first_sigint_stops_at_the_next_callback():
    rec = Recorder()
    m = Monitor(num_seeds=1, batch_size=10, loggers=[rec])
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN, not the default, under nohup or `cmd &`
    with interrupt_guard(m):
        os.kill(os.getpid(), signal.SIGINT)  # handled: no KeyboardInterrupt here
        assert m.stop_requested and not rec.calls
        with pytest.raises(KeyboardInterrupt):
            m({"env_steps": np.int32(10)})
    assert m.interrupted and not rec.calls  # nothing was written after the request
    assert signal.getsignal(signal.SIGINT) is before  # the guard put back what it found


# ------------------------------------------------------------------------- optional loggers
def test_optional_loggers_log_per_seed(monkeypatch, tmp_path, tensorboard_scalars):
    """TensorBoard (tensorboardX, its event file read back) and W&B (a stand-in recording its calls):
    one curve per seed."""
    wandb_logs = []

    class WandbRun:
        def __init__(self, name):
            self.name = name

        def log(self, payload, step):
            wandb_logs.append((self.name, payload["episode_return"], step))

        def finish(self):
            pass

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kw: WandbRun(kw["name"])))
    rows = [{"update": 1, "seed": s, "env_steps": 64, "episode_return": 10.0 + s} for s in (0, 1)]
    for logger in (TensorBoardLogger(tmp_path), WandbLogger("proj", name="run", num_seeds=2)):
        logger.log(1, rows)
        logger.close()
    assert ("seed_1/episode_return", 11.0, 64) in tensorboard_scalars(tmp_path)
    assert wandb_logs == [("run-seed0", 10.0, 64), ("run-seed1", 11.0, 64)]


def test_a_logger_that_fails_to_start_closes_the_others_and_says_so(trained, tmp_path):
    class Closing(Recorder):
        closed = False

        def close(self):
            self.closed = True

    started = Closing()

    def broken_factory(path):  # as a wandb.init without network would
        raise ConnectionError("wandb.init failed")

    with pytest.raises(ConnectionError):
        runs.train_run(trained[0], tmp_path / "run", num_seeds=2, progress_every=2,
                       loggers=[lambda path: started, broken_factory], progress_file=io.StringIO())
    assert started.closed
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_while"] == "starting loggers"
    assert summary["error"] == {"type": "ConnectionError", "message": "wandb.init failed"}


def test_wandb_older_than_create_new_runs_is_refused_and_failed_inits_are_finished(run_cli, monkeypatch,
                                                                                   tmp_path):
    finished = []

    class Run:
        def __init__(self, name):
            self.name = name

        def finish(self):
            finished.append(self.name)

    def init(**kw):
        if kw["name"].endswith("seed2"):
            raise ConnectionError("no network")
        return Run(kw["name"])

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init, __version__="0.19.9"))
    code, _, err = run_cli("train", "--env", "CartPole-v1", "--wandb-project", "p", "--out", tmp_path / "r")
    assert code == 2 and "needs wandb >= 0.19.10" in err and "found 0.19.9" in err
    assert not (tmp_path / "r").exists()
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init, __version__="0.19.10"))
    with pytest.raises(ConnectionError):
        WandbLogger("p", name="run", num_seeds=3)
    assert finished == ["run-seed0", "run-seed1"]  # the runs already started are not left open


def test_missing_optional_logger_is_a_clear_cli_error(run_cli, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` fail
    code, _, err = run_cli("train", "--env", "CartPole-v1", "--wandb-project", "p", "--out", tmp_path / "r")
    assert code == 2 and "pip install wandb" in err
    assert not (tmp_path / "r").exists()


def test_tensorboard_run_writes_per_seed_scalars(run_cli, trained, tmp_path, tensorboard_scalars):
    run_dir = tmp_path / "tb"
    code, _, err = run_cli("train", "--env", "CartPole-v1", *TINY_ARGS, *RUN_ARGS, "--out", run_dir,
                           "--tensorboard")
    assert code == 0, err
    assert (run_dir / "tensorboard").is_dir() and (run_dir / "checkpoint").is_dir()
    written = [(tag, step) for tag, _, step in tensorboard_scalars(run_dir / "tensorboard")]
    assert ("seed_0/episode_return", 128) in written and ("seed_1/episode_return", 384) in written


def test_sweep_and_profile_subcommands_are_wired(capsys):
    from fusedrl.cli import main

    with pytest.raises(SystemExit) as e:
        main(["sweep", "--help"])
    assert e.value.code == 0 and "--grid" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["profile", "--help"])
    assert e.value.code == 0 and "--mode" in capsys.readouterr().out
    assert main(["sweep", "--env", "CartPole-v1", "--grid", "num_envs=4,8"]) == 2
    assert "cannot sweep 'num_envs': it is a static field" in capsys.readouterr().err


def test_sweep_usage_errors_come_from_the_check_and_later_errors_keep_their_traceback(run_cli,
        tmp_path, monkeypatch):
    sweep_mod = importlib.import_module("fusedrl.sweeps.program")

    # Bad input: refused by check_sweep, before anything compiles (a usage error, exit 2).
    def no_compile(*args, **kwargs):
        raise AssertionError("compiled despite bad input")

    monkeypatch.setattr(sweep_mod, "_program", no_compile)
    code, _, err = run_cli("sweep", "--env", "CartPole-v1", "--grid", "lr=1e-3,-1",
                           "--out", tmp_path / "bad")
    assert code == 2 and "lr" in err and "Traceback" not in err, err
    # An error once the sweep runs is no usage error: it propagates, traceback and all.
    def fails_late(*args, **kwargs):
        raise ValueError("boom")

    monkeypatch.setattr(sweep_mod, "_program", fails_late)
    with pytest.raises(ValueError, match="boom"):
        run_cli("sweep", "--env", "CartPole-v1", *SWEEP_SETTINGS, "--grid", "lr=1e-3,3e-4",
                "--out", tmp_path / "late")


def test_summary_says_when_no_training_episode_ended(tmp_path):
    # MountainCar's episodes last 200 steps; 48 steps per env end none, so there is no training
    # return to report (the metrics' 0.0 with episode_length 0 is no episode's return).
    config = PPOConfig(env_id="MountainCar-v0", num_envs=2, num_steps=16, total_timesteps=2 * 16 * 3,
                       num_minibatches=2, update_epochs=1, hidden_sizes=(8,))
    run = runs.train_run(config, tmp_path / "run", eval_episodes=2, progress_every=1,
                         progress_file=io.StringIO())
    assert run.summary["final_train_return_per_seed"] == [None]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["final_train_return_per_seed"] == [None]
    assert "no episode ended" in runs.summary_table(run.summary)


FIVE_UPDATES = PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=16, total_timesteps=2 * 16 * 5,
                         num_minibatches=2, update_epochs=1, hidden_sizes=(8,))


def test_progress_ends_on_the_last_update_between_callbacks(tmp_path):
    # 5 updates, a callback every 2: the callbacks stop at update 4; the bar still ends at 5/5 and
    # the loggers (TensorBoard, W&B, yours) still get the trained agent's last update.
    config = FIVE_UPDATES
    bar_text, recorder = io.StringIO(), Recorder()
    run = runs.train_run(config, tmp_path / "run", eval_episodes=2, progress_every=2, progress_file=bar_text,
                         loggers=[recorder])
    lines = [ln for ln in bar_text.getvalue().splitlines() if ln.startswith("update ")]
    assert lines[-1].startswith("update 5/5"), lines
    assert [update for update, _ in recorder.calls] == [2, 4, 5]
    last = recorder.calls[-1][1][0]
    assert last["update"] == 5 and last["seed"] == 0
    assert last["policy_loss"] == pytest.approx(float(run.result.metrics["policy_loss"][0, -1]))


@contextlib.contextmanager
def pythons_sigint_handler():
    """Python's own SIGINT handler (KeyboardInterrupt), as in a shell, whatever pytest installed."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ctrl_c_first(function, done: list):
    """`function`, called after a Ctrl-C (a SIGINT to this process, whose handler runs at once);
    `done` gets True when it has run to its end."""
    def ctrl_c_then_call(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        out = function(*args, **kwargs)
        done.append(True)
        return out

    return ctrl_c_then_call


@pytest.mark.parametrize("progress_every", [0, 1000])  # no callback: off, or past the last update
def test_ctrl_c_without_callbacks_interrupts_at_once(progress_every, monkeypatch, tmp_path):
    # The first Ctrl-C asks for a stop at the next callback (interrupt_guard); with none to come it
    # must interrupt as usual, not be held until the run ends as "finished".
    config = FIVE_UPDATES
    compiled = run_driver.compiled_run

    def ctrl_c_as_training_starts(*args, **kwargs):
        train, run, seconds = compiled(*args, **kwargs)

        def run_after_ctrl_c(keys, hparams, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)
            return run(keys, hparams, **kwargs)

        return train, run_after_ctrl_c, seconds

    monkeypatch.setattr(run_driver, "compiled_run", ctrl_c_as_training_starts)
    with pythons_sigint_handler(), pytest.raises(KeyboardInterrupt):
        runs.train_run(config, tmp_path / "run", eval_episodes=2, progress_every=progress_every,
                       progress_file=io.StringIO())
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"


def test_ctrl_c_while_compiling_is_held_until_the_compile_ends(monkeypatch, tmp_path):
    # With jax 0.10.2 a Ctrl-C inside XLA's compile abandons it and the interpreter crashes at exit
    # (progress.hold_interrupt). The Ctrl-C must reach neither the compile nor the code around it.
    done, err = [], io.StringIO()
    monkeypatch.setattr(run_driver, "compiled_run", ctrl_c_first(run_driver.compiled_run, done))
    with pythons_sigint_handler():
        with pytest.raises(KeyboardInterrupt):
            runs.train_run(FIVE_UPDATES, tmp_path / "run", eval_episodes=2, progress_file=err)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    assert done == [True], "the Ctrl-C interrupted the compile"
    assert "Ctrl-C: stopping once compiling ends" in err.getvalue(), err.getvalue()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["updates_logged"] == 0


def test_ctrl_c_while_evaluating_on_device_is_held_until_it_ends(trained, monkeypatch, capsys):
    # Evaluation compiles too: without the hold, 1 of 6 runs of 2 seeds Ctrl-C'd while evaluating
    # crashed at exit (jax 0.10.2).
    config, run, *_ = trained
    done = []
    monkeypatch.setattr(run_report, "evaluate", ctrl_c_first(run_report.evaluate, done))
    with pythons_sigint_handler(), pytest.raises(KeyboardInterrupt):
        runs.evaluate_seeds(config, run.result, jax.random.key(0), 2)
    assert done == [True] and "Ctrl-C: stopping once evaluating ends" in capsys.readouterr().err


def test_sweep_cli_interrupted_exits_130_without_a_folder(run_cli, monkeypatch, tmp_path):
    import importlib

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("fusedrl.sweeps"), "sweep", ctrl_c)
    try:
        code, _, err = run_cli("sweep", "--env", "CartPole-v1", "--out", tmp_path / "sweep")
    except KeyboardInterrupt:  # let through, it would stop pytest itself
        pytest.fail("the sweep command let the KeyboardInterrupt through")
    assert code == 130 and "fusedrl sweep: interrupted" in err and "Traceback" not in err, err
    assert not (tmp_path / "sweep").exists()


# ------------------------------------------------------------------- option handling, no training
def resolve(*argv):
    return cli.resolve(cli.build_parser().parse_args(["train", *map(str, argv)]))


def test_seed_and_run_flags_reach_the_run_options():
    _, options = resolve("--env", "CartPole-v1", "--seed", "5", "--num-seeds", "3", "--eval-episodes", "7",
                         "--progress-every", "4")
    assert (options.seed, options.num_seeds, options.eval_episodes, options.progress_every) == (5, 3, 7, 4)
    _, options = resolve("--env", "CartPole-v1")
    assert (options.seed, options.num_seeds) == (0, 1)


def test_config_file_env_params_are_kept_when_set_adds_one(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"env_id": "CartPole-v1", "env_params": {"gravity": 12.0}}))
    config, _ = resolve("--config", path, "--set", "masscart=2.0")
    assert dict(config.env_params) == {"gravity": 12.0, "masscart": 2.0}
    config, _ = resolve("--config", path, "--set", "gravity=15")  # --set wins over the file
    assert dict(config.env_params) == {"gravity": 15.0}


def test_set_env_id_is_refused_not_ignored():
    with pytest.raises(cli.CLIError, match="use --env to choose the environment"):
        resolve("--env", "CartPole-v1", "--set", "env_id=Pendulum-v1")
    config, _ = resolve("--env", "CartPole-v1", "--set", "env_id=CartPole-v1")  # the same id: harmless
    assert config.env_id == "CartPole-v1"


def test_evaluate_refuses_zero_episodes_before_reading_the_run(run_cli, tmp_path):
    code, _, err = run_cli("evaluate", tmp_path / "missing", "--episodes", "0")
    assert code == 2 and "--episodes must be >= 1, got 0" in err, err


def test_seeds_that_would_repeat_other_seeds_keys_are_refused(run_cli, tmp_path):
    from fusedrl._argtypes import MAX_SEED

    data = lambda s: jax.random.key_data(jax.random.key(s)).tolist()  # noqa: E731
    # Why the bound: JAX keeps a seed modulo 2**32, and a run also uses seed + 1 (its evaluation key).
    assert data(2**32) == data(0) and data(-1) == data(2**32 - 1)
    assert data(MAX_SEED + 1) not in (data(0), data(1)) and data(MAX_SEED + 2) == data(0)
    assert runs.RunOptions(seed=MAX_SEED).seed == MAX_SEED
    for bad in (-1, MAX_SEED + 1, 2**32, True, 1.0):
        with pytest.raises(ValueError, match=r"seed \(--seed\): expected"):
            runs.RunOptions(seed=bad)
    # evaluate's seed is the key's own seed (default: the run's seed + 1, up to MAX_SEED + 1).
    for bad in (-1, MAX_SEED + 2, np.int64(-1)):
        with pytest.raises(ValueError, match=f"seed: expected a seed from 0 to 4294967295, got {bad}"):
            runs.evaluate_run(tmp_path / "missing", seed=bad)
    for good in (MAX_SEED + 1, np.int64(3), np.uint32(3)):  # as jax.random.key takes them: not refused
        with pytest.raises(FileNotFoundError):
            runs.evaluate_run(tmp_path / "missing", seed=good)
    code, _, err = run_cli("evaluate", tmp_path / "missing", "--seed", "-1")
    assert code == 2 and "argument --seed: expected a seed from 0 to 4294967295, got -1" in err, err
    code, _, err = run_cli("evaluate", tmp_path / "missing", "--seed", str(MAX_SEED + 1))
    assert "does not exist" in err and "--seed" not in err, err  # the folder, not the seed
    # A run folder whose config.json holds such a seed names the field and the file.
    runs.write_json(tmp_path / "config.json", runs.config_document(preset("CartPole-v1"), runs.RunOptions()))
    doc = json.loads((tmp_path / "config.json").read_text())
    doc["run"]["seed"] = 2**32
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"config.json is invalid: seed \(--seed\): .* got 4294967296"):
        runs.load_run_config(tmp_path)


@pytest.mark.parametrize("bad, words", [
    ("my_envs", "imports must be a list of module names, got 'my_envs'"),
    (["my_envs.py"], "imports: give a module name as `import` takes it (--import my_envs,"),
    (["pkg/my_envs"], "(--import my_envs, run from the folder that holds my_envs.py)"),
    ([""], "imports: expected a module name (a non-empty string), got ''"),
    ([3], "imports: expected a module name (a non-empty string), got 3"),
])
def test_run_options_imports_are_module_names(run_cli, tmp_path, bad, words):
    assert runs.RunOptions(imports=["a", "b.c"]).imports == ("a", "b.c")  # as JSON gives it back
    with pytest.raises(ValueError) as e:
        runs.RunOptions(imports=bad)
    assert words in str(e.value)
    # Refused when read from a run folder, naming the file, before anything is imported.
    runs.write_json(tmp_path / "config.json", runs.config_document(preset("CartPole-v1"), runs.RunOptions()))
    doc = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**doc, "run": {**doc["run"], "imports": bad}}))
    with pytest.raises(ValueError, match="config.json is invalid: imports") as e:
        runs.load_run_config(tmp_path)
    assert words in str(e.value)
    code, _, err = run_cli("train", "--config", tmp_path / "config.json", "--out", tmp_path / "run")
    assert code == 2 and "config.json is invalid: imports" in err and words in err, err
    assert not (tmp_path / "run").exists()


def test_evaluate_passes_seed_and_episodes_through(run_cli, monkeypatch, tmp_path):
    calls = []

    def fake_evaluate_run(run_dir, num_episodes=None, seed=None, greedy=True, max_steps=runs.EVAL_MAX_STEPS,
                          trust_imports=False):
        calls.append((num_episodes, seed, greedy, max_steps, trust_imports))
        return {"episodes": num_episodes, "per_seed": [1.0], "mean": 1.0, "std": 0.0, "unfinished": 0,
                "diverged_seeds": []}

    monkeypatch.setattr(runs, "evaluate_run", fake_evaluate_run)
    code, out, err = run_cli("evaluate", tmp_path, "--episodes", "3", "--seed", "11")
    assert code == 0, err
    assert calls == [(3, 11, True, runs.EVAL_MAX_STEPS, False)]
    assert "greedy return over 3 episodes per seed" in out
    code, out, err = run_cli("evaluate", tmp_path, "--sampled", "--max-steps", "50", "--trust-imports")
    assert code == 0, err
    assert calls[1:] == [(None, None, False, 50, True)] and "sampled-action return over" in out
    assert "WARNING" not in out


@pytest.mark.parametrize("argv, note", [
    (["--env", "CartPole-v1"], "fusedrl train CartPole-v1 (preset): 1 seed(s)"),
    (["--env", "gymnasium:CartPole-v1"],
     "fusedrl train gymnasium:CartPole-v1 (the preset of CartPole-v1; host bridge: Gymnasium steps"),
    (["--env", "gymnax:Catch-bsuite"], "fusedrl train gymnax:Catch-bsuite (PPOConfig defaults (no preset))"),
])
def test_train_header_names_the_preset_used(run_cli, argv, note, monkeypatch, tmp_path):
    def stop(config, out, **kwargs):  # stop before any work: only the header is printed
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "train_run", stop)
    code, _, err = run_cli("train", *argv, "--out", tmp_path / "run")
    assert code == 130 and note in err, err


def test_default_run_folder_counts_from_2(tmp_path):
    assert cli.default_out("gymnax:Catch-bsuite", tmp_path) == tmp_path / "gymnax_Catch-bsuite"
    (tmp_path / "CartPole-v1").mkdir()
    assert cli.default_out("CartPole-v1", tmp_path) == tmp_path / "CartPole-v1-2"
    (tmp_path / "CartPole-v1-2").mkdir()
    assert cli.default_out("CartPole-v1", tmp_path) == tmp_path / "CartPole-v1-3"


def test_env_flag_uses_the_envs_preset_under_the_set_values():
    # CartPole-v1's preset equals the PPOConfig defaults; Pendulum-v1's does not.
    from fusedrl.train import PPOConfig, preset

    config, _ = resolve("--env", "Pendulum-v1", "--set", "lr=3e-4")
    assert config == preset("Pendulum-v1", lr=3e-4)
    assert config != PPOConfig(env_id="Pendulum-v1", lr=3e-4)


# --------------------------------------------------------------------- sweep outputs and options
SWEEP_TINY = ["--set", "num_envs=2", "--set", "num_steps=16", "--total-timesteps", "128",
              "--set", "num_minibatches=1", "--set", "update_epochs=1", "--set", "hidden_sizes=8",
              "--progress-every", "0"]
SWEEP_ZIP = ["--zip", "gamma=0.9,0.99", "--zip", "gae_lambda=0.8,0.95", "--num-seeds", "2"]




def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def zip_sweeps(run_cli, tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    for seed in (0, 3):
        code, _, err = run_cli("sweep", "--env", "CartPole-v1", *SWEEP_TINY, *SWEEP_ZIP, "--seed", seed,
                               "--out", root / f"s{seed}")
        assert code == 0, err
    return root


def test_zip_sweep_writes_a_plot_per_field_and_a_complete_sweep_json(zip_sweeps):
    out = zip_sweeps / "s3"
    assert sorted(p.name for p in out.iterdir()) == [
        "curves.npz", "curves_by_gae_lambda.png", "curves_by_gamma.png", "summary.csv", "sweep.json",
        "table.csv"]
    doc = json.loads((out / "sweep.json").read_text())
    assert {k: doc[k] for k in ("mode", "dims", "seed", "num_runs")} == {
        "mode": "zip", "dims": ["seed", "trial"], "seed": 3, "num_runs": 4}
    assert doc["axes"] == {"seed": [0, 1], "trial": [0, 1]} and doc["seconds"] > 0
    assert doc["config"]["env_id"] == "CartPole-v1" and doc["config"]["num_envs"] == 2


def test_sweep_json_names_each_trials_values_not_the_base_configs(zip_sweeps):
    # sweep.json's config held the preset's gamma (0.99) and gae_lambda (0.95), which no trial of
    # this zip sweep paired as such, and no trial's values: only table.csv had them.
    doc = json.loads((zip_sweeps / "s0" / "sweep.json").read_text())
    assert doc["config"]["gamma"] is None and doc["config"]["gae_lambda"] is None
    assert doc["values"] == {"gamma": [0.9, 0.99], "gae_lambda": [0.8, 0.95]}
    table = read_csv(zip_sweeps / "s0" / "table.csv")
    for row in table:
        trial = int(row["trial"])
        assert [float(row["gamma"]), float(row["gae_lambda"])] == [doc["values"]["gamma"][trial],
                                                                  doc["values"]["gae_lambda"][trial]]


def test_zip_summary_names_each_trials_values_and_std_is_over_seeds(zip_sweeps):
    out = zip_sweeps / "s0"
    table, summary = read_csv(out / "table.csv"), read_csv(out / "summary.csv")
    assert len(table) == 4 and len(summary) == 2
    for row in summary:
        assert {"gamma", "gae_lambda", "seeds"} <= set(row) and row["seeds"] == "2"
        members = [t for t in table if t["gamma"] == row["gamma"] and t["gae_lambda"] == row["gae_lambda"]]
        assert len(members) == 2
        vals = np.array([float(t["last10_return"]) for t in members])
        assert float(row["last10_return_mean"]) == pytest.approx(vals.mean(), rel=1e-5)
        assert float(row["last10_return_std"]) == pytest.approx(vals.std(), rel=1e-5, abs=1e-6)
    assert {(r["gamma"], r["gae_lambda"]) for r in summary} == {("0.9", "0.8"), ("0.99", "0.95")}


def test_sweep_seed_changes_the_runs(zip_sweeps):
    a = np.load(zip_sweeps / "s0" / "curves.npz")["metric/policy_loss"]
    b = np.load(zip_sweeps / "s3" / "curves.npz")["metric/policy_loss"]
    assert a.shape == b.shape and not np.array_equal(a, b)


@pytest.mark.parametrize("item", ["lr=1e-5:1e-4:1e-3", "lr=log:1:2:3", "lr=uniform:1"])
def test_random_spec_with_the_wrong_number_of_bounds_is_a_usage_error(item):
    with pytest.raises(sweep_cli.SweepCLIError, match="expected LOW:HIGH"):
        sweep_cli.parse_random(item)


def test_negative_progress_every_is_a_usage_error(run_cli, tmp_path):
    code, _, err = run_cli("sweep", "--env", "CartPole-v1", *SWEEP_TINY, "--progress-every", "-1",
                           "--out", tmp_path / "s")
    assert code == 2 and "--progress-every must be >= 0, got -1" in err, err
    assert not (tmp_path / "s").exists()


def test_default_sweep_folder_is_apart_from_train_runs(tmp_path):
    assert sweep_cli.default_out("CartPole-v1", tmp_path) == tmp_path / "sweep-CartPole-v1"
    (tmp_path / "sweep-CartPole-v1").mkdir()
    assert sweep_cli.default_out("CartPole-v1", tmp_path) == tmp_path / "sweep-CartPole-v1-2"


@pytest.mark.slow
def test_import_option_brings_in_the_module_that_registers_a_custom_env(run_cli, tmp_path, monkeypatch):
    # A registered env was out of the CLI's reach: its module is not imported by `fusedrl`.
    from fusedrl.envs import registry

    (tmp_path / "fusedrl_cli_test_envs.py").write_text(
        "import fusedrl\nfrom fusedrl.envs.cartpole import CartPole\n\n\n"
        "class Mine(CartPole):\n    pass\n\n\nfusedrl.register('CliMine-v0', Mine)\n"
    )
    monkeypatch.chdir(tmp_path)  # --import looks in the current directory, as `python -m` does
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    tiny = ["--total-timesteps", 128, "--set", "num_envs=2", "--set", "num_steps=64", "--eval-episodes", 2,
            "--no-progress"]
    try:
        code, _, err = run_cli("train", "--env", "CliMine-v0", "--out", tmp_path / "run", *tiny)
        assert code == 2 and "Unknown environment id 'CliMine-v0'" in err, err
        assert "--import MODULE imports the module that registers it" in err
        code, _, err = run_cli("train", "--import", "no_such_module_here", "--env", "CliMine-v0", *tiny)
        assert code == 2 and "--import no_such_module_here: no module named 'no_such_module_here' here" in err
        imports = ["--import", "fusedrl_cli_test_envs"]
        code, out, err = run_cli("train", *imports, "--env", "CliMine-v0", "--out", tmp_path / "run", *tiny)
        assert code == 0 and "mean" in out, err
        config, options = runs.load_run_config(tmp_path / "run", trust_imports=True)
        assert config.env_id == "CliMine-v0" and options.imports == ("fusedrl_cli_test_envs",)
        code, out, err = run_cli("evaluate", tmp_path / "run", *imports)
        assert code == 0, err
        for path in ["fusedrl_cli_test_envs.py", "./fusedrl_cli_test_envs"]:
            code, _, err = run_cli("envs", "--import", path)
            assert code == 2 and "--import fusedrl_cli_test_envs, run from the folder" in err, err

        def new_process():  # as in a new process: neither the module nor its env
            registry._REGISTRY.pop("CliMine-v0", None)
            sys.modules.pop("fusedrl_cli_test_envs", None)

        # config.json records the module: evaluate and a run from the saved config import it, once
        # trusted (importing runs its code).
        new_process()
        code, out, err = run_cli("evaluate", tmp_path / "run", "--trust-imports")
        assert code == 0 and "mean" in out, err
        new_process()
        loaded = policy.load(tmp_path / "run", trust_imports=True)  # fusedrl.load
        assert loaded.act(np.zeros(4, np.float32)).shape == ()
        new_process()
        code, out, err = run_cli("train", "--config", tmp_path / "run" / "config.json", "--out",
                                 tmp_path / "again", "--no-progress", "--trust-imports")
        assert code == 0 and "mean" in out, err
        assert runs.load_run_config(tmp_path / "again", trust_imports=True)[1].imports == (
            "fusedrl_cli_test_envs",)
        # A recorded module that is not there is named, with the file that records it.
        doc = json.loads((tmp_path / "run" / "config.json").read_text())
        (tmp_path / "run" / "config.json").write_text(json.dumps({**doc, "run": {**doc["run"], "imports": [
            "no_such_module_here"]}}))
        code, _, err = run_cli("evaluate", tmp_path / "run", "--trust-imports")
        assert code == 2 and "config.json imports no_such_module_here: no module named" in err, err
        # A run folder from before imports were recorded: --resume says to pass --import.
        del doc["run"]["imports"]
        (tmp_path / "run" / "config.json").write_text(json.dumps(doc))
        new_process()
        code, _, err = run_cli("train", "--resume", tmp_path / "run")  # the env is checked first
        assert code == 2 and "--import MODULE imports the module that registers it" in err, err
        code, out, _ = run_cli("envs", *imports)
        assert "CliMine-v0" in out
        new_process()  # profile's --import brings it back
        sizes = ["--num-envs", 2, "--num-steps", 8, "--update-epochs", 1, "--num-minibatches", 1]
        code, out, err = run_cli("profile", *imports, "--env", "CliMine-v0", "--mode", "fused", *sizes,
                                 "--repeats", 1)
        assert code == 0 and "CliMine-v0" in out, err
        code, _, err = run_cli("sweep", *imports, "--env", "CliMine-v0", "--grid", "lr=1e-3", "--out",
                               tmp_path / "sweep", "--no-plots", *tiny[:6])
        assert code == 0, err
    finally:
        sys.modules.pop("fusedrl_cli_test_envs", None)


@pytest.mark.slow
def test_a_run_that_diverges_or_never_ends_an_episode_says_so(run_cli, tmp_path, monkeypatch):
    # Before: the run's evaluation never returned when no episode ended; and a run whose parameters
    # were NaN reported plausible greedy returns (argmax of NaN logits is action 0).
    import jax.numpy as jnp

    import fusedrl
    from fusedrl.envs import registry
    from fusedrl.envs.cartpole import CartPole

    class NeverEnds(CartPole):  # time < 0 is never true, but XLA cannot prove it (it drops a loop
        # whose end it can prove unreachable, when nothing it computes is used)
        def step_env(self, key, state, action, params):
            obs, state, reward, _, info = super().step_env(key, state, action, params)
            return obs, state, reward, state.time < 0, info

        def is_truncated(self, state, params):
            return state.time < 0

    class NaNReward(CartPole):
        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, info = super().step_env(key, state, action, params)
            return obs, state, reward * jnp.nan, terminated, info

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(run_report, "EVAL_MAX_STEPS", 50)  # as 1,000,000, but quicker to reach
    fusedrl.register("CliNeverEnds-v0", NeverEnds)
    fusedrl.register("CliNaNReward-v0", NaNReward)
    options = runs.RunOptions(num_seeds=2, eval_episodes=3, progress_every=0)

    run = runs.train_run(PPOConfig(env_id="CliNeverEnds-v0", **TINY), tmp_path / "never", options=options,
                         progress=False)
    saved = json.loads((tmp_path / "never" / "summary.json").read_text())
    assert saved["status"] == "finished" and saved["eval_unfinished_episodes"] == 6
    assert saved["eval_return_mean"] is None and saved["diverged_seeds"] == []
    assert "WARNING: 6 evaluation episode(s) had not ended after 50 steps" in runs.summary_table(run.summary)
    code, out, err = run_cli("evaluate", tmp_path / "never", "--max-steps", "20")
    assert code == 0 and "WARNING: 6 evaluation episode(s) had not ended after 20 steps" in out, err

    # A NaN reward stops the run, naming it (tests/test_broken_envs.py); parameters that are NaN for
    # another reason (a divergence the env did not cause) are what the unchecked trainer gives here.
    from fusedrl.train.trainer import EnvFaultError, Trainer

    with pytest.raises(EnvFaultError, match="CliNaNReward-v0 returned a non-finite reward"):
        runs.train_run(PPOConfig(env_id="CliNaNReward-v0", **TINY), tmp_path / "broken", options=options,
                       progress=False)
    assert json.loads((tmp_path / "broken" / "summary.json").read_text())["status"] == "failed"
    monkeypatch.setattr(Trainer, "env_fault", lambda self, traj: jnp.zeros((), jnp.int32))
    # (another lr: another config, so the checked program compiled above is not reused)
    run = runs.train_run(PPOConfig(env_id="CliNaNReward-v0", **TINY, lr=1e-3), tmp_path / "nan",
                         options=options, progress=False)
    saved = json.loads((tmp_path / "nan" / "summary.json").read_text())
    assert saved["diverged_seeds"] == [0, 1] and saved["eval_unfinished_episodes"] == 0
    assert saved["eval_return_per_seed"] == [None, None]
    assert "WARNING: seed(s) 0, 1 diverged" in runs.summary_table(run.summary)
    with pytest.warns(RuntimeWarning, match="parameters are not all finite"):
        fusedrl.load(tmp_path / "nan", seed=1)
    for bad in (1.7, True):
        with pytest.raises(TypeError, match="seed must be the index of a seed of the run"):
            fusedrl.load(tmp_path / "nan", seed=bad)


def test_config_file_without_env_id_trains_the_env_of_env(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"lr": 0.001}))
    config, _ = resolve("--config", path, "--env", "Acrobot-v1")
    assert (config.env_id, config.lr) == ("Acrobot-v1", 0.001)  # not PPOConfig's default env


def test_set_env_id_is_refused_with_a_config_file_too(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"env_id": "CartPole-v1"}))
    with pytest.raises(cli.CLIError, match="use --env to choose the environment"):
        resolve("--config", path, "--set", "env_id=Acrobot-v1")
    config, _ = resolve("--config", path, "--set", "env_id=CartPole-v1")  # the same id: harmless
    assert config.env_id == "CartPole-v1"


def test_sweep_axes_take_env_params_as_set_names_them():
    parser = cli.build_parser()
    args = parser.parse_args(["sweep", "--env", "CartPole-v1", "--grid", "env_params.gravity=9.8,12"])
    assert sweep_cli.parse_axes(args) == ("grid", {"gravity": [9.8, 12.0]})
    args = parser.parse_args(["sweep", "--env", "CartPole-v1", "--grid", "gravity=9.8,12",
                              "--grid", "env_params.gravity=1,2"])
    with pytest.raises(cli.CLIError, match="axis 'gravity' is given twice"):
        sweep_cli.parse_axes(args)
    args = parser.parse_args(["sweep", "--env", "CartPole-v1", "--grid", "env_params.lr=1e-3,1e-4"])
    with pytest.raises(cli.CLIError, match="lr is a PPOConfig field, not an env param"):
        sweep_cli.parse_axes(args)


def test_set_refuses_a_number_for_an_array_env_param():
    # gymnax's Acrobot indexes available_torque ([-1, 0, 1]) by the action: a scalar crashed in tracing
    with pytest.raises(cli.CLIError, match="available_torque is an array of shape"):
        resolve("--env", "gymnax:Acrobot-v1", "--set", "available_torque=1.0")


def test_env_params_gymnasium_refuses_are_usage_errors(run_cli, tmp_path):
    pytest.importorskip("gymnasium")
    code, _, err = run_cli("train", "--env", "gymnasium:CartPole-v1", "--set", "env_params.foo=1",
                           "--out", tmp_path / "run")
    assert code == 2 and "unexpected keyword argument 'foo'" in err and "Traceback" not in err, err
