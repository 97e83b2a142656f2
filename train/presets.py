"""Tuned hyperparameters per environment and algorithm, in one readable place.

`preset(env_id, **overrides)` returns a validated `PPOConfig`; `preset(env_id, algo="a2c")` an
`A2CConfig` (`algo="reinforce"`: a `ReinforceConfig`). Every preset here was measured (see the
results table in README.md and the command that reproduces each row); the budget is part of the
preset, since learning-rate annealing ties the schedule to `total_timesteps`.
"""

from __future__ import annotations

from typing import Any

from fusedrl.envs.registry import check_env_id
from fusedrl.train.config import OnPolicyConfig, config_class

PRESETS: dict[str, dict[str, Any]] = {
    # PureJaxRL's CartPole settings.
    "CartPole-v1": dict(
        num_envs=4, num_steps=128, total_timesteps=500_000, update_epochs=4, num_minibatches=4,
        lr=2.5e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
    ),
    # rl-zoo ppo.yml (normalize, gae 0.94) with PureJaxRL-size batches, lr 1e-3 and an entropy
    # bonus of 0.01 (with rl-zoo's 0, 2 of 48 seeds stalled at -500 and never recovered).
    "Acrobot-v1": dict(
        num_envs=16, num_steps=128, total_timesteps=1_000_000, update_epochs=4, num_minibatches=8,
        lr=1e-3, gamma=0.99, gae_lambda=0.94, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", normalize_obs=True,
    ),
    # After rl-zoo ppo.yml (gae 0.95, 10 epochs, lr 1e-3; no gSDE here), 32 envs, gamma 0.98. It
    # falls short of gymnax-blines' -130, which a near-optimal controller does not reach either from
    # random starts (docs/results.md).
    "Pendulum-v1": dict(
        num_envs=32, num_steps=128, total_timesteps=1_000_000, update_epochs=10, num_minibatches=8,
        lr=1e-3, gamma=0.98, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.0, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", normalize_obs=True,
        normalize_reward=True,
    ),
    # Recurrent PPO on bsuite's memory chain (the cue is seen at the first step only and must be
    # answered at the last): a 32-unit GRU, 16 envs of 32-step rollouts.
    "gymnax:MemoryChain-bsuite": dict(
        num_envs=16, num_steps=32, total_timesteps=100_000, update_epochs=4, num_minibatches=4,
        lr=1e-3, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(32,), activation="tanh", recurrent="gru", recurrent_size=32,
    ),
    # Recurrent PPO on CartPole with the velocities hidden (only x and theta observed): a 64-unit GRU
    # after one 64-unit layer, 16 envs of 128-step rollouts, lr 1e-3. Observations are normalised:
    # the angle spans about a tenth of the position's range, and its changes are what the GRU must read.
    "CartPole-NoVelocity-v1": dict(
        num_envs=16, num_steps=128, total_timesteps=1_000_000, update_epochs=4, num_minibatches=4,
        lr=1e-3, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64,), activation="tanh", normalize_obs=True, recurrent="gru",
        recurrent_size=64,
    ),
    # rl-zoo ppo.yml (normalize, 16-step rollouts, gae 0.98, ent 0, lr 3e-4), 32 envs, 8 epochs
    # (with 4, the mean fell below the reference).
    "MountainCar-v0": dict(
        num_envs=32, num_steps=16, total_timesteps=1_000_000, update_epochs=8, num_minibatches=4,
        lr=3e-4, gamma=0.99, gae_lambda=0.98, clip_eps=0.2, ent_coef=0.0, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", normalize_obs=True,
        normalize_reward=True,
    ),
    # rl-zoo-style normalize obs+reward; no gSDE: the state-independent std starts at 1 and ent_coef 0.
    "MountainCarContinuous-v0": dict(
        num_envs=32, num_steps=128, total_timesteps=1_000_000, update_epochs=4, num_minibatches=8,
        lr=3e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.0, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", normalize_obs=True,
        normalize_reward=True,
    ),
    # gymnax-blines' MinAtar PPO (64 envs x 128 steps, 2x256 MLP, gamma 0.999, constant lr 5e-4,
    # ent 0.01), trained for 2e7 steps, twice their 1e7: at 1e7 one seed in four stayed below the
    # reference; at 2e7 about one in sixteen does (docs/results.md).
    "gymnax:Breakout-MinAtar": dict(
        num_envs=64, num_steps=128, total_timesteps=20_000_000, update_epochs=4, num_minibatches=8,
        lr=5e-4, anneal_lr=False, gamma=0.999, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01,
        vf_coef=0.5, max_grad_norm=0.5, hidden_sizes=(256, 256), activation="relu",
    ),
    # gymnax-blines' MinAtar PPO as for Breakout, their 1e7 steps, with the lr annealed (a constant lr,
    # as Breakout's, scored lower).
    "gymnax:SpaceInvaders-MinAtar": dict(
        num_envs=64, num_steps=128, total_timesteps=10_000_000, update_epochs=4, num_minibatches=8,
        lr=5e-4, gamma=0.999, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(256, 256), activation="relu",
    ),
    # Navix's own PPO defaults (navix.agents.PPOHparams: 16 envs x 128 steps, 1 epoch of 8
    # minibatches, lr 2.5e-4 annealed, ent 0.01, 1e6 steps) with a 64x64 MLP on the flattened
    # symbolic grid.
    "navix:Navix-Empty-5x5-v0": dict(
        num_envs=16, num_steps=128, total_timesteps=1_000_000, update_epochs=1, num_minibatches=8,
        lr=2.5e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
    ),
    # XLand-MiniGrid's single-task PPO (training/train_single_task.py: 16-step rollouts, 1 epoch of
    # 16 minibatches, lr 1e-3 annealed, ent 0.01, 1e6 steps) with 64 envs instead of 8192 and a 64x64
    # MLP on the flattened 7x7 view instead of its 1024-unit GRU.
    "xminigrid:MiniGrid-Empty-5x5": dict(
        num_envs=64, num_steps=16, total_timesteps=1_000_000, update_epochs=1, num_minibatches=16,
        lr=1e-3, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
    ),
    # Brax's PPO settings for inverted_pendulum (its training notebook: gamma 0.97, lr 3e-4, entropy
    # 0.01, 4 epochs, normalized observations, rewards scaled), with a CPU-sized batch: 64 envs x 32
    # steps, 8 minibatches, 1e6 steps (Brax's: 2048 envs, 2e6 steps).
    "brax:inverted_pendulum": dict(
        num_envs=64, num_steps=32, total_timesteps=1_000_000, update_epochs=4, num_minibatches=8,
        lr=3e-4, gamma=0.97, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", normalize_obs=True,
        normalize_reward=True,
    ),
    # After MuJoCo Playground's dm_control PPO config (gamma 0.995, lr 1e-3, entropy 0.01, normalized
    # observations, rewards scaled) with a CPU-sized batch: 64 envs x 32 steps, 8 epochs of 8
    # minibatches (theirs: 2048 envs, 16 epochs of 32), 2e6 steps (theirs: 6e7; at 1e6 one seed in
    # four stayed near 330).
    "playground:CartpoleBalance": dict(
        num_envs=64, num_steps=32, total_timesteps=2_000_000, update_epochs=8, num_minibatches=8,
        lr=1e-3, gamma=0.995, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", normalize_obs=True,
        normalize_reward=True,
    ),
    # Jumanji's Snake (12x12 grid, dict observation with an action mask): Stoix's ff_ppo settings (4
    # epochs, clip 0.1, ent 0.01, lr 2.5e-4 annealed, its 2x256 MLP torso) with Jumanji's own Snake
    # discount 0.997 (its A2C config), 64 envs x 128 steps and 2e6 steps for a CPU (Jumanji trained
    # 1.28e8). Needs the networks' dict-observation and action-mask support.
    "jumanji:Snake-v1": dict(
        num_envs=64, num_steps=128, total_timesteps=2_000_000, update_epochs=4, num_minibatches=8,
        lr=2.5e-4, gamma=0.997, gae_lambda=0.95, clip_eps=0.1, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(256, 256), activation="relu",
    ),
    # The Craftax paper's PPO (Craftax_Baselines ppo.py: 1024 envs x 64 steps, 4 epochs of 8
    # minibatches, lr 2e-4 annealed, gae 0.8, max_grad_norm 1.0, tanh, 3x512 layers, 1e9 steps)
    # scaled to a CPU: 64 envs, 2x256 layers, 65,536 steps (a 2-core CPU steps Craftax-Classic at
    # some hundreds of steps per second), 1/15,000 of the paper's budget.
    "craftax:Craftax-Classic-Symbolic-v1": dict(
        num_envs=64, num_steps=64, total_timesteps=65_536, update_epochs=4, num_minibatches=8,
        lr=2e-4, gamma=0.99, gae_lambda=0.8, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=1.0, hidden_sizes=(256, 256), activation="tanh",
    ),
    # IPPO at JaxMARL's own MPE config (baselines/IPPO/config/ippo_ff_mpe.yaml: 16 envs x 128 steps, 4
    # epochs x 4 minibatches, lr 2.5e-4 annealed, 2x64 tanh), one network shared by the 3 agents, 1e6
    # env steps (JaxMARL's: 1e7). MAPPO: add critic="centralized"; `python -m fusedrl.bench marl --algos
    # mappo` runs JaxMARL's GRU MAPPO config and choices (docs/results.md, Multi-agent).
    "jaxmarl:MPE_simple_spread_v3": dict(
        num_envs=16, num_steps=128, total_timesteps=1_000_000, update_epochs=4, num_minibatches=4,
        lr=2.5e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
    ),
    # Jumanji's LevelBasedForaging (8x8, 2 agents, 2 food, 100-step limit, masked actions) at the MPE
    # preset's IPPO numbers, 5e5 env steps for a CPU. MAPPO: add critic="centralized".
    "jumanji:LevelBasedForaging-v0": dict(
        num_envs=16, num_steps=128, total_timesteps=500_000, update_epochs=4, num_minibatches=4,
        lr=2.5e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
    ),
}


