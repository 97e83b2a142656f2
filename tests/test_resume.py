"""Checkpoints during training (`checkpoint_every`) and resuming an interrupted run from them
(`fusedrl.runs.resume_run`, `fusedrl train --resume`)."""

import io
import json
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from fusedrl import checkpoint as ckpt
from fusedrl import cli, run_driver, runs
from fusedrl.progress import Monitor, ProgressBar, dispatch
from fusedrl.train import preset

# 10 updates, checkpoints after updates 3, 6 and 9, progress every 2 updates.
TINY = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 10, update_epochs=2, num_minibatches=2,
            hidden_sizes=(16,))
OPTIONS = dict(eval_episodes=4, progress_every=2, checkpoint_every=3)


def config():
    return preset("CartPole-v1", **TINY)


def arrays(tree):
    """Leaves as NumPy arrays, PRNG keys as their key data."""
    def data(x):
        return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    return [np.asarray(data(x)) for x in jax.tree.leaves(tree)]


def interrupted_run(interrupt_at, update, run_dir, cfg=None, **options):
    """`train_run` of `cfg` (default `config()`) with OPTIONS and `options`, stopped by Ctrl-C
    once `update`'s rows are logged (`interrupt_at`: the conftest fixture); the CSV logger is itself
    again afterwards."""
    restore = interrupt_at(update)
    with pytest.raises(KeyboardInterrupt):
        runs.train_run(cfg or config(), run_dir, progress_file=io.StringIO(), **{**OPTIONS, **options})
    restore()


