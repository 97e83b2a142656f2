"""Runs JaxMARL's own MPE baselines (IPPO: `baselines/IPPO/ippo_ff_mpe.py`; MAPPO:
`baselines/MAPPO/mappo_rnn_mpe.py`) at their yaml config with the batch and budget given, then
evaluates each seed's final policy greedily; prints one JSON line.

    PYTHON _jaxmarl_peer.py ALGO SEEDS NUM_ENVS NUM_STEPS TOTAL EVAL_EPISODES [ENV]   (JAXMARL_SRC set)

ENV: the env the script trains on, its yaml's (MPE_simple_spread_v3) by default. A fusedrl id of a
multi-agent env JaxMARL lacks (`jumanji:LevelBasedForaging-v0`) runs the same script on fusedrl's
adapter of that env, shown to the script as a JaxMARL `MultiAgentEnv` (`JaxMARLView`): in this
process only, `jaxmarl.make` returns that view for such an id (the script calls
`jaxmarl.make(config["ENV_NAME"])` inside its `make_train`, and ENV_NAME is set to the id), and
JaxMARL's own ids as before. The script, its wrappers (`MPELogWrapper`, MAPPO's
`MPEWorldStateWrapper`) and JaxMARL's `MultiAgentEnv.step` (its auto-reset) run unmodified on it.

ALGO is "ippo" or "mappo". `JAXMARL_SRC` is a folder holding, from github.com/FLAIROx/JaxMARL,
unmodified: `baselines/IPPO/ippo_ff_mpe.py` with `baselines/IPPO/config/ippo_ff_mpe.yaml`, and
`baselines/MAPPO/mappo_rnn_mpe.py` with `baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml`.
The interpreter needs what those scripts import (jaxmarl, distrax, optax, flax, wandb, hydra-core,
omegaconf, matplotlib). Nothing of JaxMARL is part of fusedrl; this file only does what the scripts'
own `main` does: reads the yaml with omegaconf (NUM_ENVS, NUM_STEPS, TOTAL_TIMESTEPS replaced by the
arguments; every other number is the yaml's), calls `wandb.init(mode=config["WANDB_MODE"])` (the
yaml's "disabled": the scripts log every update through `io_callback` to `wandb.log`, a no-op then,
and that callback stays part of what is timed) and runs `jax.jit(make_train(config))`. Seeds run one
after another through the one compiled program (keys `jax.random.split(PRNGKey(0), SEEDS)`): its
vmapped orthogonal initialiser can hang XLA's CPU thread pool on 2 cores (docs/speed.md).

Evaluation: the team return (the episode's sum of the mean over agents of their rewards, fusedrl's
`episode_return`) of EVAL_EPISODES episodes of JaxMARL's own env, the actor's argmax action at every
step (MAPPO: its GRU carried through the episode, reset at its start as the script does), so both
sides are scored by the same measure. IPPO's script also returns its training metrics: its last
update's completed episodes' `returned_episode_returns` (which `MPELogWrapper` multiplies by the
number of agents) divided by the number of agents, on the same scale.
"""

import importlib.util
import json
import os
import sys