#: The other algorithms' presets, by `algo` ("a2c", "reinforce"), then env id (PPO's: `PRESETS`).
ALGO_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "a2c": {
        # SB3's A2C defaults (8 envs x 5 steps, RMSprop lr 7e-4, gae_lambda 1, ent 0, vf 0.5, grad
        # norm 0.5), 2x64 tanh MLPs, rl-zoo's 5e5 steps.
        "CartPole-v1": dict(
            num_envs=8, num_steps=5, total_timesteps=500_000, lr=7e-4, gamma=0.99, gae_lambda=1.0,
            ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
            optimizer="rmsprop",
        ),
        # rl-zoo a2c.yml: SB3's defaults with 16 envs, 5e5 steps and `normalize: true`, which is
        # VecNormalize of observations and rewards both (with observations alone, one seed in four
        # stayed near -300).
        "Acrobot-v1": dict(
            num_envs=16, num_steps=5, total_timesteps=500_000, lr=7e-4, gamma=0.99, gae_lambda=1.0,
            ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
            optimizer="rmsprop", normalize_obs=True, normalize_reward=True,
        ),
    },
    "reinforce": {
        # Whole-episode rollouts (500 steps, the time limit) of 8 envs, Adam lr 3e-3 annealed, learned
        # baseline, returns standardised per batch. No gradient clipping: the baseline's loss (on
        # returns in the hundreds) dominates the gradient norm, so a clip shrinks the policy's steps
        # with it. The annealing keeps late updates from undoing a solved policy.
        "CartPole-v1": dict(
            num_envs=8, num_steps=500, total_timesteps=500_000, lr=3e-3, gamma=0.99, ent_coef=0.0,
            vf_coef=0.5, max_grad_norm=float("inf"), hidden_sizes=(64, 64), activation="tanh",
            baseline=True, normalize_returns=True, optimizer="adam", anneal_lr=True,
        ),
        # CartPole's settings (500-step rollouts: Acrobot's time limit is 500 too) with observations
        # normalised (its angular velocities reach 4 pi and 9 pi), PPO's 1e6 steps and an entropy
        # bonus of 0.01 (without it, more seeds stalled at -500: docs/results.md).
        "Acrobot-v1": dict(
            num_envs=8, num_steps=500, total_timesteps=1_000_000, lr=3e-3, gamma=0.99, ent_coef=0.01,
            vf_coef=0.5, max_grad_norm=float("inf"), hidden_sizes=(64, 64), activation="tanh",
            baseline=True, normalize_returns=True, optimizer="adam", anneal_lr=True, normalize_obs=True,
        ),
    },
}


