"""Fault harness: kill -9 training runs at random moments and resume them; flip bytes in checkpoints.

    python -m fusedrl.bench faults [--kills 50] [--flips 100] [--kills-per-run 5] [--updates 8]
                                   [--seed 0] [--out DIR]

Kills. A small CartPole run (`fusedrl train`, a checkpoint after every update) is trained twice
without interruption: the reference, and a second run that must equal it (programs loaded from the
compile cache). Then run folders are trained in new processes and each process is killed (SIGKILL)
at a random moment: once it has saved a checkpoint of its own, after a delay drawn uniformly
between 0 and the median time from a process's first checkpoint to its exit (of the second run and
of the processes that ended before their kill), so kills
land in training, in saves, in the evaluation and in the writing of the last files. Each killed run
is resumed (`fusedrl train --resume`; `--overwrite` when the kill came before any checkpoint) and
killed again, up to `--kills-per-run` times, then resumed to the end (a kill after the run's last
write ends it too). A run counts as identical
when its metrics.csv is byte for byte the reference's and its summary.json says "finished"; as
having debris when a hidden file or folder a save writes beside its target (`.checkpoint.tmp-*`,
`.checkpoint.old-*`, `.NAME.*.tmp`) is left in it.

Flips. In a copy of the reference run folder, `--flips` times: a random file of its checkpoint gets
1 to 64 random bytes changed (XOR with a random nonzero byte), `fusedrl.load` is called on the folder
(a refusal with `CheckpointError` counts as detected), and the file is put back.

Every process runs with its own compile cache in DIR (compiled once, by the reference), so a kill
rarely lands in compiling. Prints one line per run and per undetected flip, then a summary line and
a JSON line: {"kills", "kills_in_identical_runs", "kills_leaving_debris" (for the resume to
remove), "runs", "runs_identical", "runs_with_debris" (left at the end), "flips", "flips_detected",
...}. The exit status is 1 when any run differs, keeps debris or fails, or any flip goes undetected.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fusedrl.run_lock import LOCK_FILE

#: The run every process trains: a few seconds of CartPole, a checkpoint after every update.
RUN_ARGS = ("--env", "CartPole-v1", "--set", "num_envs=8", "--set", "num_steps=16", "--set",
            "hidden_sizes=16", "--set", "update_epochs=2", "--set", "num_minibatches=2",
            "--checkpoint-every", "1", "--eval-episodes", "4", "--no-progress")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench faults",
                                description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=50, metavar="N", help="SIGKILLs in all (default 50)")
    p.add_argument("--flips", type=int, default=100, metavar="M",
                   help="damaged checkpoints to load (default 100)")
    p.add_argument("--kills-per-run", type=int, default=5, metavar="K",
                   help="kills of one run folder before it is resumed to its end (default 5)")
    p.add_argument("--updates", type=int, default=8, metavar="U", help="updates of each run (default 8)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the kill times and flips")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="working folder (default: a temporary one, removed at the end)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SEC",
                   help="longest a training process may take before the harness gives up (default 600)")
    return p


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FUSEDRL_COMPILE_CACHE"}
    env["JAX_COMPILATION_CACHE_DIR"] = str(cache)  # the command line's cache, in this folder
    return env


def _stamp(run_dir: Path):
    """Identifies the checkpoint now in `run_dir` (None: none): a new save changes it."""
    try:
        st = (run_dir / "checkpoint" / "checksums.json").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def debris(run_dir: Path) -> list[str]:
    """Hidden files and folders of interrupted writes left in `run_dir` (and its checkpoint); the run
    folder's lock file (`fusedrl.run_lock.LOCK_FILE`) stays by design and is none of them."""
    found = []
    for folder in (run_dir, run_dir / "checkpoint"):
        if folder.is_dir():
            found += [str(p.relative_to(run_dir)) for p in folder.iterdir()
                      if p.name.startswith(".") and not (folder == run_dir and p.name == LOCK_FILE)]
    return sorted(found)


