"""The `fusedrl` command line: train with live progress, evaluate saved runs, list environments.

    fusedrl train --env CartPole-v1 --num-seeds 4
    fusedrl train --config runs/CartPole-v1/config.json --set lr=1e-3 --out runs/faster
    fusedrl evaluate runs/CartPole-v1
    fusedrl envs
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusedrl import __version__
from fusedrl._argtypes import (
    UsageError,
    add_import_option,
    check_network,
    env_param_defaults,
    import_modules,
    key_seed_arg,
    parse_overrides,
    positive_int,
    seed_arg,
)
from fusedrl._cli_parser import SuggestingParser
from fusedrl.compile_cache import use_compile_cache

# Start-up time: JAX, the environments and the trainer are imported inside the functions of the
# commands that need them, so that `fusedrl --help` and usage errors answer at once.
if TYPE_CHECKING:
    from fusedrl.train.config import OnPolicyConfig

# A user error: printed as `fusedrl COMMAND: error: ...` with exit status 2. One class for every
# command, so the shared --set parser's errors are caught alike (also by `fusedrl.bench runs`).
CLIError = UsageError


DESCRIPTION = """\
On-policy RL fused into one JAX program: environments, rollouts and PPO updates are
compiled together and run on the device; many seeds train at once (jax.vmap; on a CPU, one
vmapped program per core, each on its share of the seeds)."""

TRAIN_EPILOG = """\
examples:
  fusedrl train --env CartPole-v1                       the tuned preset, 1 seed
  fusedrl train --env CartPole-v1 --num-seeds 8 --out runs/cp8
  fusedrl train --env Pendulum-v1 --set lr=1e-3 --set hidden_sizes=64,64 --set normalize_obs=true
  fusedrl train --config runs/cp8/config.json --out runs/cp8-again   (rerun a saved config)
  fusedrl train --env gymnax:Breakout-MinAtar --checkpoint-every 100 --out runs/bo
  fusedrl train --resume runs/bo          (continue it after Ctrl-C, from its latest checkpoint)
  fusedrl train --resume runs/mine --trust-imports   (its config.json names modules to import)

