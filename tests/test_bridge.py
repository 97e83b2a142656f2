"""The host-environment bridge: `gymnasium:` ids in `make` and `make_train`, episode ends, bad input,
and a real learning threshold on CartPole."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl
from fusedrl import make_train
from fusedrl.bridge import HostPPO, evaluate
from fusedrl.envs import Box, Discrete
from fusedrl.envs.host import HostEnv, HostEnvError
from fusedrl.train import METRIC_NAMES, PPOConfig

CARTPOLE = "gymnasium:CartPole-v1"
TINY = dict(env_id=CARTPOLE, num_envs=2, num_steps=16, total_timesteps=2 * 16 * 3, update_epochs=1,
            num_minibatches=2, hidden_sizes=(8,), normalize_obs=True, normalize_reward=True)


# ------------------------------------------------------------------------- test environments
class _Base(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(3, np.float32), 1.0, False, self.t >= 50, {}


class _RaisesInStep(_Base):
    open_envs: set[int] = set()

    def __init__(self):
        self.open_envs.add(id(self))

    def step(self, action):
        if self.t >= 4:
            raise RuntimeError("simulator exploded")
        return super().step(action)

    def close(self):
        self.open_envs.discard(id(self))


class _DictObs(_Base):
    observation_space = gymnasium.spaces.Dict({"a": gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)})


class _MultiDiscreteAct(_Base):
    action_space = gymnasium.spaces.MultiDiscrete([2, 3])


class _MatrixBoxAct(_Base):
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (2, 2), np.float32)


for _cls in (_RaisesInStep, _DictObs, _MultiDiscreteAct, _MatrixBoxAct):
    gymnasium.register(id=f"FusedrlTest/{_cls.__name__[1:]}-v0", entry_point=_cls)


@pytest.fixture(scope="module")
def tiny():
    config = PPOConfig(**TINY)
    train = make_train(config)
    return config, train, train(jax.random.key(0))


# --------------------------------------------------------------------------------- make
def test_make_returns_a_host_env_descriptor():
    env, params = fusedrl.make(CARTPOLE)
    assert isinstance(env, HostEnv) and params is None
    assert isinstance(env.action_space(params), Discrete) and env.action_space(params).n == 2
    obs_space = env.observation_space(params)
    assert isinstance(obs_space, Box) and obs_space.shape == (4,)
    assert env.max_episode_steps == 500
    with pytest.raises(TypeError, match="host"):
        env.reset(jax.random.key(0), params)
    # Discrete observations become one-hot vectors.
    lake, _ = fusedrl.make("gymnasium:FrozenLake-v1", is_slippery=False)
    assert lake.observation_space().shape == (16,)
    np.testing.assert_array_equal(lake.encode_obs(np.array([0, 3])).argmax(1), [0, 3])


def test_host_env_offsets_discrete_starts_and_clips_box_actions():
    spaces = gymnasium.spaces
    env = HostEnv("gymnasium:Offsets-v0", "Offsets-v0", {}, spaces.Discrete(4, start=2),
                  spaces.Discrete(3, start=-1), None)
    # Observations 2..5 are one-hot over 4 slots; policy actions 0..2 are the env's -1..1.
    np.testing.assert_array_equal(env.encode_obs(np.array([2, 5, 3])), np.eye(4, dtype=np.float32)[[0, 3, 1]])
    np.testing.assert_array_equal(env.decode_action(np.array([0, 2, 1])), [-1, 1, 0])
    box = HostEnv("gymnasium:Bounds-v0", "Bounds-v0", {}, spaces.Box(-1.0, 1.0, (3,), np.float32),
                  spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32)), None)
    decoded = box.decode_action(np.array([[-3.0, 5.0], [0.5, -0.5]], np.float32))
    np.testing.assert_array_equal(decoded, [[-1.0, 2.0], [0.5, 0.0]])
    assert decoded.dtype == np.float32
    # A Box action of more than one axis is refused by `make` already (PPO's Gaussian is 1-D).
    with pytest.raises(ValueError, match=r"unsupported action space Box.*\(2, 2\)"):
        fusedrl.make("gymnasium:FusedrlTest/MatrixBoxAct-v0")


def test_unknown_gymnasium_id_names_it_and_lists_close_matches():
    with pytest.raises(ValueError) as info:
        fusedrl.make("gymnasium:CartPol-v1")
    msg = str(info.value)
    assert "'gymnasium:CartPol-v1'" in msg and "gymnasium:CartPole-v1" in msg


@pytest.mark.parametrize("name, words", [
    ("DictObs", ["observation space", "Dict"]),
    ("MultiDiscreteAct", ["action space", "MultiDiscrete"]),
])
def test_unsupported_spaces_are_named(name, words):
    env_id = f"gymnasium:FusedrlTest/{name}-v0"
    with pytest.raises(ValueError) as info:
        make_train(PPOConfig(env_id=env_id, num_envs=2, num_steps=8, total_timesteps=16))
    for w in words + [env_id]:
        assert w in str(info.value), (w, str(info.value))


def test_module_prefixed_gymnasium_ids_import_their_module(tmp_path, monkeypatch):
    # Gymnasium's "module:EnvId": the module registers the env when gym.make imports it.
    (tmp_path / "fusedrl_modtest.py").write_text(
        "import gymnasium\n"
        "gymnasium.register(id='FusedrlModTest-v0', max_episode_steps=50,\n"
        "                   entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        env, _ = fusedrl.make("gymnasium:fusedrl_modtest:FusedrlModTest-v0")
        assert env.max_episode_steps == 50 and env.obs_dim == 4
    finally:
        gymnasium.envs.registry.pop("FusedrlModTest-v0", None)
    with pytest.raises(HostEnvError, match="no_such_module"):
        fusedrl.make("gymnasium:no_such_module:Nothing-v0")


def test_env_raising_in_step_stops_training_and_closes_the_envs():
    env_id = "gymnasium:FusedrlTest/RaisesInStep-v0"
    config = PPOConfig(env_id=env_id, num_envs=2, num_steps=8, total_timesteps=32, hidden_sizes=(8,))
    _RaisesInStep.open_envs.clear()
    with pytest.raises(HostEnvError) as info:
        make_train(config)(jax.random.key(0))
    msg = str(info.value)
    assert env_id in msg and "RuntimeError" in msg and "simulator exploded" in msg
    assert isinstance(info.value.__cause__, RuntimeError)
    assert not _RaisesInStep.open_envs  # every env built was closed


# ------------------------------------------------------------------------------ training
def test_results_have_the_fused_format(tiny):
    config, train, result = tiny
    assert isinstance(train, HostPPO) and isinstance(result, fusedrl.TrainResult)
    assert set(result.metrics) == {*METRIC_NAMES, "env_fault"}
    for name, x in result.metrics.items():
        assert x.shape == (config.num_updates,), name
        assert np.all(np.isfinite(np.asarray(x, np.float64))), name
    np.testing.assert_array_equal(result.metrics["env_steps"], config.batch_size * np.arange(1, 4))
    np.testing.assert_allclose(result.metrics["learning_rate"], config.lr * (1 - np.arange(3) / 3),
                               rtol=1e-6)
    # The observation normaliser saw the reset batch and every step's batch (+ its prior weight).
    stats = train.obs_stats(result.state)
    np.testing.assert_allclose(stats.count, config.num_envs * (1 + config.env_steps // config.num_envs)
                               + 1e-4, rtol=1e-6)
    # Same key, same run.
    again = train(jax.random.key(0))
    for name in result.metrics:
        np.testing.assert_array_equal(result.metrics[name], again.metrics[name], err_msg=name)


def test_the_bridge_offers_the_trainers_interface():
    # make_env gives the envs it steps (a Gymnasium vector env), and run takes the trainer's
    # first_update and callback_extra: the callback gets the extra entries on the trainer's updates.
    seen = []
    config = PPOConfig(**TINY)
    train = make_train(config, callback=seen.append, callback_every=2)
    envs = train.make_env(train.default_hparams(), num_envs=3)
    try:
        assert envs.num_envs == 3
    finally:
        envs.close()
    hp = train.default_hparams()
    train.run(train.init(jax.random.key(0), hp), hp, 3, first_update=1, callback_extra={"seed": np.int32(7)})
    # Updates 2 and 4 of the whole run: the 1st and 3rd of these three (1 call if first_update were lost).
    assert len(seen) == 2 and all(int(m["seed"]) == 7 for m in seen)
    assert set(seen[0]) >= {"episode_return", "policy_loss", "seed"}


def test_jit_and_vmap_refuse_with_a_clear_error(tiny):
    _, train, _ = tiny
    for wrap in (jax.jit, jax.vmap):
        with pytest.raises(TypeError, match="host-environment bridge.*on the host"):
            wrap(train)(jax.random.key(0)[None] if wrap is jax.vmap else jax.random.key(0))
    with pytest.raises(TypeError, match="fusedrl.bridge.evaluate"):
        fusedrl.evaluate(PPOConfig(**TINY), tiny[2], jax.random.key(0), num_episodes=2)


def _collect(config):
    """One rollout of `config` through the bridge: (train, hp, the state before and after it, episode,
    steps, host) as `HostPPO.reset_envs` and `HostPPO.collect` leave them."""
    train = make_train(config)
    hp = train.default_hparams()
    envs = train.env.make_vec(config.num_envs)
    try:
        before, episode = train.reset_envs(envs, train.init(jax.random.key(0), hp))
        after, episode, (steps, host) = train.collect(envs, before, episode)
    finally:
        envs.close()
    return train, hp, before, after, episode, steps, host


def _collect_with_a_five_step_limit():
    """One 12-step rollout of 3 Gymnasium CartPoles under a 5-step time limit: every episode is
    truncated (CartPole cannot fall within 5 steps), twice per env. (train, hp, state, episode,
    steps, host) as `HostPPO.collect` leaves them."""
    config = PPOConfig(env_id=CARTPOLE, num_envs=3, num_steps=12, total_timesteps=36,
                       hidden_sizes=(8,), env_params={"max_episode_steps": 5})
    train, hp, _, state, episode, steps, host = _collect(config)
    return train, hp, state, episode, steps, host


def test_truncation_keeps_the_final_observation_and_is_not_termination():
    train, hp, state, _, steps, host = _collect_with_a_five_step_limit()
    _, traj = train.transition(state.env_state, steps, host, hp.gamma)
    done = np.asarray(traj.done)
    ends = np.zeros_like(done)
    ends[[4, 9]] = True
    np.testing.assert_array_equal(done, ends)
    assert not np.asarray(traj.terminated).any()
    np.testing.assert_array_equal(np.asarray(traj.episode_length)[ends], 5)
    obs, next_obs = np.asarray(traj.obs), np.asarray(traj.next_obs)
    # Within an episode next_obs is the next step's obs; at its end it is the pre-reset observation.
    np.testing.assert_array_equal(next_obs[:-1][~ends[:-1]], obs[1:][~ends[:-1]])
    assert np.all(np.abs(next_obs[4] - obs[5]).max(axis=-1) > 0)


# ------------------------------------------------------------- recurrent PPO, A2C, REINFORCE
RECURRENT = dict(env_id=CARTPOLE, num_envs=3, num_steps=12, total_timesteps=36, hidden_sizes=(8,),
                 recurrent="gru", recurrent_size=8, update_epochs=1, num_minibatches=1, normalize_obs=True)


def test_a_recurrent_policy_carries_its_state_and_starts_each_episode_afresh():
    """One 12-step rollout of 3 Gymnasium CartPoles under a 5-step time limit (every env ends two
    episodes): the rollout's log-probabilities and values are those of the fused trainer's replay
    of the sequence from the state before it, reset where an episode ended; so PPO's first
    minibatch sees the policy it acted with (KL 0, nothing clipped)."""
    config = PPOConfig(**{**RECURRENT, "env_params": {"max_episode_steps": 5}})
    train, hp, state, after, _, steps, host = _collect(config)
    start = steps[5]
    assert start is state.policy_state and not np.asarray(start).any()  # every env at an episode start
    _, traj = train.transition(state.env_state, steps, host, hp.gamma)
    done = np.asarray(traj.done)
    assert done[[4, 9]].all() and done.sum() == 6
    fused = train.trainer
    pi, value, carried = fused.replay(state.params, start, traj.obs, traj.done)
    np.testing.assert_allclose(traj.value, value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traj.log_prob, pi.log_prob(traj.action), rtol=1e-5, atol=1e-6)
    # The carry the next rollout starts from: after the last step, reset where it ended an episode.
    np.testing.assert_allclose(after.policy_state, fused.reset_policy_state(carried[-1], traj.done[-1]),
                               rtol=1e-6)
    # Without the resets the same sequence has other values after the first episode end: the check
    # above can tell.
    _, no_reset, _ = fused.replay(state.params, start, traj.obs, jnp.zeros_like(traj.done))
    assert np.abs(np.asarray(no_reset)[5:] - np.asarray(traj.value)[5:]).max() > 1e-4
    _, metrics = train.learn_step(after, steps, host, hp)
    assert abs(float(metrics["approx_kl"])) < 1e-6 and float(metrics["clip_fraction"]) == 0.0


def _bridged(algo):
    from fusedrl.train import A2CConfig, ReinforceConfig

    small = dict(env_id=CARTPOLE, num_envs=2, num_steps=16, total_timesteps=2 * 16 * 3, hidden_sizes=(8,))
    return {"recurrent PPO": PPOConfig(**{**RECURRENT, "num_envs": 2, "total_timesteps": 72}),
            "A2C": A2CConfig(**small),
            "REINFORCE": ReinforceConfig(**small, env_params={"max_episode_steps": 16})}[algo]


@pytest.mark.parametrize("algo", ["recurrent PPO", "A2C", "REINFORCE"])
def test_every_algorithm_trains_and_evaluates_through_the_bridge(algo):
    config = _bridged(algo)
    train = make_train(config)
    assert isinstance(train, HostPPO)
    result = train(jax.random.key(0))
    assert set(result.metrics) == {*METRIC_NAMES, "env_fault"}
    for name, x in result.metrics.items():
        assert x.shape == (config.num_updates,), name
        assert np.all(np.isfinite(np.asarray(x, np.float64))), name
    assert int(result.metrics["episodes_completed"].sum()) > 0
    # The first update's parameters moved, by the algorithm's own optimiser step(s).
    assert float(result.metrics["gradient_steps"][0]) == 1  # one epoch of one minibatch (PPO), or one step
    before = train.init(jax.random.key(0)).params
    assert any(not np.allclose(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(result.params),
                                                        strict=True))
    returns = np.asarray(evaluate(config, result, jax.random.key(1), num_episodes=3))
    assert returns.shape == (3,) and (returns >= 1).all()


def test_reinforce_through_the_bridge_refuses_rollouts_shorter_than_the_time_limit():
    from fusedrl.train import ReinforceConfig

    config = ReinforceConfig(env_id=CARTPOLE, num_envs=2, num_steps=16, total_timesteps=32)
    with pytest.raises(ValueError) as info:
        make_train(config)
    for w in ["num_steps=16", "time limit (max_episode_steps=500)", "num_steps >= 500",
              "env_params={'max_episode_steps': 16}"]:
        assert w in str(info.value), (w, str(info.value))



def test_train_command_refuses_short_reinforce_rollouts_before_any_work(run_cli, tmp_path):
    # On the bridge and on the fused path alike: a usage error naming the fix, no run folder.
    for env_id, keyword in ((CARTPOLE, "max_episode_steps"), ("CartPole-v1", "max_steps_in_episode")):
        code, _, err = run_cli("train", "--env", env_id, "--algo", "reinforce", "--set", "num_steps=16",
                               "--out", tmp_path / "r")
        assert code == 2 and "num_steps >= 500" in err and f"{{'{keyword}': 16}}" in err, err
        assert "Traceback" not in err and not (tmp_path / "r").exists()


# -------------------------------------------------------------------------- the CLI
TINY_ARGS = ["--set", "num_envs=2", "--set", "num_steps=16", "--total-timesteps", "96",
             "--set", "update_epochs=1", "--set", "num_minibatches=2", "--set", "hidden_sizes=8",
             "--set", "normalize_obs=true", "--eval-episodes", "3", "--progress-every", "1"]


def test_train_command_trains_a_gymnasium_env_through_the_bridge(run_cli, tmp_path):
    """`fusedrl train --env gymnasium:...` (README): one seed, the whole run folder, and a default
    `fusedrl evaluate` that reproduces the summary's greedy returns."""
    import csv
    import json

    run_dir = tmp_path / "run"
    code, out, err = run_cli("train", "--env", CARTPOLE, *TINY_ARGS, "--out", run_dir)
    assert code == 0, err
    assert "host bridge" in err and "update 3/3" in err  # the header and the progress lines
    assert "(the preset of CartPole-v1; host bridge" in err
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == [".lock", "checkpoint", "config.json", "learning_curve.png", "metrics.csv",
                     "summary.json"]
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["update"]), int(r["seed"])) for r in rows] == [(1, 0), (2, 0), (3, 0)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["mode"] == "bridge"
    assert summary["num_updates"] == 3 and len(summary["eval_return_per_seed"]) == 1
    assert f"{summary['eval_return_mean']:.1f}" in out and "compile included" in out
    code, out, err = run_cli("evaluate", run_dir)
    assert code == 0, err
    assert f"mean      {summary['eval_return_mean']:10.1f}" in out, (summary, out)
    # Stopped while evaluating: --resume evaluates the saved agent, and trains nothing again.
    from fusedrl import run_driver

    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted while evaluating"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_driver, "train_bridge", None)  # calling it would fail
        code, out, err = run_cli("train", "--resume", run_dir, "--no-progress")
    assert code == 0, err
    assert "resumed after update 3, the last: nothing left to train" in out
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["status"] == "finished" and resumed["resumed_at_update"] == 3
    assert resumed["eval_return_per_seed"] == summary["eval_return_per_seed"]
    # The saved policy takes the Gymnasium env's observations and returns what its step takes,
    # normalised with the run's statistics as the bridge's own evaluation does.
    from fusedrl import checkpoint, policy
    from fusedrl.bridge import make_host_train
    from fusedrl.envs.wrappers import NORM_CLIP, NORM_EPSILON

    pi = policy.load(run_dir)
    obs = np.random.default_rng(0).normal(0.0, 0.3, (64, 4)).astype(np.float32)
    config, state, _, _ = checkpoint.restore(run_dir / "checkpoint")
    state = jax.tree.map(lambda x: x[0], state)
    stats = state.env_state.obs_stats
    x = stats.normalize(jnp.asarray(obs), epsilon=NORM_EPSILON, clip=NORM_CLIP)
    expected = np.asarray(make_host_train(config).network.apply(state.params, x)[0].mode())
    actions = pi.act(obs)
    assert isinstance(actions, np.ndarray) and actions.dtype == np.int64
    np.testing.assert_array_equal(actions, expected)
    assert int(pi.act(obs[0])) == expected[0]
    # Observations far out of range are clipped to +-10 after normalising, as in training: with
    # weights that pick action 1 exactly when the first normalised input exceeds a threshold, one
    # of 9.5 picks 1 and one of 10.5 picks 0.
    far = np.asarray(stats.mean + 1e3 * np.sqrt(stats.var), np.float32)[None]
    params = jax.tree.map(jnp.zeros_like, state.params)["params"]
    params["actor_head"]["kernel"] = params["actor_head"]["kernel"].at[0, 1].set(100.0)
    for threshold, action in ((9.5, 1), (10.5, 0)):
        hidden = {"kernel": params["actor_0"]["kernel"].at[0, 0].set(0.1),
                  "bias": params["actor_0"]["bias"].at[0].set(-0.1 * threshold)}
        pi.params = {"params": {**params, "actor_0": hidden}}
        assert int(pi.act(far)[0]) == action, threshold


@pytest.mark.parametrize("argv", [
    ["--algo", "a2c"],
    ["--set", "recurrent=gru", "--set", "recurrent_size=8", "--set", "update_epochs=1",
     "--set", "num_minibatches=1"],
])
@pytest.mark.slow
def test_train_command_runs_a2c_and_recurrent_ppo_through_the_bridge(run_cli, argv, tmp_path):
    # The run folder, its evaluation and its saved policy (a recurrent one carries its state).
    import json

    from fusedrl import policy

    run_dir = tmp_path / "run"
    tiny = ["--set", "num_envs=2", "--set", "num_steps=16", "--total-timesteps", "64",
            "--set", "hidden_sizes=8", "--eval-episodes", "2", "--progress-every", "0"]
    code, out, err = run_cli("train", "--env", CARTPOLE, *argv, *tiny, "--out", run_dir)
    assert code == 0, err
    doc = json.loads((run_dir / "config.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["mode"] == "bridge"
    code, out, err = run_cli("evaluate", run_dir)
    assert code == 0, err
    assert f"mean      {summary['eval_return_mean']:10.1f}" in out, (summary, out)
    pi = policy.load(run_dir)
    assert pi.config.algo == doc["algo"] == ("a2c" if "a2c" in argv else "ppo")
    obs = np.zeros((2, 4), np.float32)
    assert pi.act(obs).shape == (2,)
    assert (pi.policy_state is not None) == ("recurrent=gru" in argv)


def test_a_gymnasium_id_takes_the_preset_of_its_jax_twin():
    from fusedrl.train.presets import has_preset, preset, preset_source

    for twin in ["CartPole-v1", "Pendulum-v1"]:
        bridged = preset(f"gymnasium:{twin}", lr=1e-4)
        assert bridged.env_id == f"gymnasium:{twin}" and bridged.lr == 1e-4
        assert bridged.replace(env_id=twin, lr=preset(twin).lr) == preset(twin)
        assert preset_source(f"gymnasium:{twin}") == twin and has_preset(f"gymnasium:{twin}")
    assert preset_source("gymnax:Breakout-MinAtar") == "gymnax:Breakout-MinAtar"
    # No preset: a Gymnasium env without a JAX twin, and gymnax's Breakout under another prefix.
    for env_id in ["gymnasium:Taxi-v3", "gymnasium:Breakout-MinAtar", "Breakout-MinAtar"]:
        assert preset_source(env_id) is None and not has_preset(env_id)
        if env_id != "Breakout-MinAtar":  # that one names no env: refused (tests/test_cli_rough_edges.py)
            assert preset(env_id) == PPOConfig(env_id=env_id)


def test_train_command_refuses_several_bridge_seeds_before_any_work(run_cli, tmp_path):
    code, _, err = run_cli("train", "--env", CARTPOLE, *TINY_ARGS, "--num-seeds", "2",
                           "--out", tmp_path / "r")
    assert code == 2, err
    assert "--num-seeds" in err and "must be 1" in err and "--seed S" in err and "'CartPole-v1'" in err
    assert not (tmp_path / "r").exists()
    from fusedrl import runs

    with pytest.raises(ValueError, match="num_seeds"):
        runs.train_run(PPOConfig(**TINY), num_seeds=2)


def test_refusals_name_the_jax_twin_only_where_fusedrl_has_one():
    from fusedrl import runs, sweep
    from fusedrl.envs.registry import jax_twin

    assert jax_twin(CARTPOLE) == "CartPole-v1" and jax_twin("gymnasium:Pendulum-v1") == "Pendulum-v1"
    assert jax_twin("gymnasium:FrozenLake-v1") is None  # a Gymnasium env fusedrl has no JAX copy of
    assert jax_twin("CartPole-v1") is None  # already a JAX id
    for env_id, twin in ((CARTPOLE, True), ("gymnasium:FrozenLake-v1", False)):
        config = PPOConfig(**{**TINY, "env_id": env_id})
        with pytest.raises(ValueError) as many_seeds:
            runs.check_supported(config, runs.RunOptions(num_seeds=2))
        with pytest.raises(ValueError) as swept:
            sweep(config, 1, lr=[1e-3])
        for message in (str(many_seeds.value), str(swept.value)):
            if twin:
                assert "fusedrl's JAX version, 'CartPole-v1'," in message, message
            else:
                assert "a JAX env id (see `fusedrl envs`)" in message and "FrozenLake" in message
                assert "JAX version" not in message, message


def test_only_gymnasium_ids_borrow_a_twins_preset():
    from fusedrl.train.presets import preset, preset_source

    for env_id in ["gymnax:CartPole-v1", "other:Pendulum-v1"]:
        assert preset_source(env_id) is None
    assert preset("gymnax:CartPole-v1") == PPOConfig(env_id="gymnax:CartPole-v1")  # defaults, not the twin's
    assert preset_source(CARTPOLE) == "CartPole-v1"


# ------------------------------------------------------------------------- bookkeeping, evaluation
def test_episode_returns_are_the_sum_of_each_episodes_rewards():
    # Every episode is truncated after 5 steps; CartPole pays 1 per step.
    *_, episode, _, host = _collect_with_a_five_step_limit()
    ends = host["episode_done"]
    assert ends.sum() == 6
    np.testing.assert_array_equal(host["episode_return"][ends], 5.0)  # 2nd episodes too: counters reset
    np.testing.assert_array_equal(host["episode_length"][ends], 5)
    np.testing.assert_array_equal(episode[0], 2.0)  # the running 3rd episodes: 2 steps, return 2
    np.testing.assert_array_equal(episode[1], 2)


def test_reward_scaling_resets_the_discounted_return_at_episode_ends():
    config = PPOConfig(env_id=CARTPOLE, num_envs=2, num_steps=4, total_timesteps=8, hidden_sizes=(8,),
                       normalize_reward=True)
    train = make_train(config)
    state = train.init(jax.random.key(0))
    reward = jnp.ones((4, 2), jnp.float32)
    done = np.zeros((4, 2), bool)
    done[1, 0] = True  # env 0 ends an episode at step 1
    env_state, _ = train.scale_rewards(state.env_state, reward, done, 0.9)
    # env 0: returns 1, 1.9 | reset | 1, 1.9; env 1: 1, 1.9, 2.71, 3.439
    np.testing.assert_allclose(env_state.discounted_return, [1.9, 3.439], rtol=1e-6)


def test_the_bridge_and_saved_policies_take_the_normalisers_settings_from_the_wrappers():
    # One source: the bridge restated NormalizeObservation's and NormalizeReward's epsilon and clip
    # (and the reward-scaling step), and fusedrl.policy imported them from the bridge as private names.
    import ast
    import inspect

    import fusedrl.bridge
    import fusedrl.policy
    from fusedrl.envs.wrappers import NORM_CLIP, NORM_EPSILON

    for module in (fusedrl.bridge, fusedrl.policy):
        tree = ast.parse(inspect.getsource(module))
        literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                    and isinstance(n.value, float) and n.value in (NORM_EPSILON, NORM_CLIP)]
        assert not literals, f"{module.__name__} restates the normalisers' settings: {literals}"
        private = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                   for a in n.names if a.name.startswith("_")]
        assert not private, f"{module.__name__} imports private names {private}"


def test_bridge_reward_scaling_is_normalize_rewards():
    # The bridge scales a [T, N] rollout after the fact; NormalizeReward scales each step as it comes.
    from fusedrl.envs.wrappers import RunningMeanStd, scale_reward

    config = PPOConfig(env_id=CARTPOLE, num_envs=3, num_steps=5, total_timesteps=15, hidden_sizes=(8,),
                       num_minibatches=1, normalize_reward=True)
    train = make_train(config)
    env_state = train.init(jax.random.key(0)).env_state
    rng = np.random.default_rng(0)
    reward = jnp.asarray(rng.normal(0.0, 30.0, (5, 3)), jnp.float32)
    done = rng.random((5, 3)) < 0.3
    _, scaled = train.scale_rewards(env_state, reward, done, 0.9)
    stats, ret = RunningMeanStd.create(()), jnp.zeros(3, jnp.float32)
    for t in range(5):
        stats, ret, want = scale_reward(stats, ret, reward[t], done[t], 0.9)
        np.testing.assert_allclose(scaled[t], want, rtol=1e-6)  # scanned vs eager: an ulp
    assert not np.allclose(scaled, reward)


def test_observation_normaliser_counts_the_batch_before_normalising_it():
    # NormalizeObservation's order (fused path): update the statistics, then normalise with them.
    config = PPOConfig(env_id=CARTPOLE, num_envs=4, num_steps=4, total_timesteps=16, hidden_sizes=(8,),
                       normalize_obs=True)
    train = make_train(config)
    env_state = train.init(jax.random.key(0)).env_state
    raw = np.random.default_rng(0).normal(3.0, 2.0, (4, 4)).astype(np.float32)
    new_state, obs, _ = train.observe(env_state, raw)
    from fusedrl.envs.wrappers import RunningMeanStd

    want = RunningMeanStd.create((4,)).update(jnp.asarray(raw))
    np.testing.assert_allclose(new_state.obs_stats.mean, want.mean, rtol=1e-6)
    np.testing.assert_allclose(obs, want.normalize(jnp.asarray(raw), epsilon=1e-8, clip=10.0), rtol=1e-5)


def test_rollout_actions_are_sampled_not_greedy():
    config = PPOConfig(env_id=CARTPOLE, num_envs=64, num_steps=4, total_timesteps=256, hidden_sizes=(8,))
    train = make_train(config)
    state = train.init(jax.random.key(0))
    obs = jnp.zeros((64, 4))  # one observation, 64 times: a sampling policy picks both actions
    _, action, log_prob, _, key = train.act(state.params, state.policy_state, obs, state.key)
    assert len(set(np.asarray(action).tolist())) == 2
    assert not np.array_equal(jax.random.key_data(key), jax.random.key_data(state.key))


def test_evaluate_returns_each_envs_first_episode_only():
    config = PPOConfig(env_id=CARTPOLE, num_envs=2, num_steps=8, total_timesteps=16, hidden_sizes=(8,))
    train = make_train(config)
    result = train(jax.random.key(0))
    key = jax.random.key(1)
    returns = np.asarray(evaluate(config, result, key, num_episodes=8))
    # Reference: the same greedy policy on 8 single Gymnasium envs seeded as the vector env seeds them.
    _, k_seed = jax.random.split(key)
    seed = int(jax.random.randint(k_seed, (), 0, 2**31 - 1))
    want = []
    for i in range(8):
        env = gymnasium.make("CartPole-v1")
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            pi, _ = train.network.apply(result.params, jnp.asarray(obs[None], jnp.float32))
            obs, r, term, trunc, _ = env.step(int(pi.mode()[0]))
            total += r
            done = term or trunc
        want.append(total)
    assert len(set(want)) > 1  # the episodes end at different times
    np.testing.assert_array_equal(returns, want)


# The rl-zoo CartPole settings (8 envs x 32 steps, 20 epochs of one 256-sample minibatch, lr 1e-3
# annealed, gamma 0.98, lambda 0.8, no entropy bonus), 100k env steps: ~25-60 s on the shared 2-core
# CPU. Measured with keys 0..3: every greedy episode returned 500 (16 episodes per seed).
LEARN = dict(env_id=CARTPOLE, num_envs=8, num_steps=32, total_timesteps=100_000, update_epochs=20,
             num_minibatches=1, lr=1e-3, gamma=0.98, gae_lambda=0.8, ent_coef=0.0)
LEARN_THRESHOLD = 450.0


@pytest.mark.slow
def test_bridge_learns_cartpole():
    config = PPOConfig(**LEARN)
    result = make_train(config)(jax.random.key(0))
    returns = np.asarray(evaluate(config, result, jax.random.key(1), num_episodes=16))
    assert returns.mean() >= LEARN_THRESHOLD, returns


def test_unfinished_evaluation_episodes_score_nan_on_both_learners():
    # An episode cut by max_steps has no return: NaN on the fused evaluator and on the host one, not
    # its partial return (3.0 here), so runs count both as unfinished. A CartPole episode lasts more
    # than 3 steps, and ends well within 500.
    config = PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=16, hidden_sizes=(8,))
    for env_id, evaluator in (("CartPole-v1", fusedrl.evaluate), (CARTPOLE, evaluate)):
        c = config.replace(env_id=env_id)
        train = make_train(c)
        result = fusedrl.TrainResult(state=train.init(jax.random.key(0)), metrics={},
                                     hparams=train.default_hparams())
        cut = np.asarray(evaluator(c, result, jax.random.key(1), num_episodes=4, max_steps=3))
        assert cut.shape == (4,) and np.isnan(cut).all(), (env_id, cut)
        whole = np.asarray(evaluator(c, result, jax.random.key(1), num_episodes=4, max_steps=500))
        assert np.isfinite(whole).all() and (whole > 3).all(), (env_id, whole)