class _Runner:
    def __init__(self, out: Path, updates: int, timeout: float):
        self.out, self.timeout = out, timeout
        self.env = _env(out / "jax-cache")
        self.base = [sys.executable, "-m", "fusedrl.cli", "train", *RUN_ARGS,
                     "--set", f"total_timesteps={8 * 16 * updates}"]

    def start(self, run_dir: Path, resume: bool) -> subprocess.Popen:
        cmd = ([sys.executable, "-m", "fusedrl.cli", "train", "--resume", str(run_dir), "--no-progress"]
               if resume else [*self.base, "--out", str(run_dir), "--overwrite"])
        log = open(run_dir.parent / f"{run_dir.name}.log", "ab")  # noqa: SIM115 (closed in finish)
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        proc.log = log
        return proc

    def finish(self, proc: subprocess.Popen) -> int:
        try:
            return proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"a training process ran over {self.timeout:.0f} s: {proc.args}") from None
        finally:
            proc.log.close()


def uninterrupted(runner: _Runner, name: str) -> tuple[Path, float]:
    """A run trained without interruption, and its time from its first checkpoint to its exit."""
    run_dir = runner.out / name
    proc = runner.start(run_dir, resume=False)
    first = None
    while proc.poll() is None:
        if first is None and _stamp(run_dir) is not None:
            first = time.perf_counter()
        time.sleep(0.01)
    end = time.perf_counter()
    if runner.finish(proc) != 0:
        log = (run_dir.parent / f"{name}.log").read_text(errors="replace")
        raise RuntimeError(f"the {name} run failed:\n{log[-3000:]}")
    return run_dir, end - (first or end)


def kill_trials(runner: _Runner, ref: Path, window: float, kills: int, per_run: int,
                rng: np.random.Generator) -> dict:
    """Run folders killed at random moments and resumed, until `kills` kills have landed."""
    expected = (ref / "metrics.csv").read_bytes()
    # Times from a process's own first checkpoint to its exit, of those that ended before their kill:
    # the window follows their median, so that most kills land (a resumed process has less to do).
    lived = [window]
    stats = {"kills": 0, "kills_in_identical_runs": 0, "runs": 0, "runs_identical": 0, "runs_with_debris": 0,
             "runs_failed": 0, "restarts_without_checkpoint": 0, "kills_leaving_debris": 0}
    while stats["kills"] < kills:
        i = stats["runs"]
        run_dir = runner.out / f"run-{i:03d}"
        run_kills, resume, failed = 0, False, None
        while True:
            before = _stamp(run_dir)
            proc = runner.start(run_dir, resume)
            if run_kills < per_run and stats["kills"] < kills:
                while proc.poll() is None and _stamp(run_dir) in (before, None):
                    time.sleep(0.005)  # until this process has saved a checkpoint of its own
                saved = time.perf_counter()
                deadline = saved + rng.uniform(0.0, float(np.median(lived)))
                while proc.poll() is None and time.perf_counter() < deadline:
                    time.sleep(0.001)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    runner.finish(proc)  # reaped: its pid no longer runs
                    run_kills += 1
                    stats["kills"] += 1
                    stats["kills_leaving_debris"] += bool(debris(run_dir))  # the next process removes it
                    if _status(run_dir) == "finished":  # killed after its last write
                        break
                    resume = (run_dir / "checkpoint").is_dir() or any(
                        n.startswith(".checkpoint.") for n in debris(run_dir))
                    continue
                lived.append(time.perf_counter() - saved)
            code = runner.finish(proc)
            if code == 0:
                break
            log = (run_dir.parent / f"{run_dir.name}.log").read_text(errors="replace")
            if resume and "has no checkpoint to resume from" in log.rsplit("$ ", 1)[-1]:
                stats["restarts_without_checkpoint"] += 1  # killed before its first checkpoint
                resume = False
                continue
            failed = f"exit {code}: {log.rsplit('$ ', 1)[-1][-2000:]}"
            break
        stats["runs"] += 1
        left = debris(run_dir)
        status = _status(run_dir)
        identical = (failed is None and status == "finished" and (run_dir / "metrics.csv").is_file()
                     and (run_dir / "metrics.csv").read_bytes() == expected)
        stats["runs_identical"] += identical
        stats["kills_in_identical_runs"] += run_kills if identical else 0
        stats["runs_with_debris"] += bool(left)
        stats["runs_failed"] += failed is not None
        print(f"run {i:3d}: {run_kills} kill(s), metrics.csv {'identical' if identical else 'DIFFERENT'}, "
              f"status {status}{', debris: ' + ' '.join(left) if left else ''}"
              f"{', FAILED ' + failed if failed else ''}", flush=True)
        if identical and not left:
            shutil.rmtree(run_dir)  # keep the folders that show a problem
    return stats


