"""How many kernels one training update launches, per phase, read from the compiled program.

A GPU runs a small kernel in a few microseconds whatever its size, so a training program of small
kernels (PPO's 64-wide networks, a few envs per agent) costs about its number of kernel launches
times that: at CartPole x2048 on an H200, ~5,000 launches and ~25 ms per update. This counts them
without running anything: the program is compiled (for this machine's default device, or for a GPU
model on a machine without one, `target`), and its optimised HLO is read as a tree of loops. Every
instruction that runs as a kernel (a fusion, a library call such as a cuBLAS matmul, a copy; not a
parameter, tuple, bitcast or the loop itself) counts once per iteration of each loop around it
(XLA's known trip counts), and a loop's condition once per test. Each kernel is charged to the
trainer's phase whose `jax.named_scope` it carries (`fusedrl.train.phases`, as in
`fusedrl profile --phases`).

It is a count, not a time: large kernels (Breakout's 400-wide layers at 256 agents) cost more than
a launch, and it says nothing of them. Use it to compare two programs of the same sizes (before and
after a change, fusedrl and PureJaxRL) and to see where the launches are; time the programs on the
device itself (`fusedrl profile --phases`, `python -m fusedrl.bench gpu`).

Compiling for a GPU without one needs jax's CUDA plugin of the installed jax (`pip install --no-deps
"jax-cuda12-plugin==V" "jax-cuda12-pjrt==V"`; no CUDA libraries are needed to compile) and
`JAX_PLATFORMS=cpu` (so that jax does not look for a device to run on); XLA then compiles for the
model's description in `GPU_TARGETS` (compute capability, cores, memory) without a driver.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from typing import Any

import jax
from jax.experimental import topologies

from fusedrl.platform import choices_for
from fusedrl.train import make_train
from fusedrl.train.phases import PHASE_ROWS, hlo_computations, hlo_phases

#: Operations that launch nothing: values that already exist, and the containers whose bodies and
#: branches are counted instead.
NOT_KERNELS = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "add-dependency",
    "opt-barrier", "partition-id", "replica-id", "while", "conditional", "call", "domain",
    "async-done", "async-update", "copy-done", "send-done", "recv-done",
})

_BODY = re.compile(r"\bbody=%?([\w.\-]+)")
_CONDITION = re.compile(r"\bcondition=%?([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_TO_APPLY = re.compile(r"\bto_apply=%?([\w.\-]+)")
_BRANCHES = re.compile(r"\b(?:branch_computations=\{([^}]*)\}|true_computation=%?([\w.\-]+), "
                       r"false_computation=%?([\w.\-]+))")


@dataclass(frozen=True)
class Loop:
    """One while loop of a program: where it is (`path`: the loops around it, outermost first, then
    its own instruction name), its trip count (None: XLA does not know it; counted as 1), how many
    times it starts in one run of the program (`starts`), and the kernels one iteration of its body
    and condition launches, by phase (loops inside it not included)."""

    path: tuple[str, ...]
    trip: int | None
    starts: int
    per_iteration: dict[str, int]

    @property
    def iterations(self) -> int:
        return self.starts * (self.trip or 1)

    @property
    def launches(self) -> int:
        return self.iterations * sum(self.per_iteration.values())


@dataclass(frozen=True)
class Launches:
    """The kernel launches of one run of a compiled program: by phase (`PHASE_ROWS`), the kernels
    outside any loop (`top`), and every loop (`loops`, outermost first)."""

    per_phase: dict[str, int]
    top: dict[str, int]
    loops: tuple[Loop, ...]

    @property
    def total(self) -> int:
        return sum(self.per_phase.values())

    def loop_rows(self) -> list[dict[str, Any]]:
        """The loops as JSON rows: path, trip, starts, kernels per iteration, launches in all."""
        return [{"path": list(lp.path), "trip": lp.trip, "starts": lp.starts,
                 "per_iteration": sum(lp.per_iteration.values()), "launches": lp.launches}
                for lp in self.loops]


def count_launches(hlo_text: str) -> Launches:
    """The kernel launches of one run of the program whose optimised HLO is `hlo_text`
    (`jax.jit(f).lower(...).compile().as_text()`), from its loops' known trip counts. A conditional
    counts its largest branch (an upper bound: which branch runs is decided at run time)."""
    _, entry, computations = hlo_computations(hlo_text)
    if entry is None:
        raise ValueError("no ENTRY computation in this HLO text: pass a compiled program's "
                         "`compiled.as_text()`")
    _, phases = hlo_phases(hlo_text, computations)
    loops: list[Loop] = []
    per_phase = dict.fromkeys(PHASE_ROWS, 0)

    def kernels(computation: str, path: tuple[str, ...], starts: int) -> collections.Counter:
        """Kernels one run of `computation` launches outside its loops, by phase; records its loops."""
        here: collections.Counter = collections.Counter()
        for name, opcode, rest in computations.get(computation, ()):
            if opcode == "while":
                body, condition = _BODY.search(rest).group(1), _CONDITION.search(rest).group(1)
                trip = _TRIP.search(rest)
                trip = int(trip.group(1)) if trip else None
                iterations = starts * (trip or 1)
                per_iteration = kernels(body, (*path, name), iterations)
                tests = kernels(condition, (*path, name), iterations + starts)
                loops.append(Loop((*path, name), trip, starts, dict(per_iteration + tests)))
                for phase, n in per_iteration.items():
                    per_phase[phase] += n * iterations
                for phase, n in tests.items():  # the condition runs once more than the body
                    per_phase[phase] += n * (iterations + starts)
            elif opcode == "call":
                to_apply = _TO_APPLY.search(rest)
                if to_apply:
                    here += kernels(to_apply.group(1), path, starts)
            elif opcode == "conditional":
                m = _BRANCHES.search(rest)
                names = (m.group(1).replace("%", "").split(",") if m and m.group(1)
                         else [g for g in (m.groups()[1:] if m else ()) if g])
                branches = [kernels(b.strip(), path, starts) for b in names]
                here += max(branches, key=lambda c: sum(c.values()), default=collections.Counter())
            elif opcode not in NOT_KERNELS:
                here[phases.get(name, ("", "other"))[1]] += 1
        return here

    # Loops register themselves (innermost first); list them outermost first, as the program nests them.
    top = kernels(entry, (), 1)
    for phase, n in top.items():
        per_phase[phase] += n
    return Launches(per_phase, dict(top), tuple(sorted(loops, key=lambda lp: lp.path)))


#: GPU models a program can be compiled for without the GPU (`target`): XLA's description of each
#: (a `stream_executor.GpuTargetConfigProto` in text form, the fields XLA's GPU compiler reads),
#: from the vendors' published figures. The H100 (SXM) and H200 share the Hopper die (132 cores,
#: compute capability 9.0) and differ in memory, which the fusion decisions read little.
_HOPPER = """gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {bandwidth}
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: {memory}
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 10 }}
device_description_str: "{name}"
"""
GPU_TARGETS = {
    "h100": _HOPPER.format(bandwidth=3352000000000, memory=85520809984, name="NVIDIA H100 80GB HBM3"),
    "h200": _HOPPER.format(bandwidth=4800000000000, memory=151397597184, name="NVIDIA H200"),
}


def target_device(target: str | None):
    """The device to compile for: None or "default" is jax's default device; a name in
    `GPU_TARGETS` is a compile-only device of that GPU model (no GPU needed; jax's CUDA plugin is)."""
    if target in (None, "default"):
        return jax.devices()[0]
    if target not in GPU_TARGETS:
        raise ValueError(f"unknown target {target!r}: choose 'default' (this machine's device) or one of "
                         f"{', '.join(sorted(GPU_TARGETS))} (compiled without that GPU)")
    try:
        topology = topologies.get_topology_desc(platform="cuda", target_config=GPU_TARGETS[target],
                                                topology="1x1x1")
    except Exception as e:  # no plugin: jax raises RuntimeError or NotImplementedError by version
        raise RuntimeError(
            f"compiling for {target} without a GPU needs jax's CUDA plugin of this jax version (pip "
            f"install --no-deps jax-cuda12-plugin=={jax.__version__} jax-cuda12-pjrt=={jax.__version__}) "
            f"and JAX_PLATFORMS=cpu set before jax starts: {type(e).__name__}: {e}") from e
    return topology.devices[0]


def training_program(trainer, agents: int | None, updates: int):
    """(init, run) of what a profile measures: `init(key)` makes the state of one agent or, with
    `agents`, of that many (`jax.vmap`, as `jax.jit(jax.vmap(train))` trains them); `run(state)`
    trains `updates` updates from it and returns the state and the per-update metrics, as training
    does (a program that returned the state alone would let XLA drop the metrics' work)."""
    hp = trainer.default_hparams()
    if agents is None:
        return (lambda key: trainer.init(key, hp)), (lambda s: trainer.run(s, hp, int(updates)))

    def init(key):
        return jax.vmap(trainer.init, in_axes=(0, None))(jax.random.split(key, int(agents)), hp)

    return init, jax.vmap(lambda s: trainer.run(s, hp, int(updates)))


def program_launches(config, agents: int | None = None, updates: int = 2, target: str | None = None,
                     tuning=None) -> dict[str, Any]:
    """Kernel launches per training update of `config`, per phase: `updates` updates of the
    trainer's run, returning its state and per-update metrics as training does (with `agents`,
    vmapped over that many agents, as `jax.jit(jax.vmap(train))` trains them), compiled for
    `target` (`target_device`) and counted by `count_launches`. The trainer's speed choices are
    those of the target's platform (`tuning` overrides them)."""
    if int(updates) < 1:
        raise ValueError(f"updates must be >= 1, got {updates}.")
    if agents is not None and int(agents) < 1:
        raise ValueError(f"agents must be >= 1, got {agents}.")
    device = target_device(target)
    with choices_for(device.platform):
        trainer = make_train(config) if tuning is None else make_train(config, tuning=tuning)
    init, run = training_program(trainer, agents, int(updates))
    state = jax.eval_shape(init, jax.random.key(0))
    sharding = jax.sharding.SingleDeviceSharding(device)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state)
    compiled = jax.jit(run).trace(shapes).lower().compile()
    counted = count_launches(compiled.as_text())
    n = 1 if agents is None else int(agents)
    return {
        "bench": "launches", "env_id": config.env_id, "agents": n, "num_envs": config.num_envs,
        "num_steps": config.num_steps, "update_epochs": getattr(config, "update_epochs", 1),
        "num_minibatches": getattr(config, "num_minibatches", 1),
        "compute_dtype": getattr(config, "compute_dtype", "float32"), "updates": int(updates),
        "target": target or "default", "device": f"{device.platform}:{getattr(device, 'device_kind', '')}",
        "jax": jax.__version__,
        "per_update": {k: v / int(updates) for k, v in counted.per_phase.items()},
        "total_per_update": counted.total / int(updates),
        "loops": counted.loop_rows(),
    }