def stopped_while_evaluating(finished, run_dir):
    """A copy of the finished run folder `finished` whose summary says it stopped while evaluating
    (its checkpoint is of the last update)."""
    shutil.copytree(finished, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted while evaluating"}))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The runs the resumed ones must equal: 1 seed and 2 seeds (one host thread each on 2 cores)."""
    root = tmp_path_factory.mktemp("full")
    return {n: runs.train_run(config(), root / f"seeds{n}", num_seeds=n, progress_file=io.StringIO(),
                              **OPTIONS)
            for n in (1, 2)}


def test_checkpoint_segments():
    assert runs.checkpoint_segments(10, 3) == [(0, 3), (3, 3), (6, 3), (9, 1)]
    assert runs.checkpoint_segments(10, 3, start=6) == [(6, 3), (9, 1)]
    assert runs.checkpoint_segments(10, 5, start=7) == [(7, 3)]
    assert runs.checkpoint_segments(20, 5, start=7) == [(7, 3), (10, 5), (15, 5)]  # at multiples of 5
    assert runs.checkpoint_segments(10, 0) == [(0, 10)]
    assert runs.checkpoint_segments(10, 10) == [(0, 10)]
    assert runs.checkpoint_segments(10, 20, start=4) == [(4, 6)]
    assert runs.checkpoint_segments(10, 3, start=10) == []
    with pytest.raises(ValueError, match="start=11"):
        runs.checkpoint_segments(10, 3, start=11)


@pytest.mark.parametrize("num_seeds", [1, 2])
@pytest.mark.slow
def test_an_interrupted_run_resumes_bit_for_bit(uninterrupted, interrupt_at, tmp_path, num_seeds):
    full = uninterrupted[num_seeds]
    run_dir = tmp_path / "run"
    interrupted_run(interrupt_at, 8, run_dir, num_seeds=num_seeds)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_update"] == 6
    _, state, _, meta = ckpt.restore(run_dir / "checkpoint", config())
    assert meta["num_seeds"] == num_seeds and meta["extra"] == {"seed": 0, "update": 6}
    np.testing.assert_array_equal(state.update, 6)
    saved = ckpt.restore_metrics(run_dir / "checkpoint")
    for name, value in full.result.metrics.items():  # the first 6 updates' metrics, exactly
        np.testing.assert_array_equal(saved[name], np.asarray(value)[:, :6], err_msg=name)

    run = runs.resume_run(run_dir, progress_file=io.StringIO())
    for a, b in zip(arrays(full.result.state), arrays(run.result.state), strict=True):
        np.testing.assert_array_equal(a, b)
    for name, value in full.result.metrics.items():
        np.testing.assert_array_equal(run.result.metrics[name], value, err_msg=name)
    for name in ("metrics.csv", "config.json"):
        assert (run_dir / name).read_text() == (full.path / name).read_text(), name
    assert run.summary["status"] == "finished" and run.summary["resumed_at_update"] == 6
    assert run.summary["checkpoint_update"] == full.summary["checkpoint_update"] == 10
    assert run.summary["eval_return_per_seed"] == full.summary["eval_return_per_seed"]
    trained = 4 * config().batch_size * num_seeds  # env steps of updates 7-10, all seeds
    assert run.summary["sps"] == pytest.approx(trained / run.summary["train_seconds"], rel=0.01)
    assert "updates 7-10)" in runs.summary_table(run.summary)
    assert ckpt.read_meta(run_dir / "checkpoint")["extra"]["update"] == 10
    with pytest.raises(runs.ResumeError, match="has finished"):
        runs.resume_run(run_dir, progress_file=io.StringIO())


@pytest.mark.subprocess
@pytest.mark.slow
def test_the_cli_resumes_in_a_new_process(run_cli, uninterrupted, interrupt_at, tmp_path):
    """Interrupted through the CLI, which says how to resume; resumed by `fusedrl train --resume` in
    another process (which compiles the programs anew): the same agents, bit for bit."""
    full = uninterrupted[2]
    run_dir = tmp_path / "run"
    interrupt_at(8)
    code, _, err = run_cli("train", "--env", "CartPole-v1", "--total-timesteps", 640, "--set", "num_envs=4",
                           "--set", "num_steps=16", "--set", "update_epochs=2", "--set", "num_minibatches=2",
                           "--set", "hidden_sizes=16", "--num-seeds", 2, "--eval-episodes", 4,
                           "--progress-every", 2, "--checkpoint-every", 3, "--out", run_dir)
    assert code == 130
    assert f"its checkpoint holds update 6 of 10: continue with `fusedrl train --resume {run_dir}`" in err
    assert (run_dir / "config.json").read_text() == (full.path / "config.json").read_text()
    done = subprocess.run([sys.executable, "-m", "fusedrl.cli", "train", "--resume", str(run_dir),
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "updates 7-10)" in done.stdout
    _, state, _, _ = ckpt.restore(run_dir / "checkpoint", config())
    for a, b in zip(arrays(full.result.state), arrays(state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert (run_dir / "metrics.csv").read_text() == (full.path / "metrics.csv").read_text()


def test_checkpoints_do_not_change_the_training_beyond_rounding(uninterrupted, tmp_path):
    """Checkpoints cut the run into programs compiled apart from the one-program run: the same
    training to float32 rounding. The run without them keeps only its final checkpoint."""
    full = uninterrupted[2]
    plain = runs.train_run(config(), tmp_path / "plain", num_seeds=2, progress_file=io.StringIO(),
                           **{**OPTIONS, "checkpoint_every": 0})
    for name, value in plain.result.metrics.items():
        np.testing.assert_allclose(full.result.metrics[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    for a, b in zip(jax.tree.leaves(full.result.params), jax.tree.leaves(plain.result.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert ckpt.read_meta(tmp_path / "plain" / "checkpoint")["extra"]["update"] == 10


def test_a_run_without_a_checkpoint_cannot_resume(interrupt_at, tmp_path):
    interrupted_run(interrupt_at, 2, tmp_path / "early", num_seeds=1)  # before the first checkpoint (3)
    restart = r"fusedrl train --config .*config.json --out .*early --overwrite"
    with pytest.raises(runs.ResumeError,
                       match=r"before its first checkpoint \(checkpoint_every=3 updates\).*" + restart):
        runs.resume_run(tmp_path / "early", progress_file=io.StringIO())
    interrupted_run(interrupt_at, 4, tmp_path / "none", num_seeds=1, checkpoint_every=0)
    with pytest.raises(runs.ResumeError, match=r"without checkpoints during training \(checkpoint_every=0\)"):
        runs.resume_run(tmp_path / "none", progress_file=io.StringIO())


def test_resume_refuses_a_checkpoint_without_its_metrics(uninterrupted, tmp_path):
    run_dir = tmp_path / "run"
    stopped_while_evaluating(uninterrupted[1].path, run_dir)
    meta = json.loads((run_dir / "checkpoint" / "meta.json").read_text())
    (run_dir / "checkpoint" / "meta.json").write_text(json.dumps({**meta, "metrics": None}))
    ckpt.write_checksums(run_dir / "checkpoint")  # changed on purpose, not damaged
    with pytest.raises(runs.ResumeError, match="does not hold the metrics of the 10 updates before it"):
        runs.resume_run(run_dir, progress_file=io.StringIO())
    doc = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**doc, "run": {**doc["run"], "num_seeds": 2}}))
    with pytest.raises(runs.ResumeError, match="num_seeds=1, but config.json says num_seeds=2: put it back"):
        runs.resume_run(run_dir, progress_file=io.StringIO())


def test_a_run_stopped_after_its_last_update_only_saves_and_evaluates(uninterrupted, tmp_path):
    full = uninterrupted[1]
    run_dir = tmp_path / "run"
    stopped_while_evaluating(full.path, run_dir)
    run = runs.resume_run(run_dir, progress_file=io.StringIO())
    assert run.summary["status"] == "finished" and run.summary["sps"] is None
    assert run.summary["eval_return_per_seed"] == full.summary["eval_return_per_seed"]
    assert "resumed after update 10, the last: nothing left to train" in runs.summary_table(run.summary)
    assert (run_dir / "metrics.csv").read_text() == (full.path / "metrics.csv").read_text()


def test_a_resumed_run_interrupted_again_keeps_its_place(monkeypatch, tmp_path):
    """Ctrl-C during a checkpoint's save, in a run without progress callbacks: the checkpoint
    before it stays. Resumed, and interrupted again at its second checkpoint: the checkpoint
    between holds every update's metrics, those before the resume too, and the resumed run reports
    the updates it had already."""
    saves, original = [], ckpt.save
    stop_at = 6

    def save_or_interrupt(*args, **kwargs):
        saves.append(kwargs["extra"]["update"])
        if kwargs["extra"]["update"] == stop_at:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(ckpt, "save", save_or_interrupt)
    run_dir = tmp_path / "run"
    options = {**OPTIONS, "progress_every": 0}
    with pytest.raises(KeyboardInterrupt):
        runs.train_run(config(), run_dir, num_seeds=1, progress_file=io.StringIO(), **options)
    assert saves == [3, 6]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_update"] == 3
    assert summary["updates_logged"] == 0 and not (run_dir / "metrics.csv").exists()
    first = ckpt.restore_metrics(run_dir / "checkpoint")

    stop_at = 9
    with pytest.raises(KeyboardInterrupt):
        runs.resume_run(run_dir, progress_file=io.StringIO())
    assert saves == [3, 6, 6, 9]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_at_update"] == 3 and summary["checkpoint_update"] == 6
    assert summary["updates_logged"] == 3
    saved = ckpt.restore_metrics(run_dir / "checkpoint")
    for name, value in first.items():
        assert saved[name].shape == (1, 6), name
        np.testing.assert_array_equal(saved[name][:, :3], value, err_msg=name)
    # metrics.csv: the resume wrote the rows of the updates before it (none were logged).
    rows = (run_dir / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == [1, 2, 3]
    stop_at = None  # resumed again, to the end: the last stretch saves only the final checkpoint
    run = runs.resume_run(run_dir, progress_file=io.StringIO())
    assert saves == [3, 6, 6, 9, 9, 10] and run.summary["resumed_at_update"] == 6
    assert ckpt.restore_metrics(run_dir / "checkpoint")["env_steps"].shape == (1, 10)


def test_checkpoint_option_errors(run_cli, tmp_path):
    with pytest.raises(ValueError, match="checkpoint_every must be an int >= 0"):
        runs.RunOptions(checkpoint_every=-1)
    with pytest.raises(ValueError, match="checkpoint_every must be an int >= 0"):
        runs.RunOptions(checkpoint_every=True)
    with pytest.raises(ValueError, match=r"checkpoint_every \(--checkpoint-every\) must be 0 for "
                                         r"gymnasium:CartPole-v1"):
        runs.check_supported(preset("CartPole-v1").replace(env_id="gymnasium:CartPole-v1"),
                             runs.RunOptions(checkpoint_every=5))
    code, _, err = run_cli("train", "--resume", tmp_path, "--set", "lr=1e-3", "--seed", 3)
    assert code == 2 and "drop --set, --seed" in err and "--out NEW_DIR" in err
    code, _, err = run_cli("train", "--resume", tmp_path / "nothing")
    assert code == 2 and "nothing: no such folder" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli("train", "--resume", tmp_path / "empty")
    assert code == 2 and "config.json is missing" in err
    code, _, err = run_cli("train", "--env", "CartPole-v1", "--checkpoint-every", -2, "--out", tmp_path / "x")
    assert code == 2 and "checkpoint_every must be an int >= 0" in err and not (tmp_path / "x").exists()


def test_a_resumed_progress_bar_starts_where_the_run_stopped():
    out = io.StringIO()
    bar = ProgressBar(10, 100, 2, file=out, start_update=6)
    bar.start -= 2.0  # 2 s since the start: 4 updates x 100 steps x 2 seeds in 2 s
    assert "1k steps x2  400 SPS" in bar.info(10, [{"episode_return": 5.0, "episode_length": 5}] * 2)
    for update in (7, 8, 9, 10):
        bar.log(update, [{"episode_return": 5.0, "episode_length": 5}] * 2)
    # Plain lines every 10% of the run, from where it resumed.
    assert [line.split()[1] for line in out.getvalue().splitlines()] == ["7/10", "8/10", "9/10", "10/10"]


def test_resume_of_a_damaged_folder_is_a_usage_error(run_cli, uninterrupted, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(uninterrupted[1].path, run_dir)
    (run_dir / "summary.json").write_text("{not json")  # unreadable: no reason to refuse
    (run_dir / "checkpoint" / "meta.json").write_text("{not json either")
    code, _, err = run_cli("train", "--resume", run_dir)
    assert code == 2 and "checkpoint/meta.json does not match its checksum" in err, err
    assert "config.json was edited" not in err and "Traceback" not in err, err


def test_a_resumed_run_interrupted_before_its_next_checkpoint_says_how_to_continue(run_cli, interrupt_at,
                                                                                   tmp_path):
    """Interrupted at update 4, resumed at update 3, interrupted again at update 4 (before the
    checkpoint at 6): the checkpoint of update 3 is still there, so summary.json and the CLI must
    still say so."""
    run_dir = tmp_path / "run"
    interrupted_run(interrupt_at, 4, run_dir, num_seeds=1)
    assert json.loads((run_dir / "summary.json").read_text())["checkpoint_update"] == 3
    interrupt_at(4)
    code, _, err = run_cli("train", "--resume", run_dir, "--no-progress")
    assert code == 130
    assert ckpt.read_meta(run_dir / "checkpoint")["extra"]["update"] == 3
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["resumed_at_update"] == 3
    assert summary.get("checkpoint_update") == 3, summary
    assert f"holds update 3 of 10: continue with `fusedrl train --resume {run_dir}`" in err, err


@pytest.mark.parametrize("flag", [["--seed", 0], ["--progress-every", 0], ["--checkpoint-every", 0],
                                  ["--total-timesteps", 0]])
def test_resume_refuses_options_given_as_zero(run_cli, tmp_path, flag):
    """`--seed 0` etc. are given options too: --resume must refuse them like `--seed 3`, not
    ignore them silently (0 == False slipped through the check)."""
    code, _, err = run_cli("train", "--resume", tmp_path, *flag)
    assert code == 2 and f"drop {flag[0]}" in err, err


def test_resume_with_an_edited_config_says_what_to_do(run_cli, uninterrupted, tmp_path):
    """config.json edited after the run started: the error names config.json and a way on."""
    run_dir = tmp_path / "run"
    stopped_while_evaluating(uninterrupted[1].path, run_dir)
    doc = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**doc, "ppo": {**doc["ppo"], "lr": 1e-2}}))
    code, _, err = run_cli("train", "--resume", run_dir, "--no-progress")
    assert code == 2 and "lr" in err
    assert "config.json" in err and ("--overwrite" in err or "--out" in err), err


def test_resume_refuses_a_config_whose_seed_differs_from_the_checkpoint(uninterrupted, tmp_path):
    """The checkpoint records the seed it was trained from (meta extra.seed); a config.json with
    another seed would silently relabel the run (summary seed, evaluation key)."""
    run_dir = tmp_path / "run"
    stopped_while_evaluating(uninterrupted[1].path, run_dir)
    doc = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**doc, "run": {**doc["run"], "seed": 5}}))
    with pytest.raises(runs.ResumeError, match="seed=0, but config.json says seed=5: put it back as 0"):
        runs.resume_run(run_dir, progress_file=io.StringIO())


@pytest.mark.parametrize("num_seeds,every,stop", [(2, 4, 10), (1, 1, 5)])
@pytest.mark.slow
def test_normalised_runs_resume_bit_for_bit(interrupt_at, tmp_path, num_seeds, every, stop):
    """Pendulum (observation and reward normalisation), 11 updates: checkpoints every 4 (not a
    divisor) with 2 seeds, or after every update with 1 seed."""
    cfg = preset("Pendulum-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 11, update_epochs=2,
                 num_minibatches=2, hidden_sizes=(16,))
    assert cfg.normalize_obs and cfg.normalize_reward
    opts = dict(num_seeds=num_seeds, eval_episodes=2, progress_every=1, checkpoint_every=every)
    full = runs.train_run(cfg, tmp_path / "full", progress_file=io.StringIO(), **opts)
    interrupted_run(interrupt_at, stop, tmp_path / "run", cfg, **opts)
    run = runs.resume_run(tmp_path / "run", progress_file=io.StringIO())
    assert run.summary["resumed_at_update"] == (stop - 1) // every * every
    for a, b in zip(arrays(full.result.state), arrays(run.result.state), strict=True):
        np.testing.assert_array_equal(a, b)
    for name in ("metrics.csv", "learning_curve.png"):
        assert (tmp_path / "run" / name).read_bytes() == (full.path / name).read_bytes(), name
    assert run.summary["eval_return_per_seed"] == full.summary["eval_return_per_seed"]


def test_ctrl_c_during_a_stretch_stops_at_its_checkpoint(monkeypatch, tmp_path):
    """The first Ctrl-C asks for a stop at the next callback; the checkpoint that ends the stretch
    comes first, and the run stops there instead of starting the next stretch."""
    calls, original = [], Monitor.__call__

    def recorded(self, metrics):
        calls.append(int(metrics["env_steps"]) // self.batch_size)
        original(self, metrics)
        if calls[-1] == 2:  # Ctrl-C after update 2's callback: interrupt_guard's SIGINT handler
            dispatch.monitor.stop_requested = True

    monkeypatch.setattr(Monitor, "__call__", recorded)
    with pytest.raises(KeyboardInterrupt):
        runs.train_run(config(), tmp_path / "run", num_seeds=1, progress_file=io.StringIO(), **OPTIONS)
    assert calls == [2]  # no callback of update 4: the second stretch never started
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_update"] == 3
    assert summary["updates_logged"] == 2


def test_a_resume_on_another_number_of_threads_says_it_matches_to_rounding_only(
        uninterrupted, monkeypatch, interrupt_at, tmp_path):
    """Two seeds on two host threads, resumed where the seeds share one thread (a machine with
    one core): other programs, so a note, and the same training to float32 rounding."""
    full = uninterrupted[2]
    monkeypatch.setattr(run_driver, "num_streams", lambda num_seeds: 2)
    interrupted_run(interrupt_at, 8, tmp_path / "run", num_seeds=2)
    monkeypatch.setattr(run_driver, "num_streams", lambda num_seeds: 1)
    err = io.StringIO()
    run = runs.resume_run(tmp_path / "run", progress=False, progress_file=err)  # said without progress too
    assert "the run trained its seeds on 2 host thread(s) and resumes on 1" in err.getvalue()
    assert run.summary["streams"] == 1
    for name, value in full.result.metrics.items():
        np.testing.assert_allclose(run.result.metrics[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    err = io.StringIO()  # the same threads: no note
    monkeypatch.setattr(run_driver, "num_streams", lambda num_seeds: 2)
    interrupted_run(interrupt_at, 8, tmp_path / "again", num_seeds=2)
    runs.resume_run(tmp_path / "again", progress_file=err)
    assert "host thread" not in err.getvalue()


def test_evaluating_an_unfinished_run_says_so(run_cli, interrupt_at, tmp_path):
    interrupted_run(interrupt_at, 8, tmp_path / "run", num_seeds=1)
    got = runs.evaluate_run(tmp_path / "run")
    assert (got["update"], got["num_updates"]) == (6, 10)
    code, out, err = run_cli("evaluate", tmp_path / "run")
    assert code == 0, err
    assert "(the run has not finished: its checkpoint holds update 6 of 10)" in out


@pytest.mark.slow
def test_a_resume_logged_to_the_same_wandb_project_continues_its_wandb_runs(
        run_cli, monkeypatch, interrupt_at, tmp_path):
    # A resumed run continues each seed's W&B run (wandb.init(id=, resume="allow")), not a new one.
    # A stand-in for wandb: what wandb.init was asked for, and run ids as W&B gives them.
    import types

    inits = []

    class Run:
        def __init__(self, kwargs):
            self.id = kwargs.get("id", f"new{len(inits) - 1}")  # new0 for the first init

        def log(self, payload, step):
            pass

        def finish(self):
            pass

    def init(**kwargs):
        inits.append(kwargs)
        return Run(kwargs)

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    run_dir = tmp_path / "run"
    restore = interrupt_at(8)
    code, _, err = run_cli("train", "--env", "CartPole-v1", "--total-timesteps", 640, "--set", "num_envs=4",
                           "--set", "num_steps=16", "--set", "hidden_sizes=16", "--num-seeds", 2,
                           "--eval-episodes", 2, "--progress-every", 2, "--checkpoint-every", 3,
                           "--no-progress", "--wandb-project", "proj", "--out", run_dir)
    assert code == 130, err
    assert [kwargs.get("id") for kwargs in inits] == [None, None]
    saved = {"project": "proj", "run_ids": ["new0", "new1"]}
    assert json.loads((run_dir / cli.WANDB_RUNS_FILE).read_text()) == saved
    restore()
    code, _, err = run_cli("train", "--resume", run_dir, "--no-progress", "--wandb-project", "proj")
    assert code == 0, err
    assert [(kwargs.get("id"), kwargs.get("resume")) for kwargs in inits[2:]] == [("new0", "allow"),
                                                                                   ("new1", "allow")]
    assert json.loads((run_dir / cli.WANDB_RUNS_FILE).read_text()) == saved
    # Another project, or a new run in the folder: new W&B runs.
    config, options = runs.load_run_config(run_dir)
    for project, resuming in [("other", True), ("proj", False)]:
        del inits[:]
        cli.wandb_logger(project, config, options, run_dir, resuming=resuming).close()
        assert [kwargs.get("id") for kwargs in inits] == [None, None], (project, resuming)


def test_the_policy_of_an_unfinished_run_says_which_update_it_holds(uninterrupted, interrupt_at, tmp_path):
    # fusedrl.load of an interrupted run gives the agent at its latest checkpoint (update 6 of 10):
    # it says so, rather than passing it off as the trained policy.
    import fusedrl

    run_dir = tmp_path / "run"
    interrupted_run(interrupt_at, 8, run_dir, num_seeds=1)
    with pytest.warns(RuntimeWarning, match="holds update 6 of 10"):
        pi = fusedrl.load(run_dir)
    assert pi.update == 6
    assert fusedrl.load(uninterrupted[1].path).update == 10  # a finished run: no warning


@pytest.mark.parametrize("algo", ["a2c", "reinforce"])
def test_a2c_and_reinforce_runs_resume_bit_for_bit_and_load(algo, interrupt_at, tmp_path):
    # The run folder records the algorithm ("algo" and its section in config.json): --resume,
    # evaluate and fusedrl.load rebuild the run's own config class.
    import fusedrl

    tiny = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 10, hidden_sizes=(16,))
    if algo == "reinforce":
        tiny["env_params"] = {"max_steps_in_episode": 16}
    cfg = preset("CartPole-v1", algo=algo, **tiny)
    full = runs.train_run(cfg, tmp_path / "full", progress_file=io.StringIO(), **OPTIONS)
    doc = json.loads((tmp_path / "full" / "config.json").read_text())
    assert doc["algo"] == algo and doc[algo] == cfg.to_dict()
    run_dir = tmp_path / "run"
    interrupted_run(interrupt_at, 8, run_dir, cfg)
    run = runs.resume_run(run_dir, progress_file=io.StringIO())
    assert type(run.config) is type(cfg)
    for a, b in zip(arrays(full.result.state), arrays(run.result.state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert run.summary["eval_return_per_seed"] == full.summary["eval_return_per_seed"]
    policy = fusedrl.load(run_dir)
    assert type(policy.config) is type(cfg) and policy.config == cfg
    assert runs.evaluate_run(run_dir, num_episodes=2)["num_updates"] == 10
