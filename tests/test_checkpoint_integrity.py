"""Checkpoints that cannot be damaged silently: checksums, compiles that do not grow with the number of
checkpoints, what a writer killed mid-save leaves behind, and the messages for damaged files."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import fusedrl
from fusedrl import checkpoint as ckpt
from fusedrl import files, runs
from fusedrl.run_lock import LOCK_FILE
from fusedrl.train import preset

# 12 updates, a checkpoint after every one (11 during training, then the final one).
TINY = dict(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 12, update_epochs=1, num_minibatches=1,
            hidden_sizes=(8,))
OPTIONS = dict(eval_episodes=2, progress_every=1, checkpoint_every=1)
STOP_AT = 4  # the first process stops (Ctrl-C) once this update's checkpoint is saved
#: The event JAX records for every executable it builds (compiled or loaded from the compile cache).
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """A run with a checkpoint every update, stopped at update STOP_AT and resumed to the end; the
    executables built before each save ({update: count}), in the first process and the resumed one."""
    counts = []

    def listener(event, duration, **kwargs):
        if event == COMPILE_EVENT:
            counts.append(1)

    save, seen = ckpt.save, {"first": {}, "resumed": {}}
    leg = "first"

    def counting_save(*args, **kwargs):
        update = kwargs["extra"]["update"]
        seen[leg][update] = len(counts)
        out = save(*args, **kwargs)
        if update == STOP_AT and leg == "first":
            raise KeyboardInterrupt
        return out

    run_dir = tmp_path_factory.mktemp("counted") / "run"
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ckpt, "save", counting_save)
            with pytest.raises(KeyboardInterrupt):
                runs.train_run(preset("CartPole-v1", **TINY), run_dir, progress=False, **OPTIONS)
            leg = "resumed"
            run = runs.resume_run(run_dir, progress=False)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return run, seen


def test_compiles_do_not_grow_with_checkpoints(counted):
    run, seen = counted
    assert run.summary["status"] == "finished"
    first, resumed = seen["first"], seen["resumed"]
    assert sorted(first) == list(range(1, STOP_AT + 1)) and sorted(resumed) == list(range(STOP_AT + 1, 13))
    assert first[1] > 0, "no compile seen at all: the compile event's name changed, so this test sees nothing"
    # From the second checkpoint of each process on, every save finds the same number of executables
    # built: checkpoints compile nothing (joining the metrics on the device compiled 2 per checkpoint).
    assert [first[u] for u in range(2, STOP_AT + 1)] == [first[2]] * (STOP_AT - 1), first
    later = [resumed[u] for u in range(STOP_AT + 2, 13)]
    assert later == [resumed[STOP_AT + 2]] * (12 - STOP_AT - 1), resumed


def test_resumed_metrics_join_on_the_host(counted):
    run, _ = counted
    saved = ckpt.restore_metrics(run.path / "checkpoint")
    assert saved["env_steps"].shape == (1, 12)
    np.testing.assert_array_equal(saved["env_steps"][0], np.arange(1, 13) * 4 * 8)
    for name, value in run.result.metrics.items():
        assert isinstance(value, np.ndarray), name  # joined on the host, not by a compiled concatenation
        np.testing.assert_array_equal(saved[name], value, err_msg=name)


@pytest.fixture(scope="module")
def finished(counted):
    return counted[0].path


def _copy(finished, dest):
    shutil.copytree(finished, dest)
    return dest


def _as_written_before_checksums(folder):
    """`folder` (a checkpoint) as fusedrl wrote it before checkpoints had checksums."""
    (folder / "checksums.json").unlink()
    meta = json.loads((folder / "meta.json").read_text())
    del meta["checksums"]
    (folder / "meta.json").write_text(json.dumps(meta))


def _largest_array_file(run_dir):
    """The largest of orbax's data files (the issue's case: 64 bytes flipped there loaded silently)."""
    files = [p for p in (run_dir / "checkpoint" / "arrays").rglob("*")
             if p.is_file() and p.parent.name == "d"]
    return max(files, key=lambda p: p.stat().st_size)


def _flip(file, count, seed=0):
    data = bytearray(file.read_bytes())
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(data), size=min(count, len(data)), replace=False):
        data[i] ^= int(rng.integers(1, 256))
    file.write_bytes(bytes(data))


def test_64_flipped_bytes_in_the_array_file_are_refused_by_load_evaluate_and_resume(run_cli, finished,
                                                                                    tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    fusedrl.load(run_dir)  # intact: loads (warnings are errors here: no warning either)
    damaged = _largest_array_file(run_dir)
    _flip(damaged, 64)
    rel = damaged.relative_to(run_dir)
    with pytest.raises(ckpt.CheckpointDamaged, match=rf"{rel}.*does not match its checksum.*earlier copy"):
        fusedrl.load(run_dir)
    with pytest.raises(ckpt.CheckpointDamaged, match=rf"{rel}.*checksum"):
        runs.evaluate_run(run_dir)
    code, _, err = run_cli("evaluate", run_dir)
    assert code == 2 and f"{rel} does not match its checksum" in err and "Traceback" not in err, err
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    code, _, err = run_cli("train", "--resume", run_dir, "--no-progress")
    assert code == 2 and f"{rel} does not match its checksum" in err, err
    assert "config.json was edited" not in err and "Traceback" not in err, err


def test_every_file_of_a_checkpoint_is_checked(finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    folder = run_dir / "checkpoint"
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    names = {p.relative_to(folder).as_posix() for p in files}
    assert {"meta.json", "metrics.npz", "checksums.json"} < names
    assert any(n.startswith("arrays/") for n in names)
    for i, file in enumerate(files):
        kept = file.read_bytes()
        _flip(file, 1, seed=i)
        with pytest.raises(ckpt.CheckpointDamaged, match=r"checksum") as info:
            ckpt.restore(folder)
        assert str(file) in str(info.value) or file.name == "checksums.json", info.value
        file.write_bytes(kept)
        file.unlink()  # a file gone is damage too
        with pytest.raises(ckpt.CheckpointDamaged, match=r"checksum") as info:
            ckpt.restore(folder)
        assert str(file) in str(info.value) or file.name == "checksums.json", info.value
        file.write_bytes(kept)
    ckpt.restore(folder)  # all put back: it loads again
    (folder / "arrays" / "extra").write_bytes(b"added later")
    with pytest.raises(ckpt.CheckpointDamaged, match=r"arrays/extra is not listed in checksums\.json"):
        ckpt.verify(folder, ["arrays/extra"])


def test_a_checkpoint_without_checksums_loads_with_a_notice(finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    _as_written_before_checksums(run_dir / "checkpoint")
    with pytest.warns(ckpt.UnverifiedCheckpointWarning) as record:
        policy = fusedrl.load(run_dir)
    assert len(record) == 1 and "\n" not in str(record[0].message)
    assert "has no checksums.json" in str(record[0].message)
    intact = fusedrl.load(finished)
    for a, b in zip(jax.tree.leaves(policy.params), jax.tree.leaves(intact.params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_damaged_metrics_file_on_resume_is_named_not_blamed_on_config(run_cli, finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    metrics = run_dir / "checkpoint" / "metrics.npz"
    metrics.write_bytes(metrics.read_bytes()[:100])  # cut short
    code, _, err = run_cli("train", "--resume", run_dir, "--no-progress")
    assert code == 2 and "metrics.npz does not match its checksum" in err, err
    assert "config.json" not in err.split("To train it from the start")[0] and "Traceback" not in err, err
    # A checkpoint without checksums (older): the damage is still named.
    _as_written_before_checksums(run_dir / "checkpoint")
    with pytest.warns(ckpt.UnverifiedCheckpointWarning):
        code, _, err = run_cli("train", "--resume", run_dir, "--no-progress")
    assert code == 2 and "metrics.npz cannot be read" in err and "is damaged" in err, err
    assert "config.json was edited" not in err and "Traceback" not in err, err


def test_evaluate_after_a_checkpoint_error_exits_cleanly(finished, tmp_path):
    # orbax fails to read damaged arrays; its threads printed "Event loop is closed" tracebacks at exit.
    run_dir = _copy(finished, tmp_path / "run")
    _as_written_before_checksums(run_dir / "checkpoint")  # only orbax can find the damage now
    for file in (run_dir / "checkpoint" / "arrays").rglob("*"):
        if file.is_file() and file.parent.name == "d":
            file.write_bytes(b"")
    env = {**os.environ, "FUSEDRL_COMPILE_CACHE": "0"}
    proc = subprocess.run([sys.executable, "-m", "fusedrl.cli", "evaluate", str(run_dir)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "cannot read the checkpoint arrays" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "Event loop is closed" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------ crash debris
def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: its pid runs nothing now
    return proc.pid


def _debris(run_dir, pid, host=None):
    """A temporary folder, a moved-aside checkpoint and a temporary summary.json as a writer `pid`
    killed mid-save leaves them."""
    host = files.host_id() if host is None else host
    tmp = run_dir / f".checkpoint.tmp-{pid}-{host}-x1y2z3"
    old = run_dir / f".checkpoint.old-{pid}-{host}"
    shutil.copytree(run_dir / "checkpoint", tmp)
    shutil.copytree(run_dir / "checkpoint", old)
    (tmp / "checksums.json").unlink()  # killed before its last file
    summary = run_dir / f".summary.json.{pid}-{host}.ab_c9.tmp"
    summary.write_text('{"status": "runn')
    return tmp, old, summary


def test_debris_of_dead_writers_is_removed_and_of_live_ones_kept(finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    dead = _debris(run_dir, _dead_pid())
    live = _debris(run_dir, os.getpid())
    elsewhere = _debris(run_dir, _dead_pid(), host="0badc0de")  # another machine's pids mean nothing here
    legacy = run_dir / f".checkpoint.old-{_dead_pid()}"  # as fusedrl named it before, without a host
    shutil.copytree(run_dir / "checkpoint", legacy)
    runs.evaluate_run(run_dir, num_episodes=1)
    assert not any(p.exists() for p in (*dead, legacy))
    assert all(p.exists() for p in (*live, *elsewhere))
    for p in live:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    dead = _debris(run_dir, _dead_pid())
    fusedrl.load(run_dir)
    assert not any(p.exists() for p in dead)
    # Resume (of a copy whose summary says it was interrupted) removes them too.
    dead = _debris(run_dir, _dead_pid())
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    runs.resume_run(run_dir, progress=False)
    assert not any(p.exists() for p in dead)
    left = sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".") and p.name != LOCK_FILE)
    assert left == sorted(p.name for p in elsewhere)


def test_a_save_killed_between_its_renames_leaves_the_previous_checkpoint(finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    pid = _dead_pid()
    tmp, old, _ = _debris(run_dir, pid)
    shutil.rmtree(run_dir / "checkpoint")  # moved aside, and the new one not yet in its place
    policy = fusedrl.load(run_dir)
    assert policy.update == 12 and (run_dir / "checkpoint" / "checksums.json").is_file()
    assert not tmp.exists() and not old.exists()


def test_a_writer_killed_mid_save_in_a_real_process(finished, tmp_path):
    """A process killed (SIGKILL) inside orbax's write of a checkpoint: resume removes its temporary
    folder and continues from the checkpoint before."""
    run_dir = _copy(finished, tmp_path / "run")
    script = textwrap.dedent(f"""
        import os, signal, sys
        import orbax.checkpoint as ocp
        from fusedrl import checkpoint as ckpt
        config, state, hparams, meta = ckpt.restore({str(run_dir / "checkpoint")!r})
        save = ocp.StandardCheckpointer.save
        def save_then_die(self, *args, **kwargs):
            save(self, *args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        ocp.StandardCheckpointer.save = save_then_die
        ckpt.save({str(run_dir / "checkpoint")!r}, config, state, hparams, num_seeds=1)
        """)
    env = {**os.environ, "FUSEDRL_COMPILE_CACHE": "0"}
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True, env=env)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -9, err
    left = [p.name for p in run_dir.iterdir() if p.name.startswith(".checkpoint.")]
    assert len(left) == 1 and left[0].startswith(f".checkpoint.tmp-{proc.pid}-"), left
    fusedrl.load(run_dir)
    assert not any(p.name.startswith(".checkpoint.") for p in run_dir.iterdir())