def format_launches(summary: dict[str, Any]) -> str:
    """The table `fusedrl profile --launches` prints: launches per update by phase, then the loops."""
    total = summary["total_per_update"] or 1
    lines = [f"{summary['env_id']}: {summary['agents']} agent(s) x {summary['num_envs']} envs x "
             f"{summary['num_steps']} steps, compiled for {summary['device']} (jax {summary['jax']}); "
             f"kernel launches per update (a count, not a time)",
             f"{'phase':<12}{'launches':>10}{'share':>8}"]
    for phase in PHASE_ROWS:
        n = summary["per_update"][phase]
        lines.append(f"{phase:<12}{n:>10.0f}{n / total:>8.1%}")
    lines.append(f"{'total':<12}{summary['total_per_update']:>10.0f}")
    lines.append(f"{'loop':<44}{'trip':>6}{'kernels/iter':>14}{'per update':>12}")
    for lp in summary["loops"]:
        name = "  " * (len(lp["path"]) - 1) + lp["path"][-1]
        trip = "?" if lp["trip"] is None else str(lp["trip"])
        per_update = lp["launches"] / summary["updates"]
        lines.append(f"{name:<44}{trip:>6}{lp['per_iteration']:>14}{per_update:>12.0f}")
    return "\n".join(lines)


__all__ = ["GPU_TARGETS", "NOT_KERNELS", "Launches", "Loop", "count_launches", "format_launches",
           "program_launches", "target_device", "training_program"]
