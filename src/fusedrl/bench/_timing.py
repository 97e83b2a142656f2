"""How every benchmark here times a jitted program: compile apart, then one execution.

Imports only jax, so `_purejaxrl_peer.py` can use it from the peers' interpreter (which has no
fusedrl), and a peer is timed exactly like ours.
"""

import time

import jax


def compile_then_run(fn, *args):
    """`fn` (a `jax.jit`-wrapped function) compiled for `args`, then run once to completion.

    Returns (output, compile seconds, run seconds): lowering and compiling are timed apart from
    the execution, which is timed up to `block_until_ready`.
    """
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    t1 = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    t2 = time.perf_counter()
    return out, t1 - t0, t2 - t1
