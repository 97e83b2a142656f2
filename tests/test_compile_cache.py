"""The compile cache: a second identical `fusedrl train` loads its programs instead of compiling
them, a changed config compiles anew, and the flag and the environment variable turn it off."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fusedrl import cli, compile_cache, run_programs, runs
from fusedrl.train import PPOConfig

pytestmark = [pytest.mark.subprocess]

# Progress on (a row every update): the run trains in pieces, reported from the host between them.
TINY = ["--env", "CartPole-v1", "--total-timesteps", "64", "--set", "num_envs=2", "--set", "num_steps=8",
        "--set", "num_minibatches=1", "--set", "update_epochs=1", "--set", "hidden_sizes=8",
        "--progress-every", "1", "--eval-episodes", "1"]


def _fusedrl(args, tmp_path, **env):
    """`fusedrl ARGS` in a fresh process whose per-user cache folder is under tmp_path."""
    environ = {k: v for k, v in os.environ.items() if k != "FUSEDRL_COMPILE_CACHE"}  # conftest's 0
    environ.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), **env)
    out = subprocess.run([sys.executable, "-m", "fusedrl.cli", *args], capture_output=True, text=True,
                         env=environ, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _entries(tmp_path):
    folder = tmp_path / "xdg" / "fusedrl" / "jax"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_second_identical_train_loads_its_programs_a_changed_config_compiles_and_off_is_off(tmp_path):
    first = _fusedrl(["train", *TINY, "--out", "a1"], tmp_path)
    assert re.search(r"compile cache: \d+ XLA programs compiled and saved", first), first
    written = _entries(tmp_path)
    assert any(name.startswith("jit_") for name in written)

    second = _fusedrl(["train", *TINY, "--out", "a2"], tmp_path)
    assert re.search(r"compile cache: all \d+ XLA programs loaded, none compiled", second), second
    assert _entries(tmp_path) == written  # nothing compiled, nothing written
    compile_s = [float(re.search(r"compile ([\d.]+) s", out).group(1)) for out in (first, second)]
    assert compile_s[1] < compile_s[0], compile_s

    # Another network is another program: JAX's key differs, so it is compiled, not loaded.
    wider = [("hidden_sizes=16" if a == "hidden_sizes=8" else a) for a in TINY]
    changed = _fusedrl(["train", *wider, "--out", "b"], tmp_path)
    line = next(x for x in changed.splitlines() if x.startswith("  compile cache:"))
    assert "none compiled" not in line and len(_entries(tmp_path)) > len(written), changed

    # Turned off, by the flag or the environment variable: programs new to the cache are not written.
    entries = _entries(tmp_path)
    out = _fusedrl(["evaluate", "a1", "--episodes", "2", "--no-compile-cache"], tmp_path)
    assert "mean" in out and _entries(tmp_path) == entries
    out = _fusedrl(["evaluate", "a1", "--episodes", "3"], tmp_path, FUSEDRL_COMPILE_CACHE="0")
    assert "mean" in out and _entries(tmp_path) == entries


def test_off_switches_leave_jax_alone(monkeypatch):
    import jax

    before = jax.config.jax_compilation_cache_dir
    assert cli.use_compile_cache(True) is None
    for value in ("0", "false", "OFF", " no "):
        monkeypatch.setenv("FUSEDRL_COMPILE_CACHE", value)
        assert compile_cache.disabled_by_env() and cli.use_compile_cache(False) is None
    monkeypatch.setenv("FUSEDRL_COMPILE_CACHE", "1")
    assert not compile_cache.disabled_by_env()
    assert jax.config.jax_compilation_cache_dir == before


def test_default_folder_is_per_user(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_cache_dir() == tmp_path / "fusedrl" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert compile_cache.default_cache_dir() == compile_cache.Path.home() / ".cache" / "fusedrl" / "jax"


def test_describe_says_where_the_programs_came_from():
    zero = {"requests": 0, "hits": 0}
    assert compile_cache.describe(zero, zero) is None
    every = compile_cache.describe(zero, {"requests": 3, "hits": 3})
    assert every == "all 3 XLA programs loaded, none compiled"
    some = compile_cache.describe(zero, {"requests": 3, "hits": 1})
    assert some == "1 of 3 XLA programs loaded, 2 compiled and saved"
    none = compile_cache.describe(zero, {"requests": 3, "hits": 0})
    assert none == "3 XLA programs compiled and saved (an identical run loads them)"


@pytest.mark.slow
def test_training_with_progress_compiles_no_host_callback():
    """JAX never caches a program with a host callback: the programs of a run with progress on have
    none, and the progress rows still arrive, one per update and seed, with the result's values."""
    config = PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=2 * 8 * 4,
                       num_minibatches=1, update_epochs=1, hidden_sizes=(8,))
    rows = []

    class Recorder:
        def log(self, update, update_rows):
            rows.extend(dict(r) for r in update_rows)

        def close(self):
            pass

    run = runs.train_run(config, None, num_seeds=2, eval_episodes=1, progress=False, progress_every=1,
                         loggers=[Recorder()])
    programs = []
    for key, (_, compiled) in run_programs._COMPILED.items():
        if key[0] == config:
            init, advance = compiled  # progress on: pieces (an init and one advance program)
            programs += [init, *advance.values()]
    assert len(programs) == 2
    for program in programs:  # a host callback is a custom call (xla_ffi_python_cpu_callback on CPU)
        calls = re.findall(r'custom_call_target="([^"]*)"', program.as_text())
        assert not [c for c in calls if "callback" in c], calls
    assert [(r["update"], r["seed"]) for r in rows] == [(u, s) for u in range(1, 5) for s in (0, 1)]
    for r in rows:
        assert r["policy_loss"] == run.result.metrics["policy_loss"][r["seed"], r["update"] - 1]


@pytest.mark.parametrize("num_updates, checkpoint_every", [(976, 0), (1953, 0), (244, 0), (10, 3), (20, 6),
                                                           (61, 0), (7, 0), (5000, 40)])
def test_a_run_in_pieces_needs_one_advance_program(num_updates, checkpoint_every):
    """One piece length divides every stretch between checkpoints (one program to compile and
    cache), with about PIECES_PER_RUN pieces or more: the bar moves during the run."""
    n = runs.piece_length(num_updates, checkpoint_every)
    for _, count in runs.checkpoint_segments(num_updates, checkpoint_every):
        assert count % n == 0, (count, n)
    assert 1 <= n <= max(1, num_updates // runs.PIECES_PER_RUN)
    assert runs.piece_length(976) == 16  # the CartPole preset: 61 pieces
