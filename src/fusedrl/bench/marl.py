"""Multi-agent PPO (IPPO, MAPPO) against JaxMARL's own baselines: steps/s and greedy returns.

    python -m fusedrl.bench marl [--algos ippo,mappo[,mappo-ff]] [--seeds 1] [--repeats 3] [--num-envs 16]
                                 [--num-steps 128] [--total-timesteps 262144] [--eval-episodes 1024]
                                 [--env jaxmarl:MPE_simple_spread_v3]
                                 [--peer-python .peers-venv/bin/python --jaxmarl-src DIR]

--env: MPE_simple_spread_v3 (3 agents; the default) or Jumanji's LevelBasedForaging
(`jumanji:LevelBasedForaging-v0`: 2 agents, masked actions). JaxMARL has no LevelBasedForaging: its
scripts run, unmodified, on fusedrl's adapter of it shown to them as a JaxMARL `MultiAgentEnv`
(`_jaxmarl_peer.jaxmarl_view`). By design its `ippo_ff_mpe.py` reads no action masks (an action the
mask forbids is a no-op in LevelBasedForaging: a move into a wall, an agent or food, or a load away
from food), and it treats the time limit as a termination; ours samples only allowed actions and
bootstraps there. The IPPO numbers below are also our LevelBasedForaging preset's.

Each algorithm at the config of JaxMARL's yaml for its baseline:
  ippo   ours: `PPOConfig(env_id="jaxmarl:MPE_simple_spread_v3")`, parameters shared, 2x64 tanh, lr 2.5e-4;
         JaxMARL: `baselines/IPPO/ippo_ff_mpe.py` with `config/ippo_ff_mpe.yaml` (the same numbers)
  mappo  ours: recurrent MAPPO, `critic="centralized"`, `recurrent="gru"`, `recurrent_size=128`,
         `hidden_sizes=(128, 128)`, ReLU, lr 2e-3: actor and critic each a Dense(128) ReLU, a
         128-unit GRU, a 128-wide ReLU layer and the head (`RecurrentActorCritic`; the critic reads
         the world state); JaxMARL: `baselines/MAPPO/mappo_rnn_mpe.py` with
         `config/mappo_homogenous_rnn_mpe.yaml` (lr 2e-3, FC_DIM_SIZE 128, GRU_HIDDEN_DIM 128: the
         same layers); and the script's own choices, which are not fusedrl's defaults
         (`MAPPO_SCRIPT_CHOICES`): `agent_id=False` (no one-hot id: inputs 18 and 54 wide, as
         its), `bootstrap_truncation=False` (MPE's time limit as a terminal state) and
         `clip_grad_per_network=True` (its two optimisers each clip their own gradient; Adam, per
         parameter, is the same). Still different: initialisers (ours orthogonal, gain sqrt(2)
         around the GRU and 1 in it; its post-GRU layer gain 2, its GRU's input kernels flax's
         lecun_normal). Minibatches are alike: 12 agents' whole sequences drawn at random on both
         sides
  mappo-ff  ours feed-forward: the same numbers without the cell (2x128 ReLU actor and critic),
         against the same recurrent JaxMARL script (it has no feed-forward MAPPO for MPE)
Both: 4 epochs x 4 minibatches, gamma 0.99, gae_lambda 0.95, clip 0.2, ent 0.01, vf 0.5, grad norm
0.5, lr annealed; the batch (--num-envs x --num-steps) and the budget as given, to both.

Every run is a fresh process (ours: this interpreter; JaxMARL's: `--peer-python`, running
`fusedrl/bench/_jaxmarl_peer.py` on the scripts in `--jaxmarl-src`), sides alternating in rotating
order; each run trains `--seeds` seeds one after another through one compiled program (compile
timed apart, steps/s over the training calls alone) and evaluates each seed's final policy
greedily on `--eval-episodes` episodes: the team return (the episode's sum of the mean over agents
of their rewards), ours by `fusedrl.evaluate`, JaxMARL's by the runner on JaxMARL's env. Each seed's
score is the mean over its episodes, so few episodes add their own noise to the spread over seeds (on
MPE at 64 episodes most of it: docs/results.md#multi-agent); the default, 1,024, costs little beside
training. The table gives medians over the repeats, the ratio of median steps/s and the paired ratio
(the median over repeats of each repeat's ours/JaxMARL, which cancels load that drifts between repeats;
when the two disagree, the load moved during the run); the peer's config is checked against ours after
each of its runs. The machine is noisy: only ratios measured in one run mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence

import jax
import numpy as np

from fusedrl.bench._timing import compile_then_run, cpu_model

ENV_ID = "jaxmarl:MPE_simple_spread_v3"
#: The envs the bench runs (`--env`); the first is the default.
ENVS = (ENV_ID, "jumanji:LevelBasedForaging-v0")
ALGOS = ("ippo", "mappo", "mappo-ff")
#: What JaxMARL's IPPO and MAPPO yaml files share, as `PPOConfig` fields.
_SHARED = dict(update_epochs=4, num_minibatches=4, anneal_lr=True, gamma=0.99, gae_lambda=0.95, clip_eps=0.2,
               ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)
#: Each algorithm's config: JaxMARL's yaml numbers (besides the batch and budget).
FIELDS = {
    "ippo": dict(_SHARED, lr=2.5e-4, hidden_sizes=(64, 64), activation="tanh"),
    # And JaxMARL's MAPPO choices where fusedrl's defaults differ: no agent id in the networks' inputs,
    # the time limit as a terminal state, the actor's and the critic's gradients clipped apart.
    "mappo": dict(_SHARED, lr=2e-3, hidden_sizes=(128, 128), activation="relu", recurrent="gru",
                  recurrent_size=128, critic="centralized", agent_id=False, bootstrap_truncation=False,
                  clip_grad_per_network=True),
}
#: The feed-forward MAPPO (`--algos mappo-ff`): the same numbers, a 2x128 ReLU actor and critic and no
#: cell, against the same recurrent JaxMARL script.
FIELDS["mappo-ff"] = {k: v for k, v in FIELDS["mappo"].items() if k not in ("recurrent", "recurrent_size")}
#: The JaxMARL baseline each algorithm runs against (`_jaxmarl_peer.SCRIPTS`).
PEER_ALGO = {"ippo": "ippo", "mappo": "mappo", "mappo-ff": "mappo"}
#: The peer's yaml keys and the `PPOConfig` fields they must equal.
PEER_KEYS = {
    "LR": "lr",
    "UPDATE_EPOCHS": "update_epochs",
    "NUM_MINIBATCHES": "num_minibatches",
    "GAMMA": "gamma",
    "GAE_LAMBDA": "gae_lambda",
    "CLIP_EPS": "clip_eps",
    "ENT_COEF": "ent_coef",
    "VF_COEF": "vf_coef",
    "MAX_GRAD_NORM": "max_grad_norm",
    "ANNEAL_LR": "anneal_lr",
}
PEER_RUNNER = os.path.join(os.path.dirname(__file__), "_jaxmarl_peer.py")


def config(algo: str, num_envs: int, num_steps: int, total: int, env_id: str = ENV_ID):
    """Our `PPOConfig` of `algo` ("ippo" or "mappo") on `env_id` at JaxMARL's numbers (`FIELDS`)."""
    from fusedrl.train import PPOConfig

    return PPOConfig(
        env_id=env_id, num_envs=num_envs, num_steps=num_steps, total_timesteps=total, **FIELDS[algo]
    )


