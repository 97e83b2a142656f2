"""How every benchmark here times a jitted program: compile apart, then one execution.

Imports only jax, so `_purejaxrl_peer.py` can use it from the peers' interpreter (which has no
fusedrl), and a peer is timed exactly like ours.
"""

import platform
import re
import time

import jax


def compile_then_run(fn, *args):
    """`fn` (a `jax.jit`-wrapped function) compiled for `args`, then run once to completion.

    Returns (output, compile seconds, run seconds): lowering and compiling are timed apart from
    the execution, which is timed up to `block_until_ready`.
    """
    out, compile_s, run_s, _ = compile_measure_run(fn, *args)
    return out, compile_s, run_s


def compile_measure_run(fn, *args):
    """`compile_then_run`, also returning XLA's memory analysis of the compiled program
    (`memory_bytes`): (output, compile seconds, run seconds, memory dict or None)."""
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    t1 = time.perf_counter()
    memory = memory_bytes(compiled)
    out = jax.block_until_ready(compiled(*args))
    t2 = time.perf_counter()
    return out, t1 - t0, t2 - t1, memory


def memory_bytes(compiled):
    """XLA's memory analysis of a compiled program (`compiled.memory_analysis()`), in bytes:
    {"argument", "output", "temp", "alias", "total"}, where `total` = argument + output + temp -
    alias (an output aliasing an argument is one buffer) is the device memory the program needs
    while it runs: its inputs, its outputs and its temporaries at their peak (XLA's buffer
    assignment packs the temporaries by liveness, so `temp` is that peak). None where the platform
    gives no analysis."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001  (a backend without the analysis: none, rather than a failed row)
        return None
    if stats is None:
        return None
    stats = stats[0] if isinstance(stats, (list, tuple)) else stats
    out = {name: int(getattr(stats, f"{name}_size_in_bytes"))
           for name in ("argument", "output", "temp", "alias")}
    out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
    return out


#: The widest SIMD extension first: XLA:CPU picks its kernels by these, and kernels of another width
#: round differently, so the same key trains a slightly different agent on another processor.
_SIMD = ("avx512f", "avx2", "avx", "sse4_2", "asimd", "neon")


def cpu_model() -> str:
    """The processor's model and its widest SIMD extension, e.g. "Intel(R) Xeon(R) Processor
    (family 6 model 207), avx512f" (Linux's /proc/cpuinfo; elsewhere what `platform` knows).
    Benchmarks print it: the same key and code give bit-identical results on one processor, not
    across processor models."""
    try:
        with open("/proc/cpuinfo") as f:
            return cpu_model_from(f.read())
    except OSError:
        return platform.processor() or platform.machine() or "unknown processor"


def cpu_model_from(cpuinfo: str) -> str:
    """`cpu_model` of the text of a /proc/cpuinfo (x86's "model name" and "flags", Arm's "Model"
    or "Features")."""
    model = re.search(r"^(?:model name|Model|cpu model)\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    have = set(flags.group(1).split()) if flags else set()
    simd = next((f for f in _SIMD if f in have), None)
    name = model.group(1).strip() if model else (platform.machine() or "unknown processor")
    # x86 numbers tell apart generations that a virtual machine names alike ("Intel(R) Xeon(R) Processor")
    family = re.search(r"^cpu family\s*:\s*(\d+)$", cpuinfo, re.MULTILINE)
    number = re.search(r"^model\s*:\s*(\d+)$", cpuinfo, re.MULTILINE)
    if family and number:
        name += f" (family {family.group(1)} model {number.group(1)})"
    return name if simd is None else f"{name}, {simd}"
