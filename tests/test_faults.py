"""`python -m fusedrl.bench faults` at a small count: runs killed with SIGKILL resume byte-identical and
leave no debris, and damaged checkpoints are refused."""

import json
import subprocess
import sys

import pytest

from fusedrl.bench import faults


def test_debris_names_what_interrupted_writes_leave(tmp_path):
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "metrics.csv").write_text("update\n")
    assert faults.debris(tmp_path) == []
    (tmp_path / ".checkpoint.tmp-12-0badc0de-abc").mkdir()
    (tmp_path / ".summary.json.12-0badc0de.x_y.tmp").write_text("{")
    (tmp_path / "checkpoint" / ".hidden").write_text("")
    assert faults.debris(tmp_path) == [".checkpoint.tmp-12-0badc0de-abc", ".summary.json.12-0badc0de.x_y.tmp",
                                       "checkpoint/.hidden"]


@pytest.mark.timeout(1200)
def test_kills_resume_byte_identical_and_flips_are_detected(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fusedrl.bench", "faults", "--kills", "2", "--kills-per-run", "2",
         "--flips", "20", "--updates", "4", "--seed", "1", "--out", str(tmp_path / "faults"),
         "--timeout", "540"],
        capture_output=True, text=True, timeout=1150)
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    report = json.loads(lines[-1])
    assert report["bench"] == "faults" and report["kills"] == 2, proc.stdout
    assert report["kills_in_identical_runs"] == 2 and report["runs_identical"] == report["runs"], proc.stdout
    assert report["runs_with_debris"] == 0 and report["runs_failed"] == 0, proc.stdout
    assert report["flips"] == 20 and report["flips_detected"] == 20, proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