def peer_env_name(env_id: str) -> str:
    """The ENV_NAME JaxMARL's script runs `env_id` under: JaxMARL's own id for a `jaxmarl:` env,
    else fusedrl's id (which the peer runner's `jaxmarl.make` turns into `jaxmarl_view`)."""
    suite, _, name = env_id.partition(":")
    return name if suite == "jaxmarl" else env_id


def run_ours(
    algo: str, seeds: int, num_envs: int, num_steps: int, total: int, episodes: int, env_id: str = ENV_ID
) -> dict:
    """Ours: `seeds` seeds one after another through one compiled `train`, each evaluated greedily
    (`fusedrl.evaluate`, `episodes` episodes); the same fields as the peer runner's JSON line."""
    import fusedrl

    cfg = config(algo, num_envs, num_steps, total, env_id)
    train = jax.jit(fusedrl.make_train(cfg))
    keys = jax.random.split(jax.random.key(0), seeds)
    compile_s, train_s, greedy, trained = 0.0, 0.0, [], []
    for i in range(seeds):
        result, c, seconds = compile_then_run(train, keys[i])
        compile_s, train_s = (c if i == 0 else compile_s), train_s + seconds
        trained.append(float(np.asarray(result.metrics["episode_return"])[-1]))
        returns = fusedrl.evaluate(cfg, result, jax.random.key(1000 + i), num_episodes=episodes)
        greedy.append(float(np.mean(np.asarray(returns))))
    return {
        "impl": f"fusedrl-{algo}",
        "compile_s": compile_s,
        "train_s": train_s,
        "sps": cfg.env_steps * seeds / train_s,
        "env_steps": cfg.env_steps,
        "greedy": greedy,
        "train_ret": trained,
    }


