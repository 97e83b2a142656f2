"""A run's compiled programs and their one cache: which programs a run needs (one program, or
pieces of updates shared over host threads), compiled once per process.

No program of a run has a host callback: JAX's persistent compile cache never stores a program that
has one, and progress comes from the metrics of the pieces instead (`fusedrl.run_driver`).
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import jax

from fusedrl import streams as _streams
from fusedrl.envs.registry import on_register
from fusedrl.platform import choices_platform
from fusedrl.streams import compile_in_pieces, resolve_streams
from fusedrl.train import TrainResult, make_train
from fusedrl.train.config import OnPolicyConfig, strong_hparams
from fusedrl.train.trainer import Trainer

#: About this many pieces per run when a run is trained in pieces (progress, several host threads,
#: checkpoints): the progress bar moves at each piece's end, and each piece costs one launch.
PIECES_PER_RUN = 50


def num_streams(num_seeds: int) -> int:
    """Host threads that share a run's `num_seeds` seeds, each running a vmap of an equal share.

    On a lone CPU device: the largest count of usable cores that divides `num_seeds` (one program
    per core: see `fusedrl.streams`; `python -m fusedrl.bench runs` measures this program).
    Elsewhere 1: one vmap of every seed.
    """
    cap = resolve_streams(None, tuple(jax.devices()), num_seeds)  # the sweep's default: cores, or 1
    return max(s for s in range(1, cap + 1) if num_seeds % s == 0)


def checkpoint_segments(num_updates: int, checkpoint_every: int, start: int = 0) -> list[tuple[int, int]]:
    """(first update, count) of the stretches of training from update `start` to `num_updates`,
    cut at every multiple of `checkpoint_every` (0: not cut), where a checkpoint is saved."""
    if not 0 <= start <= num_updates:
        raise ValueError(f"start={start} must lie in [0, num_updates={num_updates}].")
    every = checkpoint_every if checkpoint_every > 0 else num_updates + 1
    bounds = sorted({start, num_updates, *range(start - start % every + every, num_updates, every)})
    return [(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def piece_length(num_updates: int, checkpoint_every: int = 0) -> int:
    """Updates per piece of a run trained in pieces: the largest length of at most `num_updates /
    PIECES_PER_RUN` (and `fusedrl.streams.STREAM_PIECE_UPDATES`) that divides every stretch between
    checkpoints (`checkpoint_segments`), so that one advance program serves the whole run. It
    depends on the run's config and checkpoint interval only, never on where a resumed run starts,
    its progress interval or the host threads: the same run is the same pieces, bit for bit."""
    counts = [n for _, n in checkpoint_segments(num_updates, checkpoint_every)]
    whole = functools.reduce(math.gcd, counts, 0)
    target = max(1, min(num_updates // PIECES_PER_RUN, _streams.STREAM_PIECE_UPDATES))
    return max((d for d in range(1, min(target, whole) + 1) if whole % d == 0), default=1)


def pieces_plan(config: OnPolicyConfig, callback_every: int, streams: int, *, checkpoint_every: int = 0,
                start_update: int = 0) -> list[list[tuple[int, int]]] | None:
    """The pieces (first update, count) of each stretch between checkpoints of a run from
    `start_update`, all of one length (`piece_length`: one advance program); None when the run is
    one program: one share (`streams` 1) trained from the start, without checkpoints or progress."""
    segments = checkpoint_segments(config.num_updates, checkpoint_every, start_update)
    if streams == 1 and len(segments) == 1 and start_update == 0 and not callback_every:
        return None
    n = piece_length(config.num_updates, checkpoint_every)
    return [[(f, n) for f in range(first, first + count, n)] for first, count in segments]


def _strong(result: TrainResult) -> TrainResult:
    """`result` with the hparams a checkpoint restores (`strong_hparams`): the env params' Python
    numbers come out of training as weakly typed arrays, which `evaluate` would compile a second
    program for when the run is evaluated again from its folder."""
    return result.replace(hparams=strong_hparams(result.hparams))


def _program(train: Trainer):
    """The jitted train of a share of seeds, `train_share(keys, hparams)`, as one program."""
    def train_share(keys, hparams):
        return _strong(jax.vmap(lambda key: train.run(train.init(key, hparams), hparams))(keys))

    return jax.jit(train_share)


def _pieces_program(train: Trainer):
    """`_program` in pieces of updates (`fusedrl.streams`): (jitted `init(keys, hparams)`, jitted
    `advance(states, hparams, first_update, num_updates)`, the last static)."""
    def init(keys, hparams):
        return jax.vmap(train.init, in_axes=(0, None))(keys, hparams)

    def advance(states, hparams, first_update, num_updates):
        def one(state):
            return train.run(state, hparams, num_updates, first_update)

        return _strong(jax.vmap(one)(states))

    return jax.jit(init), jax.jit(advance, static_argnums=3)


#: The compiled programs of the latest runs: (config, seeds per share, plan, platform) -> (trainer,
#: compiled). The platform (`choices_platform()`) keys it because the trainer's choices differ by it.
_COMPILED: dict[tuple, Any] = {}


@on_register
def _forget_programs(env_id: str) -> None:
    """A (re-)registered env id: drop the programs built for the env it may replace."""
    _COMPILED.clear()


def compiled_programs(config: OnPolicyConfig, per: int, plan, env: tuple[Any, Any] | None = None):
    """(trainer, compiled, seconds spent compiling now: 0.0 when reused) for shares of `per` seeds
    run as `plan` (`pieces_plan`): for None, the one program `compiled(keys, hparams)`; otherwise
    (`init`, `advance`) compiled for every piece length (`fusedrl.streams.compile_in_pieces`).

    `env`: the run's (env, env_params), built once per run (`fusedrl.make`), for the trainer; built
    here when not given. A program compiled before for the same setup is reused, with its trainer."""
    platform = choices_platform()  # the trainer's choices differ by platform: so do its programs
    cache_key = (config, per, None if plan is None else tuple(map(tuple, plan)), platform)
    if cache_key in _COMPILED:
        return (*_COMPILED[cache_key], 0.0)
    keys = jax.ShapeDtypeStruct((per,), jax.random.key(0).dtype)
    t = time.perf_counter()
    train = make_train(config, env=env)
    hparams = train.default_hparams()
    if plan is None:
        compiled = _program(train).lower(keys, hparams).compile()
    else:
        init, advance = _pieces_program(train)
        pieces = [p for seg in plan for p in seg]
        compiled = compile_in_pieces(init, (keys, hparams), advance, (hparams,), pieces)
    seconds = time.perf_counter() - t
    if len(_COMPILED) >= 8:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[cache_key] = (train, compiled)
    return train, compiled, seconds