def _status(run_dir: Path):
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def flip_trials(ref: Path, work: Path, flips: int, rng: np.random.Generator) -> dict:
    """`flips` damaged copies of the reference's checkpoint, each loaded with `fusedrl.load`."""
    import warnings

    import fusedrl
    from fusedrl.checkpoint import CheckpointError

    run_dir = work / "flipped"
    shutil.copytree(ref, run_dir)
    fusedrl.load(run_dir)  # intact: it loads
    files = sorted(p for p in (run_dir / "checkpoint").rglob("*") if p.is_file())
    stats = {"flips": 0, "flips_detected": 0, "flips_refused_otherwise": 0}
    for j in range(flips):
        file = files[int(rng.integers(len(files)))]
        kept = file.read_bytes()
        data = bytearray(kept)
        count = min(int(rng.integers(1, 65)), len(data))
        for k in rng.choice(len(data), size=count, replace=False):
            data[k] ^= int(rng.integers(1, 256))
        file.write_bytes(bytes(data))
        name = file.relative_to(run_dir)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fusedrl.load(run_dir)
            print(f"flip {j:3d}: {count} byte(s) of {name}: NOT DETECTED (load succeeded)", flush=True)
        except CheckpointError:
            stats["flips_detected"] += 1
        except Exception as e:  # refused, but not as a damaged checkpoint
            stats["flips_refused_otherwise"] += 1
            print(f"flip {j:3d}: {count} byte(s) of {name}: refused with {type(e).__name__}: {e}", flush=True)
        finally:
            file.write_bytes(kept)
        stats["flips"] += 1
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("kills", "flips"):
        if getattr(args, name) < 0:
            raise SystemExit(f"--{name} must be >= 0, got {getattr(args, name)}.")
    if args.kills_per_run < 1 or args.updates < 2:
        raise SystemExit("--kills-per-run must be >= 1 and --updates >= 2.")
    rng = np.random.default_rng(args.seed)
    out = args.out or Path(tempfile.mkdtemp(prefix="fusedrl-faults-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        runner = _Runner(out, args.updates, args.timeout)
        ref, _ = uninterrupted(runner, "reference")  # compiles, into the cache the others load from
        warm, window = uninterrupted(runner, "warm")  # as long as the processes killed below
        if (warm / "metrics.csv").read_bytes() != (ref / "metrics.csv").read_bytes():
            raise RuntimeError(f"{warm} and {ref}, both uninterrupted, differ: programs loaded from the "
                               f"compile cache do not compute what they did when compiled.")
        print(f"reference: {args.updates} updates, {window:.1f} s from its first checkpoint to its exit "
              f"({out})", flush=True)
        stats = flip_trials(ref, out, args.flips, rng)
        print(f"flips detected: {stats['flips_detected']}/{stats['flips']}", flush=True)
        stats.update(kill_trials(runner, ref, window, args.kills, args.kills_per_run, rng))
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    stats.update(seed=args.seed, updates=args.updates, kills_per_run=args.kills_per_run,
                 seconds=round(time.perf_counter() - started, 1))
    print(f"kills resumed byte-identical: {stats['kills_in_identical_runs']}/{stats['kills']} "
          f"({stats['runs_identical']}/{stats['runs']} runs; {stats['kills_leaving_debris']} kill(s) left "
          f"debris for the resume to remove); runs with debris left at the end: "
          f"{stats['runs_with_debris']}; flips detected: {stats['flips_detected']}/{stats['flips']}")
    print(json.dumps({"bench": "faults", **stats}), flush=True)
    ok = (stats["runs_identical"] == stats["runs"] and not stats["runs_with_debris"]
          and stats["flips_detected"] == stats["flips"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