def _subprocess(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=os.path.expanduser("~"),
    )  # not a checkout's root, whose envs/ and train/ are no package
    if out.returncode:
        raise RuntimeError(f"{' '.join(argv[:3])} ... failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ours_in_subprocess(
    algo: str,
    seeds: int,
    num_envs: int,
    num_steps: int,
    total: int,
    episodes: int,
    env_id: str = ENV_ID,
    *,
    timeout: float,
) -> dict:
    code = (
        f"import json; from fusedrl.bench.marl import run_ours; print(json.dumps(run_ours("
        f"{algo!r}, {seeds}, {num_envs}, {num_steps}, {total}, {episodes}, {env_id!r})))"
    )
    return _subprocess([sys.executable, "-c", code], timeout)


def peer_in_subprocess(
    python: str,
    src: str,
    algo: str,
    seeds: int,
    num_envs: int,
    num_steps: int,
    total: int,
    episodes: int,
    env_id: str = ENV_ID,
    *,
    timeout: float,
) -> dict:
    argv = [
        os.path.abspath(python),
        PEER_RUNNER,
        algo,
        str(seeds),
        str(num_envs),
        str(num_steps),
        str(total),
        str(episodes),
        peer_env_name(env_id),
    ]
    return _subprocess(argv, timeout, env={"JAXMARL_SRC": os.path.abspath(src)})


#: mappo_rnn_mpe.py's choices that its yaml does not name, as the `PPOConfig` field that makes each:
#: (the script's value, what the script does).
MAPPO_SCRIPT_CHOICES = {
    "agent_id": (False, "no agent id in the networks' inputs"),
    "bootstrap_truncation": (False, "the time limit as a terminal state"),
    "clip_grad_per_network": (True, "the actor's and the critic's gradients clipped apart"),
}