SCRIPTS = {
    "ippo": ("baselines/IPPO/ippo_ff_mpe.py", "baselines/IPPO/config/ippo_ff_mpe.yaml"),
    "mappo": ("baselines/MAPPO/mappo_rnn_mpe.py", "baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml"),
}
#: The yaml's fields that fusedrl's side must match (printed, so the bench can compare them).
REPORTED = (
    "LR",
    "UPDATE_EPOCHS",
    "NUM_MINIBATCHES",
    "GAMMA",
    "GAE_LAMBDA",
    "CLIP_EPS",
    "ENT_COEF",
    "VF_COEF",
    "MAX_GRAD_NORM",
    "ACTIVATION",
    "ANNEAL_LR",
    "ENV_NAME",
    "FC_DIM_SIZE",
    "GRU_HIDDEN_DIM",
    "SCALE_CLIP_EPS",
)


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def jaxmarl_view(env_id: str):
    """fusedrl's multi-agent env `env_id` (`fusedrl.make`: JaxMARL's contract without `step`) as a
    JaxMARL `MultiAgentEnv`: JaxMARL's `step` (auto-reset on `dones["__all__"]`, to the state of
    `reset(key_reset)`) around the adapter's `step_env`; its spaces as JaxMARL's `Box` and
    `Discrete`; `get_avail_actions` the adapter's masks (which `ippo_ff_mpe.py` never reads)."""
    import jax.numpy as jnp
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv
    from jaxmarl.environments.spaces import Box, Discrete

    import fusedrl

    class JaxMARLView(MultiAgentEnv):
        def __init__(self, env):
            super().__init__(num_agents=len(env.agents))
            self.env, self.agents, self.max_steps = env, list(env.agents), env.max_steps
            for a in self.agents:
                shape, n = env.observation_space(a).shape, env.action_space(a).n
                self.observation_spaces[a] = Box(-jnp.inf, jnp.inf, tuple(shape), jnp.float32)
                self.action_spaces[a] = Discrete(int(n))

        def reset(self, key):
            return self.env.reset(key)

        def step_env(self, key, state, actions):
            return self.env.step_env(key, state, actions)

        def get_avail_actions(self, state):
            return self.env.get_avail_actions(state)

    env, _ = fusedrl.make(env_id)
    if not hasattr(env, "agents"):
        raise ValueError(f"{env_id} is a single-agent env; the runner needs a multi-agent one.")
    return JaxMARLView(env)


def _route_make(jaxmarl) -> None:
    """`jaxmarl.make`, in this process: ids with a suite prefix ("jumanji:...") give `jaxmarl_view`,
    JaxMARL's own ids JaxMARL's env."""
    make = jaxmarl.make

    def routed(env_id, **kwargs):
        if ":" in env_id:
            if kwargs:
                raise ValueError(f"{env_id}: fusedrl's adapters take no ENV_KWARGS, got {kwargs}")
            return jaxmarl_view(env_id)
        return make(env_id, **kwargs)

    jaxmarl.make = routed