def _table(algo: str) -> dict[str, dict[str, Any]]:
    config_class(algo)  # refuses an unknown algo, naming the valid ones
    return PRESETS if algo == "ppo" else ALGO_PRESETS.get(algo, {})


def preset_source(env_id: str, algo: str = "ppo") -> str | None:
    """The key of the presets of `algo` ("ppo": `PRESETS`; else `ALGO_PRESETS[algo]`) that
    `preset(env_id, algo=algo)` uses, or None.

    A "gymnasium:" id uses the preset of its JAX twin ("gymnasium:CartPole-v1": "CartPole-v1"):
    the host bridge trains the same environment (the classic-control twins match Gymnasium
    transition for transition, tests/test_env_parity.py).
    """
    table = _table(algo)
    if env_id in table:
        return env_id
    prefix, _, twin = env_id.partition(":")
    if prefix == "gymnasium" and twin in table:
        return twin
    return None


def preset_fields(env_id: str, algo: str = "ppo") -> dict[str, Any]:
    """The config fields of `env_id`'s preset for `algo` (see `preset_source`), a copy; {} if none."""
    source = preset_source(env_id, algo)
    return dict(_table(algo)[source]) if source else {}


def preset(env_id: str, *, algo: str = "ppo", **overrides) -> OnPolicyConfig:
    """The tuned config of algorithm `algo` ("ppo": a `PPOConfig`, "a2c": an `A2CConfig`,
    "reinforce": a `ReinforceConfig`) for `env_id` (see `preset_source`), with `overrides` applied.

    An env without a tuned preset (`has_preset` False) gets the config's defaults (PPO's are
    PureJaxRL's CartPole settings) and `env_id`; an id that names no environment is refused as
    `fusedrl.make` refuses it, with the closest ids (`fusedrl.envs.check_env_id`).
    """
    if not has_preset(env_id, algo):
        check_env_id(env_id)
    return config_class(algo)(**{**preset_fields(env_id, algo), **overrides, "env_id": env_id})


def has_preset(env_id: str, algo: str = "ppo") -> bool:
    return preset_source(env_id, algo) is not None