def config_mismatches(algo: str, peer_config: dict, env_id: str = ENV_ID) -> list[str]:
    """The peer's yaml values (its JSON's "config") that differ from our config of `algo` on `env_id`,
    and for MAPPO the script's own choices (`MAPPO_SCRIPT_CHOICES`) that ours does not make."""
    from fusedrl.train import PPOConfig

    ours = FIELDS[algo]
    bad = [
        f"{key}={peer_config[key]!r} vs {field}={ours[field]!r}"
        for key, field in PEER_KEYS.items()
        if key in peer_config and peer_config[key] != ours[field]
    ]
    if peer_config.get("ENV_NAME", peer_env_name(env_id)) != peer_env_name(env_id):
        bad.append(f"ENV_NAME={peer_config['ENV_NAME']!r} vs {env_id}")
    if algo == "ippo" and peer_config.get("ACTIVATION", "tanh") != ours["activation"]:
        bad.append(f"ACTIVATION={peer_config['ACTIVATION']!r} vs activation={ours['activation']!r}")
    if algo.startswith("mappo"):
        # mappo_rnn_mpe.py's actor and critic: Dense(FC_DIM_SIZE) ReLU, a GRU_HIDDEN_DIM-unit GRU, a
        # GRU_HIDDEN_DIM-wide ReLU layer, the head; ours: hidden_sizes[0], the cell of recurrent_size,
        # hidden_sizes[1:] (its ACTIVATION key is unused: the script hard-codes ReLU).
        widths = (peer_config.get("FC_DIM_SIZE", 128), peer_config.get("GRU_HIDDEN_DIM", 128))
        if algo == "mappo-ff":
            if tuple(ours["hidden_sizes"]) != widths:
                bad.append(f"FC_DIM_SIZE, GRU_HIDDEN_DIM={widths} vs hidden_sizes={ours['hidden_sizes']!r}")
        else:
            if ours.get("recurrent") != "gru":
                bad.append(f"a GRU vs recurrent={ours.get('recurrent')!r}")
            if ours["hidden_sizes"][0] != widths[0]:
                bad.append(f"FC_DIM_SIZE={widths[0]!r} vs hidden_sizes[0]={ours['hidden_sizes'][0]!r}")
            if ours.get("recurrent_size") != widths[1]:
                bad.append(f"GRU_HIDDEN_DIM={widths[1]!r} vs recurrent_size={ours.get('recurrent_size')!r}")
            if tuple(ours["hidden_sizes"][1:]) != (widths[1],):
                bad.append(
                    f"GRU_HIDDEN_DIM={widths[1]!r} (one layer after the GRU) vs "
                    f"hidden_sizes[1:]={tuple(ours['hidden_sizes'][1:])!r}"
                )
        if ours["activation"] != "relu":
            bad.append(f"ReLU (hard-coded) vs activation={ours['activation']!r}")
        if peer_config.get("SCALE_CLIP_EPS", False):
            bad.append("SCALE_CLIP_EPS=True vs clip_eps unscaled")
        # What the script does without a yaml key: `MAPPO_SCRIPT_CHOICES`.
        for field, (theirs, what) in MAPPO_SCRIPT_CHOICES.items():
            value = ours.get(field, getattr(PPOConfig, field))  # a field ours does not set: its default
            if value != theirs:
                bad.append(f"{what} vs {field}={value!r}")
    return bad


