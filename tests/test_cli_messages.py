"""Messages that name the fix: a mistyped field or path, a budget cut to whole updates, and a time
line that adds up. None of these compiles anything."""

from __future__ import annotations

import re

import pytest

import fusedrl
from fusedrl import cli


@pytest.mark.parametrize("item, fix", [("learning_rate=1e-3", "lr"), ("NUM_ENVS=8", "num_envs"),
                                       ("n_epochs=2", "update_epochs"), ("clip_range=0.1", "clip_eps")])
def test_set_with_another_librarys_name_suggests_ours(item, fix, capsys):
    assert cli.main(["train", "--env", "CartPole-v1", "--set", item]) == 2
    err = capsys.readouterr().err
    assert f"--set {item}: unknown field" in err and f"Did you mean {fix!r}" in err, err


def test_env_typo_suggests_the_id_not_the_whole_list(capsys):
    assert cli.main(["train", "--env", "cartpole-v1"]) == 2
    err = capsys.readouterr().err
    assert "Unknown environment id 'cartpole-v1': did you mean 'CartPole-v1'?" in err
    assert "closest first" not in err


def test_missing_run_folder_says_so_and_suggests_the_saved_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "gymnax_Catch-bsuite").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=re.escape(
            "runs/gymnax:Catch-bsuite does not exist. Did you mean runs/gymnax_Catch-bsuite?")):
        fusedrl.load("runs/gymnax:Catch-bsuite")
    assert cli.main(["evaluate", "runs/gymnax:Catch-bsuite"]) == 2
    err = capsys.readouterr().err
    assert "runs/gymnax:Catch-bsuite does not exist. Did you mean runs/gymnax_Catch-bsuite?" in err
    assert "meta.json" not in err and "config.json" not in err
    # Nothing close: what the folder holds; no folder: that too.
    assert cli.main(["evaluate", "runs/Pendulum-v1"]) == 2
    assert "runs/Pendulum-v1 does not exist. runs holds: gymnax_Catch-bsuite." in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match=re.escape("rnus/x does not exist. (rnus does not exist")):
        fusedrl.load("rnus/x")


def test_budget_cut_to_whole_updates_prints_one_line(tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "config.json").write_text("{}")  # an existing run folder: train stops before compiling
    args = ["train", "--env", "CartPole-v1", "--set", "num_envs=4", "--set", "num_steps=128",
            "--out", str(out)]
    assert cli.main([*args, "--total-timesteps", "1000"]) == 2
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("note: training")]
    assert notes == ["note: training 512 of total_timesteps=1,000 env steps per seed: 1 whole updates of 512 "
                     "(num_envs 4 x num_steps 128); the other 488 would not fill an update."], err
    assert cli.main([*args, "--total-timesteps", "1024"]) == 2  # whole updates: no note
    assert "note: training" not in capsys.readouterr().err


def test_time_line_adds_up_to_the_wall_time():
    zero = {"requests": 0, "hits": 0}
    summary = {"compile_seconds": 3.04, "train_seconds": 5.51, "eval_seconds": 1.26, "progress_every": 0}
    line = cli.time_line(summary, 12.0, zero, {"requests": 4, "hits": 4})
    first = line.splitlines()[0]
    wall, *parts = (float(x) for x in re.findall(r"([\d.]+) s", first))
    assert first.startswith("  wall 12.0 s = compile 3.0 s + train 5.5 s + evaluate 1.3 s + setup")
    assert sum(parts) == pytest.approx(wall, abs=0.15)
    assert line.splitlines()[1] == "  compile cache: all 4 XLA programs loaded, none compiled"
    # Some programs compiled anew: the line says how many came from the cache.
    partly = cli.time_line({**summary, "progress_every": 10}, 12.0, zero, {"requests": 4, "hits": 3})
    assert partly.splitlines()[1] == "  compile cache: 3 of 4 XLA programs loaded, 1 compiled and saved"
    # The bridge has no separate compile; the cache off: no programs line.
    bridge = cli.time_line({**summary, "compile_seconds": None}, 8.0, zero, zero)
    assert bridge == "  wall 8.0 s = train 5.5 s + evaluate 1.3 s + setup and saving 1.2 s"
