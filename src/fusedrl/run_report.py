"""Evaluation and the report of a run: greedy returns per seed, diverged seeds and unfinished
episodes, the learning curve, summary.json's results and the table the command line prints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fusedrl import checkpoint as ckpt
from fusedrl import run_lock
from fusedrl._argtypes import MAX_KEY_SEED, seed_error
from fusedrl.bridge import evaluate as evaluate_on_host
from fusedrl.envs.host import is_host_env_id
from fusedrl.evaluation import EVAL_MAX_STEPS, evaluate
from fusedrl.metrics import AGENT_RETURN_PREFIX, has_episode
from fusedrl.plotting import plot_learning_curve
from fusedrl.progress import hold_interrupt
from fusedrl.run_driver import Trained
from fusedrl.run_folder import (
    CHECKPOINT_DIR,
    CURVE_FILE,
    RunOptions,
    error_record,
    load_run_config,
    run_status,
    save_results,
)
from fusedrl.train import TrainResult
from fusedrl.train.config import OnPolicyConfig


def report(config: OnPolicyConfig, options: RunOptions, path: Path | None, trained: Trained,
           summary: dict[str, Any], *, progress_file=None) -> dict[str, Any]:
    """The stage after training: in `path`, metrics.csv and the final checkpoint first (the most
    valuable results: a Ctrl-C from here on still leaves them), then the greedy evaluation of every
    seed and the learning curve; `summary` gets the results, timings and a status that ends
    "finished" (or says where it stopped, and the error raises). Returns the summary."""
    result, start = trained.result, trained.start
    env_steps = (config.num_updates - start) * config.batch_size * options.num_seeds  # trained here
    run_s = trained.train_seconds
    summary.update(
        num_updates=config.num_updates,
        env_steps_per_seed=config.env_steps,
        compile_seconds=None if trained.compile_seconds is None else round(trained.compile_seconds, 3),
        train_seconds=round(run_s, 3),
        sps=round(env_steps / run_s, 1) if env_steps else None,
        progress_every=trained.progress_every,
    )
    try:
        if path is not None:
            summary["status"] = "saving"
            save_results(path, config, options, jax.device_get(result.metrics), result, summary)
        summary["status"] = "evaluating"
        t = time.perf_counter()
        evaluated = evaluate_seeds(config, result, eval_key(options), options.eval_episodes,
                                   progress_file=progress_file, max_steps=EVAL_MAX_STEPS,
                                   trainer=trained.trainer, per_agent=True)
        returns = evaluated.pop("episode_return")
        per_seed = returns.mean(axis=1)
        diverged = diverged_seeds(result)
        last = {k: np.asarray(result.metrics[k])[:, -1] for k in ("episode_return", "episode_length")}
        last_train = [round(float(x), 3) if e else None  # None: no episode has ended
                      for x, e in zip(last["episode_return"], has_episode(last), strict=True)]
        summary.update(
            eval_episodes=options.eval_episodes,
            eval_seed=eval_seed(options),
            eval_return_per_seed=[round(float(x), 3) for x in per_seed],
            eval_return_mean=round(float(per_seed.mean()), 3),
            eval_return_std=round(float(per_seed.std()), 3),
            eval_seconds=round(time.perf_counter() - t, 3),
            eval_unfinished_episodes=unfinished_episodes(returns, diverged),
            eval_max_steps=None if is_host_env_id(config.env_id) else EVAL_MAX_STEPS,  # bridge: its own
            diverged_seeds=diverged,
            final_train_return_per_seed=last_train,
        )
        if evaluated:  # a multi-agent env: each agent's own returns too, as for the team above
            agents = {name: name[len(AGENT_RETURN_PREFIX):] for name in evaluated}
            summary["eval_return_per_agent"] = {
                agent: [round(float(x), 3) for x in evaluated[name].mean(axis=1)]
                for name, agent in agents.items()}
            summary["final_train_return_per_agent"] = {
                agent: [round(float(x), 3) if e else None for x, e in zip(
                    np.asarray(result.metrics[name])[:, -1], has_episode(last), strict=True)]
                for name, agent in agents.items()}
        if path is not None:
            title = f"{config.env_id}, {options.num_seeds} seed(s)"
            plot_learning_curve(result.metrics, path / CURVE_FILE, title=title)
        summary["status"] = "finished"
    except KeyboardInterrupt:
        summary.update(status=f"interrupted while {summary['status']}", updates_logged=config.num_updates)
        raise
    except Exception as e:
        summary.update(status="failed", failed_while=summary["status"], updates_logged=config.num_updates,
                       error=error_record(e))
        raise
    return summary


def eval_seed(options: RunOptions) -> int:
    """The seed of the greedy evaluation in summary.json (`evaluate_run`'s default): seed + 1."""
    return options.seed + 1


def eval_key(options: RunOptions) -> jax.Array:
    return jax.random.key(eval_seed(options))


def diverged_seeds(result: TrainResult) -> list[int]:
    """The seeds (indices on the leading axis) whose parameters are not all finite."""
    ok = None
    for x in jax.tree.leaves(jax.device_get(result.params)):
        x = np.asarray(x)
        finite = np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
        ok = finite if ok is None else ok & finite
    return [int(i) for i in np.flatnonzero(~ok)]


def unfinished_episodes(returns: np.ndarray, diverged: Sequence[int]) -> int:
    """Evaluation episodes [num_seeds, num_episodes] that reported NaN (had not ended after the
    evaluation's max_steps), not counting the diverged seeds', which are NaN without running."""
    keep = np.ones(returns.shape[0], bool)
    keep[list(diverged)] = False
    return int(np.isnan(returns[keep]).sum())


def evaluate_seeds(config: OnPolicyConfig, result: TrainResult, key: jax.Array, num_episodes: int, *,
                   progress_file=None, greedy: bool = True, max_steps: int | None = None,
                   trainer=None, per_agent: bool = False) -> np.ndarray | dict[str, np.ndarray]:
    """Greedy (or, with greedy=False, sampled) returns [num_seeds, num_episodes] of a result whose
    leaves have a seed axis; each seed gets its own key split from `key` (as `fusedrl.evaluate`
    does), also on the host bridge. `progress_file`: where a Ctrl-C held while evaluating is noted
    (default stderr). `max_steps`: see `fusedrl.evaluate` (the host bridge bounds its episodes by
    the env's time limit, or 100,000 steps, instead). `trainer`: the fused trainer of `config`
    that trained the result, if at hand (its env serves the evaluation: none is built again).
    `per_agent`: a dict as `fusedrl.evaluate(per_agent=True)` returns, each entry [num_seeds,
    num_episodes] (a Gymnasium env's: "episode_return" alone)."""
    if not is_host_env_id(config.env_id):
        with hold_interrupt("evaluating", progress_file):  # it compiles first: see hold_interrupt
            out = evaluate(config, result, key, num_episodes, greedy=greedy, max_steps=max_steps,
                           trainer=trainer, per_agent=True)
        out = {k: np.asarray(v) for k, v in out.items()}
        out = {k: v[None] if v.ndim == 1 else v for k, v in out.items()}
        return out if per_agent else out["episode_return"]

    num_seeds = jax.tree.leaves(result.params)[0].shape[0]
    keys = jax.random.split(key, num_seeds)
    returns = []
    for i in range(num_seeds):
        one = TrainResult(state=jax.tree.map(lambda x, i=i: x[i], result.state), metrics={},
                          hparams=result.hparams)
        returns.append(np.asarray(evaluate_on_host(config, one, keys[i], num_episodes, greedy=greedy)))
    return {"episode_return": np.stack(returns)} if per_agent else np.stack(returns)


def evaluate_run(run_dir: str | os.PathLike, *, num_episodes: int | None = None,
                 seed: int | None = None, greedy: bool = True,
                 max_steps: int | None = EVAL_MAX_STEPS, trust_imports: bool = False) -> dict[str, Any]:
    """Greedy (or, with greedy=False, sampled) returns of every seed in a saved run: {"per_seed":
    [...], "mean": m, "std": s, "episodes": n, "update": the checkpoint's update, "num_updates":
    the run's, "unfinished": episodes that had not ended after `max_steps` steps (NaN returns),
    "diverged_seeds": seeds whose parameters are not finite (NaN returns), "status": `run_status`,
    "holder": the pid of the process that trains it, if one does}. An unfinished run's checkpoint
    (`checkpoint_every`) is its latest: "update" < "num_updates". A run still training is evaluated
    as it is (reading takes no lock).

    `trust_imports`: import the modules config.json names; see `load_run_config`.

    The defaults reproduce the run's summary.json: greedy, its eval_episodes, the key it used
    (`jax.random.key(seed)` with the run's seed + 1) and its bound on episodes (EVAL_MAX_STEPS).
    """
    if isinstance(seed, np.integer):  # e.g. from np.arange: as jax.random.key takes it
        seed = int(seed)
    if seed is not None and (error := seed_error(seed, MAX_KEY_SEED)) is not None:
        raise ValueError(f"seed: {error}.")
    run_dir = Path(run_dir)
    config, options = load_run_config(run_dir, trust_imports=trust_imports)
    holder, status = run_lock.holder(run_dir), run_status(run_dir)
    num_episodes = options.eval_episodes if num_episodes is None else num_episodes
    key = eval_key(options) if seed is None else jax.random.key(seed)
    try:
        saved_config, state, hparams, meta = ckpt.restore(run_dir / CHECKPOINT_DIR, config)
    except (ckpt.CheckpointError, FileNotFoundError) as e:
        if holder is None:
            raise
        raise type(e)(f"{e}\n(process {holder or '?'} is training this run: its checkpoint may have been "
                      f"replaced while it was read; try again.)") from None
    result = TrainResult(state=state, metrics={}, hparams=hparams)
    evaluated = evaluate_seeds(config, result, key, num_episodes, greedy=greedy, max_steps=max_steps,
                               per_agent=True)
    returns = evaluated.pop("episode_return")
    per_seed = returns.mean(axis=1)
    diverged = diverged_seeds(result)
    out = {"per_seed": per_seed.tolist(), "mean": float(per_seed.mean()), "std": float(per_seed.std()),
           "episodes": num_episodes, "update": int(np.ravel(state.update)[0]),
           "num_updates": config.num_updates, "unfinished": unfinished_episodes(returns, diverged),
           "diverged_seeds": diverged, "status": status, "holder": holder or None}
    if evaluated:  # a multi-agent env: each agent's own return per seed
        out["per_agent"] = {name[len(AGENT_RETURN_PREFIX):]: v.mean(axis=1).tolist()
                            for name, v in evaluated.items()}
    return out


def evaluation_warnings(diverged: Sequence[int] | None, unfinished: int | None,
                        max_steps: int | None) -> list[str]:
    """Lines that say why an evaluation's returns are NaN: diverged seeds, unfinished episodes."""
    lines = []
    if diverged:
        lines.append(f"  WARNING: seed(s) {', '.join(map(str, diverged))} diverged: their parameters are not "
                     f"finite, so they were not evaluated (NaN). Lower lr or max_grad_norm, or check the "
                     f"env's rewards and observations.")
    if unfinished:
        lines.append(f"  WARNING: {unfinished} evaluation episode(s) had not ended after {max_steps:,} steps "
                     f"(NaN): does the env have a working time limit (max_steps_in_episode)?")
    return lines


def summary_table(summary: Mapping[str, Any]) -> str:
    """The plain-text table the CLI prints after training."""
    lines = [f"{summary['env_id']}: {summary['num_seeds']} seed(s) x "
             f"{summary['env_steps_per_seed']:,} env steps ({summary['num_updates']} updates)"]
    lines.append(f"  {'seed':>4}  {'greedy return':>13}  {'last train return':>17}")
    for i, (ev, tr) in enumerate(zip(summary["eval_return_per_seed"], summary["final_train_return_per_seed"],
                                     strict=True)):
        train_text = "no episode ended" if tr is None else f"{tr:.1f}"
        lines.append(f"  {i:>4}  {ev:>13.1f}  {train_text:>17}")
    lines.append(f"  {'mean':>4}  {summary['eval_return_mean']:>8.1f} +- {summary['eval_return_std']:<.1f}"
                 f"   ({summary['eval_episodes']} greedy episodes per seed)")
    if summary.get("eval_return_per_agent"):  # a multi-agent env: the team's above, each agent's here
        each = ", ".join(f"{a} {np.mean(v):.1f}" for a, v in summary["eval_return_per_agent"].items())
        lines.append(f"  greedy return per agent (mean over seeds): {each}")
    lines += evaluation_warnings(summary.get("diverged_seeds"), summary.get("eval_unfinished_episodes"),
                                 summary.get("eval_max_steps"))
    compile_s = summary["compile_seconds"]
    compile_text = "(compile included in train)" if compile_s is None else f"compile {compile_s:.1f} s"
    resumed = summary.get("resumed_at_update")
    if summary["sps"] is None:
        lines.append(f"  resumed after update {resumed}, the last: nothing left to train")
    else:
        since = "" if resumed is None else f", updates {resumed + 1}-{summary['num_updates']}"
        lines.append(f"  {compile_text}   train {summary['train_seconds']:.1f} s   "
                     f"{summary['sps']:,.0f} env steps/s (all seeds{since})")
    return "\n".join(lines)