def summarize(runs: list[dict]) -> dict:
    """Medians over a side's runs: steps/s, compile s; the greedy and training returns of every seed
    of every run, with their mean, their standard deviation (over the seeds, ddof 0) and their
    interquartile mean with its 95% stratified-bootstrap interval (`fusedrl.plotting.iqm_band`, as
    `fusedrl plot` draws it)."""
    from fusedrl.plotting import iqm_band

    greedy = [g for r in runs for g in r["greedy"]]
    trained = [t for r in runs for t in r["train_ret"]]
    center, low, high = (float(x[0]) for x in iqm_band(np.asarray(greedy, np.float64)[:, None]))
    return {
        "sps": statistics.median(r["sps"] for r in runs),
        "compile_s": statistics.median(r["compile_s"] for r in runs),
        "sps_runs": [round(r["sps"]) for r in runs],
        "greedy": greedy,
        "greedy_mean": float(np.mean(greedy)),
        "greedy_std": float(np.std(greedy)),
        "greedy_iqm": center,
        "greedy_iqm_95": [low, high],
        "train_ret_mean": float(np.mean(trained)) if trained else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench marl", description=__doc__.splitlines()[0])
    p.add_argument(
        "--algos", default="ippo,mappo", help=f"comma-separated among {','.join(ALGOS)} (default ippo,mappo)"
    )
    p.add_argument("--seeds", type=int, default=1, help="seeds per run, trained one after another")
    p.add_argument("--repeats", type=int, default=3, help="runs of each side, alternating")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--total-timesteps", type=int, default=262_144, help="env steps per seed")
    p.add_argument("--eval-episodes", type=int, default=1024, help="greedy episodes per seed")
    p.add_argument(
        "--env", default=ENV_ID, choices=ENVS, help=f"the env both sides train on (default {ENV_ID})"
    )
    p.add_argument("--peer-python", default=None, help="interpreter that runs JaxMARL's baselines")
    p.add_argument(
        "--jaxmarl-src",
        default=None,
        help="folder with JaxMARL's baselines/IPPO/ippo_ff_mpe.py, baselines/MAPPO/mappo_rnn_mpe.py "
        "and their config/*.yaml (see fusedrl/bench/_jaxmarl_peer.py)",
    )
    p.add_argument("--timeout", type=float, default=3600, help="seconds a run may take")
    args = p.parse_args(argv)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    if not algos or set(algos) - set(ALGOS):
        p.error(
            f"--algos: unknown or no algorithm(s) {sorted(set(algos) - set(ALGOS))}; "
            f"valid: {', '.join(ALGOS)}"
        )
    for flag in ("seeds", "repeats", "num_envs", "num_steps", "eval_episodes"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.total_timesteps < args.num_envs * args.num_steps:
        p.error(
            f"--total-timesteps {args.total_timesteps} is less than one update's batch "
            f"(--num-envs x --num-steps = {args.num_envs * args.num_steps})"
        )
    if bool(args.peer_python) != bool(args.jaxmarl_src):
        p.error("--peer-python and --jaxmarl-src go together (JaxMARL's scripts run in that interpreter)")
    if args.peer_python and not os.path.isfile(args.peer_python):
        p.error(f"--peer-python {args.peer_python}: no such file")
    if args.jaxmarl_src:
        from fusedrl.bench._jaxmarl_peer import SCRIPTS

        missing = [
            f
            for a in algos
            for f in SCRIPTS[PEER_ALGO[a]]
            if not os.path.isfile(os.path.join(args.jaxmarl_src, f))
        ]
        if missing:
            p.error(
                f"--jaxmarl-src {args.jaxmarl_src}: missing {', '.join(missing)} (copy them, unmodified, "
                f"from github.com/FLAIROx/JaxMARL)"
            )
    size = (args.seeds, args.num_envs, args.num_steps, args.total_timesteps, args.eval_episodes, args.env)
    print(
        f"jax {jax.__version__}, devices {jax.devices()}, {os.cpu_count()} CPUs ({cpu_model()}); {args.env}, "
        f"{args.num_envs} envs x {args.num_steps} steps, {args.total_timesteps} env steps per seed, "
        f"{args.seeds} seed(s) per run, {args.repeats} repeats, "
        f"{args.eval_episodes} greedy episodes per seed",
        flush=True,
    )
    rows = []
    for algo in algos:
        sides = {f"fusedrl-{algo}": lambda a=algo: ours_in_subprocess(a, *size, timeout=args.timeout)}
        if args.peer_python:
            sides[f"jaxmarl-{algo}"] = lambda a=algo: peer_in_subprocess(
                args.peer_python, args.jaxmarl_src, PEER_ALGO[a], *size, timeout=args.timeout
            )
        labels = list(sides)
        runs: dict[str, list[dict]] = {label: [] for label in labels}
        for r in range(args.repeats):
            for label in labels[r % len(labels) :] + labels[: r % len(labels)]:  # rotate the order
                runs[label].append(sides[label]())
                print(json.dumps({"algo": algo, "repeat": r, **runs[label][-1]}), flush=True)
                bad = config_mismatches(algo, runs[label][-1].get("config", {}), args.env)
                if bad:  # a yaml that was changed: no comparison at another config
                    raise SystemExit(f"JaxMARL's {algo} config differs from ours: {'; '.join(bad)}")
        row = {"algo": algo, **{label: summarize(rs) for label, rs in runs.items()}}
        peer = f"jaxmarl-{algo}"
        if peer in runs:
            row["ratio"] = row[f"fusedrl-{algo}"]["sps"] / row[peer]["sps"]
            row["paired"] = statistics.median(
                o["sps"] / t["sps"] for o, t in zip(runs[f"fusedrl-{algo}"], runs[peer], strict=True))
        rows.append(row)
    print()
    print(f"{'impl':<15} {'compile s':>9} {'steps/s':>10} "
          f"{'greedy return (mean ± std; IQM [95% interval]; per seed)':<40}")
    for row in rows:
        for label in (f"fusedrl-{row['algo']}", f"jaxmarl-{row['algo']}"):
            if label in row:
                r = row[label]
                seeds = ", ".join(f"{g:.2f}" for g in r["greedy"])
                low, high = r["greedy_iqm_95"]
                print(f"{label:<15} {r['compile_s']:>9.1f} {r['sps']:>10.0f} {r['greedy_mean']:.2f} ± "
                      f"{r['greedy_std']:.2f}; {r['greedy_iqm']:.2f} [{low:.2f}, {high:.2f}]; {seeds}")
        if "ratio" in row:
            print(f"{row['algo']}: ratio fusedrl/jaxmarl steps/s (median of runs): {row['ratio']:.2f}x, "
                  f"paired {row['paired']:.2f}x")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
