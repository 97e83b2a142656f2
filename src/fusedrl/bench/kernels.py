"""Which XLA kernels one PPO update runs, how long each kind takes, and how many cores are busy.

    python -m fusedrl.bench kernels [--num-seeds 1] [--num-envs 4] [--num-steps 128]
                                    [--updates 10] [--top 12] [--by-kernel]

Trains `--num-seeds` CartPole agents at PureJaxRL's config (as `bench ppo`) with
`jax.jit(jax.vmap(train))`: first untraced (the wall time per update that the benchmarks see),
then once under `jax.profiler`. The profiler records every kernel ("thunk") that XLA's runtime
executes; this groups them by HLO instruction name without its numeric suffix (`ynn_fusion.13`
-> `ynn_fusion`) and prints, per update: the kernels' summed time, how many ran, the share that
contained a matrix product, the busy time of each runtime thread, and "cores busy" (summed kernel
time / wall time). Loops and conditionals are containers, not kernels: their own spans are left
out, the kernels inside them are counted. The profiler adds one to two microseconds per kernel, so
compare the untraced and traced wall times before reading much into a program of tiny kernels.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

import jax

from fusedrl._argtypes import positive_int

#: HLO ops whose runtime span encloses other kernels (their bodies, branches or callees).
CONTAINER_OPS = ("while", "conditional", "call")

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
_OP = re.compile(r"\b([a-z][a-z0-9\-]*)\(")


@dataclass(frozen=True)
class Kernels:
    """The kernels of an optimised HLO module: whether each computes a matrix product, its shape."""

    has_dot: dict[str, bool]  # kernel name -> it is, or fuses, a dot or convolution
    shape: dict[str, str]  # kernel name -> its result shape, e.g. "f32[8,128,64]{2,1,0}"

    @classmethod
    def from_hlo(cls, hlo_text: str) -> Kernels:
        """Parses `compiled.as_text()`: every instruction that is not a container is a kernel.
        A fusion contains a matrix product when its fused computation has a dot or convolution."""
        ops: dict[str, str] = {}  # instruction -> op
        shapes: dict[str, str] = {}
        calls: dict[str, str] = {}  # fusion -> fused computation
        computation_ops: dict[str, set[str]] = collections.defaultdict(set)
        current = None
        for line in hlo_text.splitlines():
            m = _COMPUTATION.match(line)
            if m and "=" not in line.split("{")[0]:
                current = m.group(1)
                continue
            m = _INSTRUCTION.match(line)
            if not m:
                continue
            name, rhs = m.groups()
            op, shapes[name] = _op_of(rhs), _shape_of(rhs)
            ops[name] = op
            if current is not None:
                computation_ops[current].add(op)
            called = _CALLS.search(rhs)
            if called:
                calls[name] = called.group(1)
        has_dot = {}
        for name, op in ops.items():
            if op in CONTAINER_OPS:
                continue
            inner = computation_ops.get(calls.get(name, ""), set())
            has_dot[name] = op in ("dot", "convolution") or bool(inner & {"dot", "convolution"})
        return cls(has_dot, {name: shapes[name] for name in has_dot})


def _shape_end(rhs: str) -> int:
    """Where the result shape of an instruction's right-hand side `shape op(operands), attrs`
    ends: at the first space outside brackets (tuple shapes are parenthesised, with spaces)."""
    depth = 0
    for i, ch in enumerate(rhs):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == " " and depth == 0:
            return i
    return len(rhs)


def _shape_of(rhs: str) -> str:
    return rhs[: _shape_end(rhs)]


def _op_of(rhs: str) -> str:
    """The op of an instruction's right-hand side: the first `word(` after the shape."""
    m = _OP.search(rhs, _shape_end(rhs))
    return m.group(1) if m else ""


@dataclass(frozen=True)
class Profile:
    """Kernel time of one traced run, per update."""

    updates: int
    wall_s: float  # traced run
    kernel_us: dict[str, float]  # category -> summed microseconds
    kernel_count: dict[str, int]  # category -> kernels run
    dot_us: float  # summed microseconds of kernels containing a matrix product
    thread_us: dict[int, float]  # runtime thread -> summed kernel microseconds

    @property
    def total_us(self) -> float:
        return sum(self.kernel_us.values())

    @property
    def cores_busy(self) -> float:
        return self.total_us / 1e6 / self.wall_s if self.wall_s > 0 else 0.0


def category(name: str) -> str:
    """`ynn_fusion.13` -> `ynn_fusion`: one row per kind of kernel."""
    return re.sub(r"\.\d+$", "", name)


def aggregate(
    events: Sequence[dict], kernels: Kernels, updates: int, wall_s: float, by_instruction: bool = False
) -> Profile:
    """Sums complete ("X") trace events of `kernels` by category (or, with `by_instruction`, by
    kernel); other events are ignored."""
    us: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    threads: collections.Counter = collections.Counter()
    dot = 0.0
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or name not in kernels.has_dot:
            continue
        dur = float(e.get("dur", 0.0))
        key = name if by_instruction else category(name)
        us[key] += dur
        count[key] += 1
        threads[e.get("tid", 0)] += dur
        if kernels.has_dot[name]:
            dot += dur
    return Profile(updates, wall_s, dict(us), dict(count), dot, dict(threads))


