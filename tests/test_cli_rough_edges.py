"""The rough edges a new user hit first: mistyped options, a closed pipe, the env listing, presets of
unknown ids, --resume of a missing folder, the public Dict space."""

import os
import pathlib
import subprocess
import sys

import pytest

from fusedrl.cli import env_table, format_space, main

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv, hint", [
    (["train", "--num_seeds", "4"], "did you mean --num-seeds?"),
    (["train", "--env", "CartPole-v1", "--totl-timesteps", "9"], "did you mean --total-timesteps?"),
    (["evaluate", "runs/x", "--max_steps", "3"], "did you mean --max-steps?"),
    (["envs", "--gymnx"], "did you mean --gymnax?"),
    (["sweep", "--env", "CartPole-v1", "--num_seeds", "2"], "did you mean --num-seeds?"),
    (["plot", "runs/x", "--ot", "a.png"], "did you mean --out"),
    (["trian"], "did you mean train?"),
])
def test_a_mistyped_option_or_command_gets_the_one_it_may_mean(argv, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and hint in err, err
    assert err.startswith(f"usage: fusedrl {argv[0]}" if argv[0] != "trian" else "usage: fusedrl ")


def test_an_unknown_argument_with_nothing_close_points_to_help(capsys):
    with pytest.raises(SystemExit):
        main(["envs", "zzz"])
    assert "unrecognized arguments: zzz; see `fusedrl envs --help`" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.timeout(300)
def test_a_closed_pipe_ends_the_listing_without_a_traceback():
    fusedrl = pathlib.Path(sys.executable).parent / "fusedrl"
    proc = subprocess.run(f"'{fusedrl}' envs | head -2", shell=True, capture_output=True, text=True,
                          timeout=280, env={**os.environ, "PYTHONWARNINGS": ""})
    assert proc.stdout.splitlines()[0].startswith("id ")
    assert proc.stderr == "", proc.stderr


def test_envs_lists_public_ids_and_all_lists_the_test_envs(capsys):
    assert main(["envs"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line and line[0] != "("]
    assert "CartPole-v1" in ids and "gymnax:Breakout-MinAtar" in ids
    assert not [i for i in ids if i.startswith("probe:") or i == "brax:fast" or "@" in i], ids
    assert main(["envs", "--all"]) == 0
    assert "probe:TwoStep-v0" in capsys.readouterr().out


def test_the_env_table_wraps_long_spaces_to_the_terminal():
    from fusedrl.envs import Box, Dict, Discrete

    wide = Dict({f"feature_{i}": Box(0.0, 1.0, (7, 7, 3)) for i in range(12)})
    obs = format_space(wide)
    assert len(obs) > 300  # one row of `fusedrl envs --suites` was ~471 characters before
    rows = [("jumanji:Wide-v0", obs, format_space(Discrete(5)), ""), ("CartPole-v1", "Box((4,))", "D", "yes")]
    lines = env_table(rows, width=100)
    assert max(map(len, lines)) <= 100, max(map(len, lines))
    assert lines[1].startswith("jumanji:Wide-v0") and lines[-1].startswith("CartPole-v1")
    # Nothing is lost: the wrapped pieces read back as the space.
    column, action = lines[0].index("observation space"), lines[0].index("action space")
    assert " ".join(line[column:action].strip() for line in lines[1:-1]) == obs


def test_preset_refuses_an_id_that_names_no_env_and_keeps_defaults_for_one_without_a_preset():
    import fusedrl

    with pytest.raises(ValueError, match="Unknown environment id 'Hopper-v4'"):
        fusedrl.preset("Hopper-v4")
    with pytest.raises(ValueError, match="did you mean 'CartPole-v1'"):
        fusedrl.preset("cartpole-v1")
    with pytest.raises(ValueError, match="Unknown environment suite 'other:'"):
        fusedrl.preset("other:Pendulum-v1", algo="a2c")
    assert not fusedrl.train.presets.has_preset("gymnax:Asterix-MinAtar")
    assert fusedrl.preset("gymnax:Asterix-MinAtar") == fusedrl.PPOConfig(env_id="gymnax:Asterix-MinAtar")


def test_resume_of_a_missing_folder_says_so(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path / "nope"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no such folder" in err and "config.json" not in err, err


def test_dict_space_is_public_and_the_docs_use_it():
    import gymnax.environments.spaces as gymnax_spaces

    import fusedrl.envs

    assert fusedrl.envs.Dict is gymnax_spaces.Dict and "Dict" in fusedrl.envs.__all__
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert "_gymnax" not in page.read_text(encoding="utf-8"), f"{page.name} imports a private module"