--set takes any field of --algo's config (PPOConfig, A2CConfig or ReinforceConfig; values are
parsed with the field's type: ints, floats, true/false, comma-separated hidden_sizes) and env
params as env_params.NAME=VALUE (or NAME=VALUE), parsed as in `fusedrl sweep`. A "gymnasium:" env id
trains one seed through the host bridge.
The run folder gets config.json, metrics.csv, learning_curve.png, checkpoint/, summary.json.
One process at a time trains or resumes a run folder (it holds the folder's lock); a second is refused.
A config.json that names modules to import (its imports, a network "module:function") is read only with
--trust-imports (or --import MODULE for each): importing a module runs its code."""


def build_parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(  # "did you mean --num-seeds?" for every subcommand's mistyped options
        prog="fusedrl", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"fusedrl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    t = sub.add_parser(
        "train", help="train an agent (live progress, summary table, saved run folder)",
        description="Train PPO on an environment with its tuned preset; several seeds in one program.",
        epilog=TRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("--env", metavar="ID", help="environment id (see `fusedrl envs`); uses its preset")
    t.add_argument("--algo", choices=("ppo", "a2c", "reinforce"),
                   help="the algorithm (default ppo; with --config, the file's)")
    t.add_argument("--config", metavar="FILE", type=Path,
                   help="a config.json of an earlier run (or a JSON/TOML file of config fields)")
    t.add_argument("--num-seeds", type=int, metavar="N",
                   help="seeds trained at once (default 1; on a lone CPU device split over its cores, "
                        "elsewhere one vmapped program on the default device)")
    t.add_argument("--seed", type=seed_arg, metavar="S", help="base random seed (default 0)")
    t.add_argument("--total-timesteps", type=int, metavar="T", help="env steps per seed")
    t.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="overrides",
                   help="override a field of the algorithm's config (repeatable)")
    t.add_argument("--out", type=Path, metavar="DIR", help="run folder (default runs/<env id>[-N])")
    t.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    t.add_argument("--eval-episodes", type=int, metavar="N",
                   help="greedy evaluation episodes per seed after training (default 64)")
    t.add_argument("--progress-every", type=int, metavar="K",
                   help="updates between progress/log callbacks; 0 = none (default: about 50 per run)")
    t.add_argument("--checkpoint-every", type=int, metavar="K",
                   help="updates between checkpoints during training, for --resume (default 0: none "
                        "during training, only the trained agents' final checkpoint)")
    t.add_argument("--resume", type=Path, metavar="RUN_DIR",
                   help="continue an interrupted run from its latest checkpoint, as its config.json says")
    add_trust_option(t, "--config's or --resume's config.json")
    t.add_argument("--no-progress", action="store_true", help="no progress bar (metrics are still logged)")
    t.add_argument("--tensorboard", action="store_true",
                   help="also log to TensorBoard in <run folder>/tensorboard (needs tensorboardX)")
    t.add_argument("--wandb-project", metavar="NAME",
                   help="also log to Weights & Biases, one W&B run per seed (needs wandb >= 0.19.10)")
    add_import_option(t)
    add_compile_cache_option(t)

    e = sub.add_parser(
        "evaluate", help="greedy (or sampled-action) returns of a saved run, per seed",
        description="Evaluate the checkpoint of a run folder greedily, every seed. With the defaults it "
                    "reproduces the greedy returns in the run's summary.json (same episodes, same key).",
    )
    e.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    e.add_argument("--episodes", type=int, metavar="N",
                   help="episodes per seed (default: the run's eval_episodes, as in summary.json)")
    e.add_argument("--seed", type=key_seed_arg, metavar="S",
                   help="evaluation key seed (default: the run's seed + 1, the key summary.json used)")
    e.add_argument("--sampled", action="store_true",
                   help="sample actions from the policy instead of taking its mode (greedy)")
    e.add_argument("--max-steps", type=positive_int, metavar="N", default=None,
                   help="end the evaluation after N steps; episodes still running report NaN "
                        "(default: 1,000,000, as the run's own evaluation)")
    add_trust_option(e, "RUN_DIR's config.json")
    add_import_option(e)
    add_compile_cache_option(e)

    v = sub.add_parser("envs", help="list environment ids with their spaces",
                       description="List the registered environments with observation and action spaces.")
    v.add_argument("--gymnax", action="store_true",
                   help="also describe every gymnax environment's spaces (not MNIST's: it downloads data)")
    v.add_argument("--suites", action="store_true",
                   help="also describe every installed suite env's spaces (slow: builds each)")
    v.add_argument("--all", action="store_true",
                   help="also list test envs (probe:*, brax:fast) and every brax:NAME@BACKEND pipeline")
    add_import_option(v)

    from fusedrl.sweep_cli import add_sweep_parser

    add_sweep_parser(sub)
    add_compile_cache_option(sub.choices["sweep"])
    from fusedrl.plot_cli import add_plot_parser

    add_plot_parser(sub)
    # The profiler has its own parser (also `python -m fusedrl.bench profile`): pass its args through.
    prof = sub.add_parser(
        "profile", add_help=False,
        help="where the wall time of one training update goes (fused or host-bridge mode)",
    )
    prof.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def add_trust_option(parser: argparse.ArgumentParser, what: str) -> None:
    """--trust-imports: import the modules a file names (`fusedrl.trust`)."""
    parser.add_argument("--trust-imports", action="store_true",
                        help=f"import the modules {what} names (its imports, the module of its network "
                             f"\"module:function\"): importing runs their code, so without this flag (or "
                             f"--import MODULE for each) such a file is refused")


def trusting(args, read):
    """`read(trust_imports)`, trusting the modules a file names with --trust-imports, or when each
    was typed with --import; otherwise a usage error naming those modules and the flag (nothing is
    imported: `read` refuses before it imports). Returns (what `read` returned, the trust used)."""
    from fusedrl.trust import CLI_FLAG, UntrustedImportsError

    try:
        return read(args.trust_imports), args.trust_imports
    except UntrustedImportsError as e:
        untrusted = [(m, why) for m, why in e.modules if m not in args.imports]
        if not untrusted:
            return read(True), True
        raise CLIError(UntrustedImportsError(e.source, untrusted).message(CLI_FLAG, cli=True)) from None


def add_compile_cache_option(parser: argparse.ArgumentParser) -> None:
    """--no-compile-cache: compile every program afresh (the cache is on by default)."""
    from fusedrl.compile_cache import ENV_VAR

    parser.add_argument("--no-compile-cache", action="store_true",
                        help=f"compile every program here instead of loading it from fusedrl's compile "
                             f"cache (~/.cache/fusedrl/jax), and save none there; or set {ENV_VAR}=0")


def cmd_plot(args) -> int:
    from fusedrl.plot_cli import cmd_plot as plot

    return plot(args)


def cmd_sweep(args) -> int:
    from fusedrl.sweep_cli import run_sweep

    return run_sweep(args)


# ----------------------------------------------------------------------------------- train
def resolve(args) -> tuple[OnPolicyConfig, Any]:
    """The config and RunOptions a `train` command asks for (no work done yet)."""
    config, options, _ = resolve_run(args)
    return config, options


def resolve_run(args) -> tuple[OnPolicyConfig, Any, tuple[Any, Any]]:
    """The config, RunOptions and built (env, env_params) of the run a `train` command asks for
    (the env is built here, once: the run takes it over)."""
    from fusedrl.envs import make
    from fusedrl.envs.host import HostEnvError, is_host_env_id
    from fusedrl.envs.registry import with_env_params
    from fusedrl.runs import RunOptions, check_supported, read_config_file
    from fusedrl.train.config import config_class
    from fusedrl.train.presets import preset

    if args.config is None and args.env is None:
        raise CLIError("train needs --env ID (see `fusedrl envs`) or --config FILE.")
    run_opts: dict[str, Any] = {}
    if args.config is not None:
        try:
            base, run_opts, file_algo = read_config_file(args.config)
        except (OSError, ValueError) as e:
            raise CLIError(str(e)) from None
        if args.algo is not None and args.algo != file_algo:
            raise CLIError(f"--algo {args.algo} conflicts with {args.config}, a config of {file_algo}; "
                           f"drop --algo or use another file.")
        algo = file_algo
        try:
            options = RunOptions(**run_opts)  # checks its imports before they are imported
        except (TypeError, ValueError) as e:
            raise CLIError(f"{args.config} is invalid: {e} Fix that field in the file.") from None
        # Its modules are imported only if trusted. Typed modules are: --import's, and the module of
        # a network given by --set (which replaces the file's).
        from fusedrl.trust import CLI_FLAG, UntrustedImportsError, check_trusted, named_modules

        set_network = [o.split("=", 1)[1].strip() for o in args.overrides
                       if "=" in o and o.split("=", 1)[0].strip() == "network"]
        named = named_modules({} if set_network else base, options.imports)
        typed = [*args.imports, *(m for n in set_network for m, _ in named_modules({"network": n}, ()))]
        try:
            check_trusted(str(args.config), named, trust=args.trust_imports, trusted=typed)
        except UntrustedImportsError as e:
            raise CLIError(e.message(CLI_FLAG, cli=True)) from None
        # A saved run's env may come from a module its run imported (--import, recorded in the file).
        import_modules(options.imports, source=f"{args.config} imports")
        if args.env is not None and base.get("env_id") not in (None, args.env):
            raise CLIError(f"--env {args.env} conflicts with env_id {base.get('env_id')!r} in {args.config}; "
                           f"drop --env or edit the file.")
        env_id = base.get("env_id", args.env)
        if env_id is None:
            raise CLIError(f"config file {args.config} has no env_id: pass --env ID (see `fusedrl envs`) "
                           f"or add env_id to the file.")
        base = {**base, "env_id": env_id}  # a file without env_id trains --env's env, not PPOConfig's default
    else:
        env_id, base, algo = args.env, {}, args.algo or "ppo"
    base_env_params = dict(base.get("env_params", {}))
    try:
        built = make(env_id, **base_env_params)
    except (ValueError, TypeError, HostEnvError) as e:  # HostEnvError: gymnasium.make refused the params
        raise CLIError(str(e)) from None
    env_params = built[1]

    overrides = parse_overrides(args.overrides, env_param_defaults(env_params),
                                total_timesteps=args.total_timesteps, config_cls=config_class(algo))
    if overrides.get("env_id", env_id) != env_id:  # env params were parsed for env_id's env
        raise CLIError("use --env to choose the environment, not --set env_id=..."
                       + (f"; with --config the env is {args.config}'s env_id (or --env when it has none)"
                          if args.config is not None else ""))
    if "env_params" in overrides:
        overrides["env_params"] = {**dict(base.get("env_params", {})), **overrides["env_params"]}
    try:
        if args.config is not None:
            config = config_class(algo).from_dict({**base, **overrides})
        else:
            config = preset(env_id, algo=algo, **{k: v for k, v in overrides.items() if k != "env_id"})
        if config.env_id != env_id or dict(config.env_params) != base_env_params:  # --set env_params.*
            if config.env_id == env_id and not is_host_env_id(env_id):  # the same env, other params
                built = (built[0], with_env_params(env_id, *built, **config.env_params))
            else:  # a host env's params go to gymnasium.make
                built = make(config.env_id, **config.env_params)
        env, env_params = built
        if is_host_env_id(config.env_id):  # the config's rules that need the env, before any compile
            from fusedrl.bridge import check_host_config

            check_host_config(config, env)
        else:
            config.check_env_params(env_params)
    except (TypeError, ValueError, HostEnvError) as e:
        raise CLIError(f"invalid configuration: {e}") from None

    for name, value in (("num_seeds", args.num_seeds), ("seed", args.seed),
                        ("eval_episodes", args.eval_episodes), ("progress_every", args.progress_every),
                        ("checkpoint_every", args.checkpoint_every)):
        if value is not None:
            run_opts[name] = value
    network_modules = check_network(config, CLIError, built)
    # Recorded in config.json, so that evaluate, --resume and fusedrl.load find the env (and the
    # network) again.
    run_opts["imports"] = list(dict.fromkeys([*run_opts.get("imports", []), *args.imports, *network_modules]))
    try:
        options = RunOptions(**run_opts)
        check_supported(config, options)
    except (TypeError, ValueError) as e:
        raise CLIError(str(e)) from None
    return config, options, built


def default_out(env_id: str, root: Path = Path("runs")) -> Path:
    """runs/<env id>, or runs/<env id>-2, -3, ... when taken."""
    name = env_id.replace(":", "_").replace("/", "_")
    out, n = root / name, 1
    while out.exists():
        n += 1
        out = root / f"{name}-{n}"
    return out


# What --resume takes from the run folder instead: the options that would change the run.
RESUME_CONFLICTS = (("env", "--env"), ("algo", "--algo"), ("config", "--config"), ("overrides", "--set"),
                    ("num_seeds", "--num-seeds"), ("seed", "--seed"),
                    ("total_timesteps", "--total-timesteps"), ("out", "--out"), ("overwrite", "--overwrite"),
                    ("eval_episodes", "--eval-episodes"), ("progress_every", "--progress-every"),
                    ("checkpoint_every", "--checkpoint-every"))


def resolve_resume(args) -> tuple[OnPolicyConfig, Any, tuple[Any, Any] | None]:
    """The config, RunOptions and built (env, env_params) of the run folder `--resume` continues
    (None for a "gymnasium:" env: the run builds it)."""
    from fusedrl import run_lock
    from fusedrl.envs import make
    from fusedrl.envs.host import is_host_env_id
    from fusedrl.runs import load_run_config, run_status

    values = [(flag, getattr(args, name)) for name, flag in RESUME_CONFLICTS]
    # Not given: None (numbers, paths), False (switches) or [] (--set); a 0 was given.
    given = [flag for flag, v in values if not (v is None or v is False or v == [])]
    if given:
        raise CLIError(f"--resume continues the run as its config.json describes; drop {', '.join(given)} "
                       f"(to train differently, start a new run: --config {args.resume / 'config.json'} "
                       f"--out NEW_DIR).")
    if not args.resume.is_dir():
        raise CLIError(f"--resume {args.resume}: no such folder (give the run folder of an earlier "
                       f"`fusedrl train`, e.g. runs/CartPole-v1).")
    if (pid := run_lock.holder(args.resume)) is not None:  # before anything is read or imported
        raise CLIError(str(run_lock.RunFolderLocked(args.resume, pid or None)))
    try:
        (config, options), args.trust_imports = trusting(
            args, lambda trust: load_run_config(args.resume, trust_imports=trust))
    except (OSError, ValueError) as e:
        raise CLIError(str(e)) from None
    args.resumed_status = run_status(args.resume)  # "interrupted" where its writer died
    built = None
    if not is_host_env_id(config.env_id):
        try:  # an env registered by a module: without its --import, a usage error (as without --resume)
            built = make(config.env_id, **config.env_params)
        except (TypeError, ValueError) as e:
            raise CLIError(str(e)) from None
    return config, options, built


#: In a run folder: the project and each seed's W&B run id, so that `--resume` continues those runs.
WANDB_RUNS_FILE = "wandb_runs.json"


def wandb_logger(project: str, config: OnPolicyConfig, options, path, *, resuming: bool):
    """The run folder's W&B logger; resuming a run logged to the same project continues its W&B runs
    (their ids are in the folder's WANDB_RUNS_FILE) instead of starting new ones."""
    from fusedrl.loggers import WandbLogger
    from fusedrl.runs import config_document, write_json

    file = Path(path) / WANDB_RUNS_FILE
    run_ids = None
    if resuming and file.is_file():
        try:
            saved = json.loads(file.read_text(encoding="utf-8"))
        except ValueError:  # unreadable: new W&B runs, as before the file existed
            saved = {}
        ids = saved.get("run_ids") if isinstance(saved, dict) and saved.get("project") == project else None
        if isinstance(ids, list) and len(ids) == options.num_seeds:
            run_ids = ids
    logger = WandbLogger(project, name=Path(path).name, num_seeds=options.num_seeds,
                         config=config_document(config, options), run_ids=run_ids)
    try:
        write_json(file, {"project": project, "run_ids": logger.run_ids})
    except BaseException:
        logger.close()
        raise
    return logger


def rounding_note(config: OnPolicyConfig) -> str:
    """Why a run takes fewer env steps than total_timesteps: whole updates only."""
    left = config.total_timesteps - config.env_steps
    return (f"note: training {config.env_steps:,} of total_timesteps={config.total_timesteps:,} env steps "
            f"per seed: {config.num_updates} whole updates of {config.batch_size:,} (num_envs "
            f"{config.num_envs} x num_steps {config.num_steps}); the other {left:,} would not fill "
            f"an update.")


def time_line(summary: dict[str, Any], wall: float, cache_before: dict[str, int],
              cache_after: dict[str, int]) -> str:
    """The run's wall time as the sum of its parts, and whether its programs came from the cache."""
    from fusedrl.compile_cache import describe

    compile_s = summary.get("compile_seconds")
    parts = [("compile", compile_s), ("train", summary.get("train_seconds")),
             ("evaluate", summary.get("eval_seconds"))]
    parts = [(name, s) for name, s in parts if s is not None]
    other = max(wall - sum(s for _, s in parts), 0.0)
    text = " + ".join(f"{name} {s:.1f} s" for name, s in parts)
    cache = describe(cache_before, cache_after)
    lines = [f"  wall {wall:.1f} s = {text} + setup and saving {other:.1f} s"]
    if cache is not None:
        lines.append(f"  compile cache: {cache}")
    return "\n".join(lines)


def cmd_train(args) -> int:
    """`fusedrl train`: the run the arguments ask for (a new one, or --resume's), announced, run,
    and reported."""
    started = getattr(args, "started", None) or time.perf_counter()  # set by main: the whole command
    from fusedrl.compile_cache import cache_counts

    if args.resume is not None:
        config, options, env = resolve_resume(args)
        out = args.resume
    else:
        config, options, env = resolve_run(args)
        out = args.out if args.out is not None else default_out(config.env_id)
    loggers = optional_loggers(args, config, options)
    announce(args, config, options, out)
    cache_before = cache_counts()
    run = run_train(args, config, options, env, out, loggers)
    if run is None:  # interrupted: announced with what the folder keeps
        return 130
    from fusedrl.runs import summary_table

    print(summary_table(run.summary))
    print(time_line(run.summary, time.perf_counter() - started, cache_before, cache_counts()))
    print(f"saved {out}/: config.json metrics.csv learning_curve.png checkpoint/ summary.json")
    return 0


def optional_loggers(args, config: OnPolicyConfig, options) -> list[Any]:
    """The loggers --tensorboard and --wandb-project ask for, as factories of the run folder. The
    optional backends are checked now (a missing package is a usage error, before any work), and
    built once the run folder exists: TensorBoard writes into it."""
    from fusedrl.loggers import TensorBoardLogger, WandbLogger

    loggers: list[Any] = []
    try:
        if args.tensorboard:
            TensorBoardLogger.check_installed()
            loggers.append(lambda path: TensorBoardLogger(Path(path) / "tensorboard"))
        if args.wandb_project:
            WandbLogger.check_installed()
            loggers.append(functools.partial(wandb_logger, args.wandb_project, config, options,
                                             resuming=args.resume is not None))
    except ImportError as e:
        raise CLIError(str(e)) from None
    return loggers


def announce(args, config: OnPolicyConfig, options, out) -> None:
    """The run's first line on stderr (env, where its config came from, its size, its folder), and
    a note when total_timesteps was rounded down to whole updates."""
    from fusedrl.envs.host import is_host_env_id
    from fusedrl.train.presets import preset_source

    source = preset_source(config.env_id, config.algo)
    if args.resume is not None:
        status = getattr(args, "resumed_status", None)
        preset_note = "resumed" if status in (None, "finished") else f"resumed; the run was {status}"
    elif args.config is not None:
        preset_note = "from --config"
    elif source is None:
        preset_note = f"{type(config).__name__} defaults (no preset)"
    else:
        preset_note = "preset" if source == config.env_id else f"the preset of {source}"
    if is_host_env_id(config.env_id):
        preset_note += "; host bridge: Gymnasium steps the envs on the host"
    if config.algo != "ppo":
        preset_note = f"{config.algo}, {preset_note}"
    print(f"fusedrl train {config.env_id} ({preset_note}): {options.num_seeds} seed(s), "
          f"{config.num_updates} updates of {config.num_envs} envs x {config.num_steps} steps -> {out}",
          file=sys.stderr)
    budget_given = args.total_timesteps is not None or any(
        o.split("=", 1)[0].strip() == "total_timesteps" for o in args.overrides)
    if args.resume is None and budget_given and config.env_steps != config.total_timesteps:
        print(rounding_note(config), file=sys.stderr)


def run_train(args, config: OnPolicyConfig, options, env, out, loggers):
    """The run (`fusedrl.runs.train_run`, or `resume_run` for --resume), or None after Ctrl-C, once
    stderr says what the folder keeps and how to continue; the run's expected errors are usage
    errors."""
    from fusedrl.checkpoint import CheckpointError
    from fusedrl.run_lock import LOCK_FILE, RunFolderLocked
    from fusedrl.runs import ResumeError, RunFolderExists, resume_run, train_run
    from fusedrl.train.trainer import EnvFaultError

    try:
        if args.resume is not None:
            return resume_run(out, progress=not args.no_progress, loggers=loggers,
                              trust_imports=args.trust_imports, env=env)
        return train_run(config, out, options=options, overwrite=args.overwrite,
                         progress=not args.no_progress, loggers=loggers, env=env)
    except (RunFolderExists, RunFolderLocked, ResumeError, CheckpointError, EnvFaultError) as e:
        raise CLIError(str(e)) from None
    except KeyboardInterrupt:
        folder = Path(out)
        files = sorted(p for p in folder.iterdir() if p.name != LOCK_FILE) if folder.is_dir() else []
        kept = [f"{p.name}/" if p.is_dir() else p.name for p in files]
        print(f"\ninterrupted: {out} keeps {' '.join(kept) or 'nothing'}"
              f"{' (the metrics logged so far)' if 'metrics.csv' in kept else ''}.", file=sys.stderr)
        update = _checkpoint_update(folder)
        if update is not None:
            print(f"its checkpoint holds update {update} of {config.num_updates}: continue with "
                  f"`fusedrl train --resume {out}`", file=sys.stderr)
        return None


def _checkpoint_update(run_dir: Path) -> int | None:
    """The update of an interrupted run's checkpoint, from its summary.json (None: none saved)."""
    try:
        return json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("checkpoint_update")
    except (OSError, ValueError, AttributeError):
        return None


# -------------------------------------------------------------------------------- evaluate
def cmd_evaluate(args) -> int:
    from fusedrl.checkpoint import CheckpointError
    from fusedrl.runs import evaluate_run

    if args.episodes is not None and args.episodes < 1:
        raise CLIError(f"--episodes must be >= 1, got {args.episodes}.")
    if not args.run_dir.exists():
        from fusedrl.policy import missing_run_error

        raise CLIError(str(missing_run_error(args.run_dir)))
    try:
        bound = {} if args.max_steps is None else {"max_steps": args.max_steps}
        ev, _ = trusting(args, lambda trust: evaluate_run(
            args.run_dir, num_episodes=args.episodes, seed=args.seed, greedy=not args.sampled,
            trust_imports=trust, **bound))
    except (FileNotFoundError, CheckpointError, ValueError) as e:
        raise CLIError(str(e)) from None
    kind = "sampled-action" if args.sampled else "greedy"
    print(f"{args.run_dir}: {kind} return over {ev['episodes']} episodes per seed")
    if ev.get("update", 0) < ev.get("num_updates", 0):
        print(f"  (the run has not finished: its checkpoint holds update {ev['update']} "
              f"of {ev['num_updates']})")
    if ev.get("status") == "running":  # read-only: evaluating a run still training is allowed
        print(f"  (status: running: process {ev.get('holder') or '?'} is still training it; this is its "
              f"latest checkpoint)")
    elif ev.get("status") not in (None, "finished"):
        print(f"  (status: {ev['status']}; `fusedrl train --resume {args.run_dir}` continues it)")
    for i, r in enumerate(ev["per_seed"]):
        print(f"  seed {i:>3}  {r:10.1f}")
    print(f"  mean      {ev['mean']:10.1f} +- {ev['std']:.1f}")
    if ev.get("per_agent"):  # a multi-agent env: the team's return above, each agent's own here
        each = ", ".join(f"{a} {sum(v) / len(v):.1f}" for a, v in ev["per_agent"].items())
        print(f"  per agent (mean over seeds): {each}")
    from fusedrl.runs import EVAL_MAX_STEPS, evaluation_warnings

    for line in evaluation_warnings(ev["diverged_seeds"], ev["unfinished"], args.max_steps or EVAL_MAX_STEPS):
        print(line)
    return 0


# ------------------------------------------------------------------------------------ envs
def format_space(space) -> str:
    from fusedrl.envs import space_info

    info = space_info(space)
    if info["type"] == "Discrete":
        return f"Discrete({info['n']})"
    if info["type"] == "MultiDiscrete":
        return f"MultiDiscrete({info['nvec']})"
    if info["type"] == "Dict" and isinstance(getattr(space, "spaces", None), dict):
        return "Dict(" + ", ".join(f"{k}: {format_space(v)}" for k, v in space.spaces.items()) + ")"
    if info["type"] == "Box":
        shape = ",".join(str(s) for s in info["shape"])
        comma = "," if len(info["shape"]) == 1 else ""
        return f"Box(({shape}{comma}), {_bound(info['low'])}..{_bound(info['high'])})"
    return info["type"]


def _bound(x: float) -> str:
    return ("-inf" if x < 0 else "inf") if abs(x) > 1e30 else f"{x:g}"


def cmd_envs(args) -> int:
    from fusedrl.envs import make, registered_ids, suites
    from fusedrl.envs.registry import is_public
    from fusedrl.train.presets import has_preset

    rows, ours, variants = [], set(registered_ids(include_gymnax=False)), {}
    for env_id in registered_ids(include_gymnax=True, include_suites=True):
        if not args.all and not is_public(env_id):  # test envs: the probes, brax:fast
            continue
        if not args.all and "@" in env_id:  # brax:ant@spring: one footnote per suite, not 40 rows
            variants.setdefault(env_id.partition(":")[0], set()).add(env_id.partition("@")[2])
            continue
        gymnax = env_id.startswith("gymnax:")
        suite = env_id not in ours and suites.split_id(env_id) is not None
        if (gymnax and (not args.gymnax or "MNIST" in env_id)) or (suite and not args.suites):
            rows.append((env_id, "", "", "yes" if has_preset(env_id) else ""))
            continue
        try:
            env, params = make(env_id)
            if params is None and hasattr(env, "agents"):  # multi-agent (JaxMARL's contract): per agent
                obs, act = (_agent_spaces(env.agents, f) for f in (env.observation_space, env.action_space))
            else:
                obs, act = format_space(env.observation_space(params)), format_space(env.action_space(params))
        except Exception as e:  # one broken third-party env must not hide the others
            obs, act = f"(unavailable: {type(e).__name__})", ""
        rows.append((env_id, obs, act, "yes" if has_preset(env_id) else ""))
    for line in env_table(rows, shutil.get_terminal_size((100, 24)).columns):
        print(line)
    for prefix, backends in variants.items():
        pipelines = " or ".join(sorted(backends))
        print(f"({prefix}:NAME@BACKEND: each env on the pipeline {pipelines}; --all lists them)")
    if not args.gymnax:
        print("(gymnax spaces: fusedrl envs --gymnax)")
    if not args.suites and any(suites.is_installed(p) for p in suites.SUITES):
        print("(suite spaces: fusedrl envs --suites)")
    for prefix, suite in suites.SUITES.items():
        if not suites.is_installed(prefix):
            print(f"({prefix}: {suite.about}; not installed: {suite.install})")
    return 0


def _agent_spaces(agents, space_of) -> str:
    """A multi-agent env's spaces: "3 agents x Box(...)", or where agents differ (the learners pad
    them) each distinct space with its count, "3 agents x Box((16,)...) + 1 agent x Box((14,)...)"."""
    counts: dict[str, int] = {}
    for agent in agents:
        shown = format_space(space_of(agent))
        counts[shown] = counts.get(shown, 0) + 1
    return " + ".join(f"{n} agent{'s' if n > 1 else ''} x {shown}" for shown, n in counts.items())


def env_table(rows: list[tuple[str, str, str, str]], width: int) -> list[str]:
    """The lines of `fusedrl envs`' table (id, observation space, action space, preset), its space
    columns wrapped at ", " to fit `width` characters (a long Dict space takes several lines)."""
    w = max(len("id"), *(len(r[0]) for r in rows))
    wa = min(max(len("action space"), *(len(r[2]) for r in rows)), 28)
    wo = max(min(max(len("observation space"), *(len(r[1]) for r in rows)), width - w - wa - 12), 20)

    def wrap(text: str, limit: int) -> list[str]:
        return textwrap.wrap(text, limit, break_on_hyphens=False, break_long_words=True) or [""]

    lines = [f"{'id':<{w}}  {'observation space':<{wo}}  {'action space':<{wa}}  preset"]
    for env_id, obs, act, preset in rows:
        obs_lines, act_lines = wrap(obs, wo), wrap(act, wa)
        for i in range(max(len(obs_lines), len(act_lines))):
            first = i == 0
            cells = (env_id if first else "", obs_lines[i] if i < len(obs_lines) else "",
                     act_lines[i] if i < len(act_lines) else "", preset if first else "")
            lines.append(f"{cells[0]:<{w}}  {cells[1]:<{wo}}  {cells[2]:<{wa}}  {cells[3]}".rstrip())
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `fusedrl` console script; returns the exit status."""
    started = time.perf_counter()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["profile"]:  # its own parser, so `fusedrl profile --help` reaches it
        from fusedrl.profile import main as profile_main

        return profile_main(argv[1:], prog="fusedrl profile")
    parser = build_parser()
    args = parser.parse_args(argv)
    args.started = started
    commands = {
        "train": cmd_train, "evaluate": cmd_evaluate, "envs": cmd_envs,
        "sweep": cmd_sweep, "plot": cmd_plot,
    }
    spinner = None
    try:
        import_modules(getattr(args, "imports", []))  # `plot` imports no env module
        if getattr(args, "no_compile_cache", None) is not None:
            use_compile_cache(args.no_compile_cache)
        if args.command in ("train", "evaluate", "sweep") and not getattr(args, "no_progress", False):
            from fusedrl.progress import show_spinner

            spinner = show_spinner(True)  # while compiling: a spinner with the elapsed time
        return commands[args.command](args)
    except UsageError as e:
        print(f"fusedrl {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `fusedrl envs | head`: the reader left; no traceback, no flush error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a process that SIGPIPE ended
    finally:
        if spinner is not None:
            from fusedrl.progress import restore_spinner

            restore_spinner(spinner)


if __name__ == "__main__":
    sys.exit(main())