def read_trace(log_dir: str) -> list[dict]:
    """The events of the Perfetto trace `jax.profiler.trace(log_dir, create_perfetto_trace=True)`
    wrote (the newest, if several)."""
    paths = sorted(glob.glob(os.path.join(log_dir, "**", "*.trace.json.gz"), recursive=True),
                   key=os.path.getmtime)
    if not paths:
        raise RuntimeError(f"jax.profiler wrote no *.trace.json.gz under {log_dir}.")
    with gzip.open(paths[-1], "rt", encoding="utf-8") as f:
        return json.load(f)["traceEvents"]


def profile(
    num_seeds: int, num_envs: int, num_steps: int, updates: int, repeats: int = 3,
    by_instruction: bool = False,
):
    """(untraced seconds per update: median of `repeats`, traced `Profile`, the `Kernels`)."""
    from fusedrl.bench.ppo import _config
    from fusedrl.train import make_train

    config = _config(num_envs, num_steps, num_envs * num_steps * updates)
    keys = jax.random.split(jax.random.key(0), num_seeds)
    compiled = jax.jit(jax.vmap(make_train(config))).lower(keys).compile()
    kernels = Kernels.from_hlo(compiled.as_text())
    jax.block_until_ready(compiled(keys))  # warm: first-run allocations stay out of the timings
    walls = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(compiled(keys))
        walls.append(time.perf_counter() - t)
    with tempfile.TemporaryDirectory() as log_dir:
        with jax.profiler.trace(log_dir, create_perfetto_trace=True):
            t = time.perf_counter()
            jax.block_until_ready(compiled(keys))
            traced = time.perf_counter() - t
        events = read_trace(log_dir)
    n = config.num_updates
    return statistics.median(walls) / n, aggregate(events, kernels, n, traced, by_instruction), kernels


def format_report(untraced_s: float, p: Profile, top: int, shapes: dict[str, str] | None = None) -> str:
    """The report `main` prints; with `shapes` (kernel name -> shape) rows are kernels, not kinds."""
    total = p.total_us
    lines = [
        f"wall per update: {untraced_s * 1e3:.2f} ms untraced, {p.wall_s * 1e3 / p.updates:.2f} ms traced",
        f"kernels per update: {sum(p.kernel_count.values()) / p.updates:,.0f}, "
        f"{total / 1e3 / p.updates:.2f} ms summed; cores busy {p.cores_busy:.2f}; "
        f"kernels with a matrix product: {100 * p.dot_us / total if total else 0:.0f}% of kernel time",
        "busy per runtime thread (ms/update): "
        + ", ".join(f"{us / 1e3 / p.updates:.2f}" for us in sorted(p.thread_us.values(), reverse=True)
                    if us >= 0.01 * total),
        "",
        f"{'kernel':<40} {'ms/update':>10} {'share':>6} {'count/update':>13} {'us each':>8}"
        + ("  shape" if shapes else ""),
    ]
    rows = sorted(p.kernel_us.items(), key=lambda kv: -kv[1])
    for name, us in rows[:top]:
        n = p.kernel_count[name]
        lines.append(f"{name[:40]:<40} {us / 1e3 / p.updates:>10.3f} "
                     f"{100 * us / total:>5.1f}% {n / p.updates:>13.1f} {us / n:>8.1f}"
                     + (f"  {shapes.get(name, '')}" if shapes else ""))
    if len(rows) > top:
        rest = sum(us for _, us in rows[top:])
        lines.append(f"{f'({len(rows) - top} more rows)':<40} {rest / 1e3 / p.updates:>10.3f} "
                     f"{100 * rest / total:>5.1f}%")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench kernels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-seeds", type=positive_int, default=1)
    p.add_argument("--num-envs", type=positive_int, default=4)
    p.add_argument("--num-steps", type=positive_int, default=128)
    p.add_argument("--updates", type=positive_int, default=10,
                   help="updates per run (few: the trace holds every kernel of the run)")
    p.add_argument("--repeats", type=positive_int, default=3, help="untraced timed runs")
    p.add_argument("--top", type=positive_int, default=12, help="rows listed")
    p.add_argument("--by-kernel", action="store_true",
                   help="one row per kernel (with its shape) instead of per kind of kernel")
    args = p.parse_args(argv)
    untraced, prof, kernels = profile(args.num_seeds, args.num_envs, args.num_steps, args.updates,
                                      args.repeats, by_instruction=args.by_kernel)
    print(f"CartPole-v1, {args.num_seeds} seed(s) x {args.num_envs} envs x {args.num_steps} steps, "
          f"{args.updates} updates, jax {jax.__version__} on {jax.devices()[0].platform}")
    print(format_report(untraced, prof, args.top, kernels.shape if args.by_kernel else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
