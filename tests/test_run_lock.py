"""One process per run folder (`fusedrl.run_lock`): a second `train --out D [--overwrite]` or `--resume D`
is refused naming the holder's pid, before it touches anything, and the first run finishes untouched; a
killed holder's lock is free at once, its "running" folder reads "interrupted", and it resumes.

The holders are real processes, held mid-run by a logger that waits for a file (`CHILD`)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fusedrl import run_lock, runs
from fusedrl.train import preset

# 4 updates of 4 envs x 8 steps; a progress row every update.
TINY = dict(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, update_epochs=1, num_minibatches=1,
            hidden_sizes=(8,))

# train_run(TINY, OUT, checkpoint_every=EVERY) whose logger, at update 2's row, writes GATE/waiting and
# waits for GATE/go.
CHILD = f"""
import pathlib, sys, time
from fusedrl import runs
from fusedrl.train import preset

out, gate, every = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])


class Gate:
    def log(self, update, rows):
        if update == 2:
            (gate / "waiting").write_text("")
            deadline = time.monotonic() + 600
            while not (gate / "go").exists():
                if time.monotonic() > deadline:
                    raise SystemExit("no go")
                time.sleep(0.05)

    def close(self):
        pass


runs.train_run(preset("CartPole-v1", **{TINY!r}), out, progress=False, loggers=[Gate()], eval_episodes=2,
               progress_every=1, checkpoint_every=every)
"""


def held_child(out, gate, every):
    """The CHILD process, once it waits at update 2 (it holds `out`'s lock)."""
    gate.mkdir()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(gate), str(every)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 480
    while not (gate / "waiting").exists():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"the holder did not reach update 2: {child.communicate()[1][-3000:]}")
        time.sleep(0.1)
    return child


def folder_state(folder):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.iterdir())}


def fake_run_folder(folder):
    """A run folder's config.json and metrics.csv (never trained)."""
    folder.mkdir()
    document = runs.config_document(preset("CartPole-v1", **TINY), runs.RunOptions())
    runs.write_json(folder / "config.json", document)
    (folder / "metrics.csv").write_text("update\n")
    return folder


def test_a_second_taker_is_refused_naming_the_holder(tmp_path):
    assert run_lock.holder(tmp_path) is None  # no lock file: nobody
    with run_lock.acquire(tmp_path) as lock:
        assert run_lock.holder(tmp_path) == os.getpid()
        with pytest.raises(run_lock.RunFolderLocked, match=f"process {os.getpid()} is training") as e:
            run_lock.acquire(tmp_path)  # another open file, even in this process
        assert e.value.pid == os.getpid() and isinstance(e.value, OSError)
    assert not lock.held and run_lock.holder(tmp_path) is None
    run_lock.acquire(tmp_path).release()


def test_a_locked_folder_is_refused_before_anything_is_touched(run_cli, tmp_path):
    run = fake_run_folder(tmp_path / "run")
    config = preset("CartPole-v1", **TINY)
    with run_lock.acquire(run):
        before = folder_state(run)
        for overwrite in (False, True):
            with pytest.raises(run_lock.RunFolderLocked, match=f"process {os.getpid()}"):
                runs.train_run(config, run, overwrite=overwrite, progress=False)
        with pytest.raises(run_lock.RunFolderLocked, match=f"process {os.getpid()}"):
            runs.resume_run(run, progress=False)
        code, _, err = run_cli("train", "--resume", run)
        assert code == 2 and f"process {os.getpid()} is training" in err, err
        assert runs.run_status(run) == "running"
        assert folder_state(run) == before


def test_overwrite_keeps_the_lock_file_and_removes_the_rest(tmp_path):
    run = fake_run_folder(tmp_path / "run")
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "meta.json").write_text("{}")
    run_lock.acquire(run).release()  # a lock file left by an earlier process
    inode = (run / run_lock.LOCK_FILE).stat().st_ino
    path, lock = runs.prepare_folder(run, overwrite=True)
    with lock:
        assert [p.name for p in path.iterdir()] == [run_lock.LOCK_FILE]
        assert (run / run_lock.LOCK_FILE).stat().st_ino == inode  # the file other processes open
        assert run_lock.holder(run) == os.getpid()
    # A folder that is not a run's is refused, and gets no lock file.
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("x\n")
    with pytest.raises(runs.RunFolderExists, match="does not look like a fusedrl run folder"):
        runs.prepare_folder(other, overwrite=True)
    assert [p.name for p in other.iterdir()] == ["data.csv"]


@pytest.mark.parametrize("summary, status", [
    (None, "interrupted"), ({"status": "running"}, "interrupted"), ({"status": "finished"}, "finished"),
    ({"status": "interrupted while saving"}, "interrupted while saving")])
def test_a_running_status_without_its_writer_reads_interrupted(tmp_path, summary, status):
    run = fake_run_folder(tmp_path / "run")
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))
    assert runs.run_status(run) == status
    with run_lock.acquire(run):
        assert runs.run_status(run) == "running"
    assert runs.run_status(tmp_path) is None  # not a run folder


def test_a_second_process_is_refused_and_the_first_finishes_untouched(run_cli, tmp_path):
    run = tmp_path / "run"
    holder = held_child(run, tmp_path / "gate", every=0)
    try:
        # --checkpoint-every 0: no checkpoint during training.
        assert sorted(p.name for p in run.iterdir()) == [".lock", "config.json", "metrics.csv"]
        config = (run / "config.json").read_bytes()
        assert run_lock.holder(run) == holder.pid and runs.run_status(run) == "running"
        tiny = ["--set", "num_envs=4", "--set", "num_steps=8", "--total-timesteps", 128]
        second = subprocess.run([sys.executable, "-m", "fusedrl.cli", "train", "--env", "CartPole-v1",
                                 *map(str, tiny), "--out", str(run), "--overwrite", "--no-progress"],
                                capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stderr
        assert f"{run} is in use: process {holder.pid} is training or resuming the run in it" in second.stderr
        code, _, err = run_cli("train", "--resume", run)
        assert code == 2 and f"process {holder.pid}" in err, err
        assert (run / "config.json").read_bytes() == config
    finally:
        (tmp_path / "gate" / "go").write_text("")
        _, err = holder.communicate(timeout=300)
    assert holder.returncode == 0, err
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    with open(run / "metrics.csv") as f:
        assert [int(r["update"]) for r in csv.DictReader(f)] == [1, 2, 3, 4]
    assert (run / "checkpoint").is_dir() and run_lock.holder(run) is None  # the final checkpoint only


def test_a_killed_holders_run_reads_interrupted_and_resumes(run_cli, tmp_path):
    run = tmp_path / "run"
    holder = held_child(run, tmp_path / "gate", every=1)  # checkpoint 1 saved, waiting at update 2
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=60)
    assert json.loads((run / "summary.json").read_text())["status"] == "running"  # as the writer left it
    assert run_lock.holder(run) is None and runs.run_status(run) == "interrupted"
    code, out, err = run_cli("evaluate", run)
    assert code == 0 and "status: interrupted; `fusedrl train --resume" in out, err
    code, out, err = run_cli("train", "--resume", run, "--no-progress")
    assert code == 0, err
    assert "(resumed; the run was interrupted)" in err and "updates 2-4" in out, out
    assert runs.run_status(run) == "finished"
