"""`fusedrl.profile` (the update-time profiler) and `python -m fusedrl.bench profile`, at tiny sizes."""

from __future__ import annotations

import json
import math

import pytest

import fusedrl
import fusedrl.bench
from fusedrl import profile

TINY = ["--num-envs", "2", "--num-steps", "8", "--update-epochs", "1", "--num-minibatches", "1",
        "--repeats", "1"]


@pytest.mark.parametrize("mode, phases", [
    ("fused", {"env", "policy", "gae", "update", "transfer"}),
    ("bridge", {"env", "policy: device", "policy: dispatch", "to_device", "to_host", "python",
                "gae", "update"}),
])
def test_profile_prints_table_and_json(mode, phases, capsys):
    assert fusedrl.bench.main(["profile", "--env", "CartPole-v1", "--mode", mode, *TINY, "--json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert summary["mode"] == mode and summary["num_envs"] == 2 and summary["num_steps"] == 8
    assert summary["env_id"] == ("CartPole-v1" if mode == "fused" else "gymnasium:CartPole-v1")
    assert phases <= set(summary["seconds"])
    assert all(math.isfinite(v) for v in summary["seconds"].values())
    assert summary["total_seconds"] > 0 and summary["steps_per_s"] > 0
    assert 0 < summary["device_fraction"] <= 1
    if mode == "fused":  # the rows add up to the update's time; steps/s is its batch over that time
        assert sum(summary["seconds"].values()) == pytest.approx(summary["total_seconds"])
        assert summary["steps_per_s"] * summary["total_seconds"] == pytest.approx(2 * 8)
    for phase in phases:
        assert phase in out  # the table names every phase
    assert "env steps/s" in out


def _summary(mode, seconds):
    return {"env_id": "CartPole-v1", "mode": mode, "num_envs": 2, "num_steps": 8, "update_epochs": 1,
            "num_minibatches": 1, "repeats": 1, "seconds": seconds, "total_seconds": sum(seconds.values()),
            "steps_per_s": 100.0, "device_fraction": 0.5, "jax": "x", "device": "cpu:cpu"}


@pytest.mark.parametrize("mode", ["fused", "bridge"])
def test_table_has_no_negative_rows_and_says_what_other_holds(mode):
    seconds = {"env": 0.004, "policy": 0.003, "rollout: fusion": -0.002, "gae": 0.001, "update": 0.01,
               "other": -0.0005}
    table = profile.format_table(_summary(mode, seconds))
    lines = table.splitlines()
    rows = lines[2:next(i for i, line in enumerate(lines) if line.startswith("env steps/s"))]
    # Every row's ms and share are >= 0; the negative phases are notes under the table, with why.
    numbers = [float(tok.rstrip("%")) for row in rows for tok in row.split()[-2:]]
    assert len(rows) == 5 and min(numbers) >= 0, table
    assert "not a row: rollout: fusion -2.00 ms, below zero: XLA overlaps env and policy" in table
    assert "not a row: other -0.50 ms" in table
    assert "\nother: " in table and ("dispatching the one call" if mode == "fused" else "stacking") in table
    positive = profile.format_table(_summary(mode, {"env": 0.004, "other": 0.001}))
    assert "not a row" not in positive and "\nother " in positive and "\nother: " in positive


def test_json_only_with_the_flag(capsys):
    assert profile.main(["--env", "CartPole-v1", *TINY]) == 0
    out = capsys.readouterr().out
    assert "env steps/s" in out and not any(line.startswith("{") for line in out.splitlines())


def test_fused_mode_needs_a_jax_env(capsys):
    assert profile.main(["--env", "gymnasium:Taxi-v3", "--mode", "fused"]) == 2
    assert "JAX" in capsys.readouterr().err
    assert profile.resolve("gymnasium:CartPole-v1", None) == ("gymnasium:CartPole-v1", "bridge")
    assert profile.resolve("gymnasium:CartPole-v1", "fused") == ("CartPole-v1", "fused")


def test_unknown_mode_and_no_repeats_are_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        profile.resolve("CartPole-v1", "bogus")
    config = fusedrl.PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=16,
                               num_minibatches=1, update_epochs=1, hidden_sizes=(8,))
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        profile.profile_update(config, "fused", repeats=0)


def test_unknown_env_is_a_clear_error(capsys):
    assert profile.main(["--env", "CartPol-v1", *TINY]) == 2
    err = capsys.readouterr().err
    assert "fusedrl profile: error: Unknown environment id 'CartPol-v1'" in err and "CartPole-v1" in err
    assert profile.main(["--env", "gymnasium:CartPol-v1", *TINY]) == 2
    assert "Unknown Gymnasium environment id 'gymnasium:CartPol-v1'" in capsys.readouterr().err


def test_default_config_is_the_preset_cut_to_100_updates():
    for env_id, twin in [("gymnax:Breakout-MinAtar", "gymnax:Breakout-MinAtar"),
                         ("gymnasium:Pendulum-v1", "Pendulum-v1")]:
        config = profile.default_config(env_id)
        expected = fusedrl.preset(twin)
        assert config.env_id == env_id and config.total_timesteps == 100 * config.batch_size
        assert config.hidden_sizes == expected.hidden_sizes and config.lr == expected.lr


def test_progress_cost_rotates_which_program_runs_first(monkeypatch, capsys):
    # Stand-ins for the compile and the timed runs: what is checked is the order of the runs, each
    # repeat starting with the next program, and the medians and ratios printed from their times.
    from fusedrl import progress_cost

    def compiled(config, num_seeds, every):
        return fusedrl.make_train(config), f"program {every}", 0.0

    monkeypatch.setattr(progress_cost, "compiled_run", compiled)
    ran = []

    def timed_run(run, keys, hparams, config, csv_path):
        ran.append(run)
        return (1.0, 0.5) if run == "program 0" else (1.5, 0.6)  # the callback costs +50% wall

    monkeypatch.setattr(progress_cost, "timed_run", timed_run)
    progress_cost.main(["--env", "CartPole-v1", "--every", "8", "1", "--repeats", "3"])
    assert ran == ["program 0", "program 8", "program 1", "program 8", "program 1", "program 0",
                   "program 1", "program 0", "program 8"]
    out = capsys.readouterr().out
    assert "wall median callback every 8       1.50 s   ratio 1.500 (+50.0%)" in out, out


def test_progress_cost_reports_medians_and_minimums_of_wall_and_cpu_seconds(monkeypatch, capsys):
    from fusedrl import progress_cost

    monkeypatch.setattr(progress_cost, "compiled_run",
                        lambda config, num_seeds, every: (fusedrl.make_train(config), every, 0.0))
    times = {0: iter([(2.0, 1.0), (1.0, 3.0), (4.0, 2.0)]), 8: iter([(3.0, 4.0), (6.0, 2.0), (2.5, 6.0)])}
    monkeypatch.setattr(progress_cost, "timed_run", lambda run, *args: next(times[run]))
    progress_cost.main(["--env", "CartPole-v1", "--every", "8", "--repeats", "3"])
    out = capsys.readouterr().out
    # wall: off 2, 1, 4; every 8: 3, 6, 2.5. cpu: off 1, 3, 2; every 8: 4, 2, 6.
    assert "wall median callback every 8       3.00 s   ratio 1.500 (+50.0%)" in out, out
    assert "wall min    callback every 8       2.50 s   ratio 2.500 (+150.0%)" in out, out
    assert "cpu  median callback every 8       4.00 s   ratio 2.000 (+100.0%)" in out, out
    assert "cpu  min    callback every 8       2.00 s   ratio 2.000 (+100.0%)" in out, out


def test_bridge_policy_rows_split_the_probed_policy_time(monkeypatch):
    # "policy: dispatch" is the probed policy time net of the device compute measured apart, so
    # the two policy rows add up to what the probe measured (the median over repeats).
    import statistics

    from fusedrl import bridge

    probes = []

    class RecordingProbe(bridge.Probe):
        def __init__(self):
            super().__init__()
            probes.append(self)

    monkeypatch.setattr(bridge, "Probe", RecordingProbe)
    config = profile.default_config("gymnasium:CartPole-v1", num_envs=2, num_steps=8, update_epochs=1,
                                    num_minibatches=1)
    seconds = profile.profile_bridge(config, repeats=3)["seconds"]
    probed = statistics.median(p.seconds["policy"] for p in probes)
    assert len(probes) == 3 and 0 < seconds["policy: device"] <= probed
    assert seconds["policy: device"] + seconds["policy: dispatch"] == pytest.approx(probed)