def _greedy_returns(algo, module, config, params, key, episodes):
    """Team returns [episodes] of the greedy policy on JaxMARL's env (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import jaxmarl

    env = jaxmarl.make(config["ENV_NAME"], **config["ENV_KWARGS"])
    agents, n = env.agents, env.num_agents
    actors = n * episodes
    action_dim = env.action_space(agents[0]).n
    if algo == "ippo":
        network = module.ActorCritic(action_dim, activation=config["ACTIVATION"])
    else:
        network = module.ActorRNN(action_dim, config=config)

    def act(obs, hidden, done):
        x = jnp.stack([obs[a] for a in agents]).reshape((actors, -1))  # the scripts' batchify
        if algo == "ippo":
            pi, _ = network.apply(params, x)
            return jnp.argmax(pi.logits, axis=-1), hidden
        hidden, pi = network.apply(params, hidden, (x[None], done[None]))
        return jnp.argmax(pi.logits, axis=-1)[0], hidden

    key, reset_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset)(jax.random.split(reset_key, episodes))
    hidden = (
        module.ScannedRNN.initialize_carry(actors, config["GRU_HIDDEN_DIM"])
        if algo == "mappo"
        else jnp.zeros(())
    )
    length = env.max_steps + 2  # MPE ends an episode on its step max_steps + 1, the others by max_steps

    def step(carry, step_key):
        obs, state, hidden, done_agents, finished, ret = carry
        action, hidden = act(obs, hidden, done_agents)
        actions = {a: action.reshape((n, episodes))[i] for i, a in enumerate(agents)}
        obs, state, reward, done, _ = jax.vmap(env.step)(jax.random.split(step_key, episodes), state, actions)
        team = jnp.mean(jnp.stack([reward[a] for a in agents]), axis=0)
        ret = ret + jnp.where(finished, 0.0, team)
        finished = finished | done["__all__"]
        done_agents = jnp.stack([done[a] for a in agents]).reshape((actors,))
        return (obs, state, hidden, done_agents, finished, ret), None

    init = (
        obs,
        state,
        hidden,
        jnp.zeros((actors,), bool),
        jnp.zeros((episodes,), bool),
        jnp.zeros((episodes,)),
    )
    (_, _, _, _, finished, ret), _ = jax.lax.scan(step, init, jax.random.split(key, length))
    if not bool(finished.all()):
        raise RuntimeError(f"{int((~finished).sum())} evaluation episodes did not end in {length} steps")
    return ret


def main() -> None:
    algo = sys.argv[1] if len(sys.argv) > 1 else ""
    if algo not in SCRIPTS or len(sys.argv) not in (7, 8):
        sys.exit(
            f"usage: {sys.argv[0]} ALGO SEEDS NUM_ENVS NUM_STEPS TOTAL EVAL_EPISODES [ENV], "
            f"ALGO in {list(SCRIPTS)}"
        )
    src = os.environ.get("JAXMARL_SRC")
    script, yaml = (os.path.join(src or "", p) for p in SCRIPTS[algo])
    if not src or not (os.path.isfile(script) and os.path.isfile(yaml)):
        sys.exit(
            f"JAXMARL_SRC must name a folder holding {SCRIPTS[algo][0]} and {SCRIPTS[algo][1]}, got {src!r}."
        )
    # `python _jaxmarl_peer.py` puts this folder first on sys.path, where its `profile.py` (a bench
    # subcommand) would shadow the standard library's, which wandb imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import jax
    import jaxmarl
    import numpy as np
    import wandb
    from omegaconf import OmegaConf

    compile_then_run = _load(os.path.join(here, "_timing.py"), "_timing").compile_then_run

    seeds, envs, steps, total, episodes = (int(float(x)) for x in sys.argv[2:7])
    module = _load(script, f"jaxmarl_{algo}_baseline")
    config = OmegaConf.to_container(OmegaConf.load(yaml))
    config.update(NUM_ENVS=envs, NUM_STEPS=steps, TOTAL_TIMESTEPS=total)
    if len(sys.argv) == 8:
        config["ENV_NAME"] = sys.argv[7]
    _route_make(jaxmarl)
    reported = {k: config[k] for k in REPORTED if k in config}
    wandb.init(config=config, mode=config["WANDB_MODE"])
    train = jax.jit(module.make_train(config))  # make_train adds NUM_ACTORS, NUM_UPDATES, ... to config
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    compile_s, train_s, greedy, trained = 0.0, 0.0, [], []
    for i, key in enumerate(keys):
        if i == 0:
            out, compile_s, seconds = compile_then_run(train, key)
        else:
            out, _, seconds = compile_then_run(train, key)  # the compiled program is cached
        train_s += seconds
        if algo == "ippo":
            params = out["runner_state"][0].params
            # The script's own curve: per update, the mean over its steps and actors of the last
            # completed episode's return (0 before an env's first episode ends), times the agents.
            curve = np.asarray(out["metrics"]["returned_episode_returns"])  # [updates]
            trained.append(float(curve[-1]) / (config["NUM_ACTORS"] // envs))
        else:
            params = out["runner_state"][0][0][0].params  # ((train_states, ...), update_steps): the actor
        greedy.append(
            float(
                np.mean(_greedy_returns(algo, module, config, params, jax.random.PRNGKey(1000 + i), episodes))
            )
        )
    wandb.finish()
    n = config["NUM_UPDATES"] * envs * steps * seeds
    print(
        json.dumps(
            {
                "impl": f"jaxmarl-{algo}",
                "compile_s": compile_s,
                "train_s": train_s,
                "sps": n / train_s,
                "env_steps": n // seeds,
                "greedy": greedy,
                "train_ret": trained,
                "config": reported,
            }
        )
    )


if __name__ == "__main__":
    main()
