"""Jumanji's multi-agent envs (`jumanji:LevelBasedForaging-v0`, ...; fusedrl.envs._jumanji_marl) against
Jumanji itself: random masked rollouts stepped through `TeamEnv` beside the suite's own env (its time
limit on), each agent's observation against a float64 NumPy reading of the suite's observation, rewards,
masks and episode ends against the suite's; a true end on the last step is a termination; masked
moves are never taken while training (Cleaner ends the episode on one); IPPO and MAPPO train through
the CLI."""

from __future__ import annotations

import contextlib
import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("jumanji", reason="the jumanji extra is not installed (pip install -e \".[jumanji]\")")

import jumanji  # noqa: E402
from jumanji.types import StepType  # noqa: E402

import fusedrl  # noqa: E402
from fusedrl import cli  # noqa: E402
from fusedrl.envs import _jumanji, _jumanji_marl, suites  # noqa: E402
from fusedrl.envs.multiagent import TeamEnv  # noqa: E402
from fusedrl.train import PPOConfig, make_train  # noqa: E402

pytestmark = [pytest.mark.suite]

NAMES = ("LevelBasedForaging-v0", "RobotWarehouse-v0", "Connector-v3", "Cleaner-v0")
LIMITS = {"LevelBasedForaging-v0": 100, "RobotWarehouse-v0": 500, "Connector-v3": 50, "Cleaner-v0": 100}
DIRTY, WALL = 0, 2  # Cleaner's tiles


# ------------------------------------------------------------------ float64 NumPy readings of the views
def _ref_views(name: str, obs) -> tuple[np.ndarray, np.ndarray | None]:
    """Each agent's observation [A, D] and the global state [S] (None: the agents' concatenated) of one
    suite observation, in float64, from the suite's fields as Jumanji's training networks read them."""
    if name in ("LevelBasedForaging-v0", "RobotWarehouse-v0"):
        view = np.asarray(obs.agents_view, np.float64)
        return view.reshape(view.shape[0], -1), None
    if name == "Connector-v3":  # agent i's path, head, target: 3i+1, 3i+2, 3i+3
        grid = np.asarray(obs.grid, np.int64)
        rows = []
        for i in range(np.asarray(obs.action_mask).shape[0]):
            own = (grid > 3 * i) & (grid <= 3 * i + 3)
            mine = np.where(own, grid - 3 * i, 0)
            others = np.where(own | (grid == 0), 0, (grid - 1) % 3 + 1)
            rows.append(np.stack([mine, others], axis=-1).reshape(-1))
        return np.asarray(rows, np.float64), None
    grid, where = np.asarray(obs.grid), np.asarray(obs.agents_locations)  # Cleaner
    dirty, wall = (grid == DIRTY).astype(np.float64), (grid == WALL).astype(np.float64)
    agents = np.zeros(grid.shape)
    for r, c in where:
        agents[r, c] += 1
    rows = []
    for r, c in where:
        own = np.zeros(grid.shape)
        own[r, c] = 1
        rows.append(np.stack([dirty, wall, own, agents], axis=-1).reshape(-1))
    return np.asarray(rows), np.stack([dirty, wall, agents], axis=-1).reshape(-1)


#: Log-odds added to action 0 (the no-op) in the random rollouts of odd seeds: Connector's agents, moving
#: at random, block each other within its 50-step limit (a termination); more no-ops let some episodes
#: reach the limit.
NOOP_BIAS = {"Connector-v3": 3.0}


def _rollout(name: str, steps: int, seeds, team: TeamEnv | None = None, suite=None):
    """`steps` random steps of `team` (default: `fusedrl.make("jumanji:<name>")`'s, with the global
    state) beside the suite's env (default: `jumanji.make(name)`, its own time limit on), one env per
    seed: actions drawn from the suite's own mask (uniformly, but for `NOOP_BIAS`), both reset with the
    same key when the suite ends an episode. Returns the record, as NumPy arrays [seeds, steps, ...]."""
    if team is None:
        env, params = fusedrl.make(f"jumanji:{name}")
        assert params is None
        team = TeamEnv(env, world_state=True, env_id=name)
    suite = suite or jumanji.make(name)

    def one(seed):
        def body(carry, key):
            tobs, tstate, sobs, sstate = carry
            k_act, k_reset = jax.random.split(key)
            smask = jnp.asarray(sobs.action_mask, bool)
            bias = jnp.zeros(smask.shape[-1]).at[0].set(NOOP_BIAS.get(name, 0.0) * (seed % 2))
            action = jax.random.categorical(k_act, jnp.where(smask, bias, -jnp.inf)).astype(jnp.int32)
            obs, tstate2, reward, term, info = team.step_env(k_act, tstate, action)
            with jax.numpy_rank_promotion("allow"):
                sstate2, ts = suite.step(sstate, action)
                rs, rts = suite.reset(k_reset)
            robs, rtstate = team.reset_env(k_reset)
            last = ts.step_type == StepType.LAST
            record = dict(obs=tobs, sobs=sobs, next_obs=obs, next_sobs=ts.observation, action=action,
                          reward=reward, agent_reward=info["agent_reward"], terminated=term,
                          truncated=team.is_truncated(tstate2), s_reward=ts.reward, s_discount=ts.discount,
                          s_last=last, s_state=sstate2)
            pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(last, x, y), a, b)  # noqa: E731
            return (pick(robs, obs), pick(rtstate, tstate2), pick(rts.observation, ts.observation),
                    pick(rs, sstate2)), record

        key = jax.random.key(seed)
        tobs, tstate = team.reset_env(key)
        with jax.numpy_rank_promotion("allow"):
            sstate, ts = suite.reset(key)
        carry = (tobs, tstate, ts.observation, sstate)
        return jax.lax.scan(body, carry, jax.random.split(jax.random.fold_in(key, 1), steps))[1]

    out = jax.jit(jax.vmap(one))(jnp.asarray(seeds))
    keys = lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x  # noqa: E731
    return jax.tree.map(lambda x: np.asarray(keys(x)), out)


def _true_end(name: str, rec) -> np.ndarray:
    """[seeds, steps] bool: the suite ended the episode on this step for another reason than its time
    limit, read from the suite's own outputs: a discount of 0 for every agent (LevelBasedForaging and
    Connector give a time limit discount 1 for an agent still going), RobotWarehouse's collision (two
    agents on one tile) and Cleaner's clean floor (illegal moves are never drawn here)."""
    last = rec["s_last"]
    if name in ("LevelBasedForaging-v0", "Connector-v3"):
        return last & (rec["s_discount"] == 0).all(axis=-1)
    if name == "RobotWarehouse-v0":
        pos = np.stack([rec["s_state"].agents.position.x, rec["s_state"].agents.position.y], axis=-1)
        same = (pos[..., :, None, :] == pos[..., None, :, :]).all(axis=-1)  # [S, T, A, A]
        collided = (same.sum(axis=(-1, -2)) > pos.shape[-2])
        return last & collided
    return last & ~(rec["next_sobs"].grid == DIRTY).any(axis=(-1, -2))  # Cleaner


STEPS = {"LevelBasedForaging-v0": 220, "RobotWarehouse-v0": 520, "Connector-v3": 120, "Cleaner-v0": 220}


@pytest.fixture(scope="module", params=[
    pytest.param(n, marks=[pytest.mark.slow] if n == "RobotWarehouse-v0" else []) for n in NAMES])
def rollout(request):
    name = request.param
    return name, _rollout(name, STEPS[name], seeds=[0, 1, 2])


def test_every_agents_observation_and_mask_is_the_suites(rollout):
    name, rec = rollout
    seeds, steps = rec["action"].shape[:2]
    for s in range(seeds):
        for t in range(steps):
            for mine, theirs in ((rec["obs"], rec["sobs"]), (rec["next_obs"], rec["next_sobs"])):
                sobs = jax.tree.map(lambda x, s=s, t=t: x[s, t], theirs)
                view, world = _ref_views(name, sobs)
                np.testing.assert_array_equal(mine["obs"][s, t], view.astype(np.float32))
                want = view.reshape(-1) if world is None else world
                np.testing.assert_array_equal(mine["world_state"][s, t],
                                              np.broadcast_to(want, (view.shape[0], want.size)))
                np.testing.assert_array_equal(mine["action_mask"][s, t], sobs.action_mask)
                np.testing.assert_array_equal(mine["agent"][s, t], np.eye(view.shape[0]))


def test_rewards_and_episode_ends_are_the_suites(rollout):
    name, rec = rollout
    num_agents = rec["agent_reward"].shape[-1]
    # Each agent's reward is the suite's (its own, or the shared scalar); the team's is their mean.
    want = np.broadcast_to(rec["s_reward"].reshape(rec["s_reward"].shape[:2] + (-1,)),
                           rec["agent_reward"].shape)
    np.testing.assert_array_equal(rec["agent_reward"], want.astype(np.float32))
    np.testing.assert_allclose(rec["reward"], want.astype(np.float64).mean(-1), rtol=1e-6, atol=1e-7)
    # Episodes end where the suite's do; its time limit is a truncation, any other end a termination.
    term, trunc, last = rec["terminated"], rec["truncated"], rec["s_last"]
    np.testing.assert_array_equal(term | trunc, last)
    assert not (term & trunc).any()
    np.testing.assert_array_equal(term, _true_end(name, rec))
    step_count = rec["next_sobs"].step_count
    assert (step_count[trunc] == LIMITS[name]).all() and (step_count[term] <= LIMITS[name]).all()
    assert trunc.sum() >= 1, f"{name}: no episode reached the time limit: the test checks no truncation"
    print(f"{name}: {int(term.sum())} terminations, {int(trunc.sum())} truncations")
    assert num_agents == fusedrl.make(f"jumanji:{name}")[0].num_agents


@pytest.mark.slow
def test_a_true_end_on_the_last_step_is_a_termination():
    """Connector's agents all connected or blocked on step t, with the time limit t: the suite calls that
    step's end a termination (discount 0) and so does the adapter, where a time-limit rule alone
    (`TeamEnv`'s `max_steps`) would call it a truncation."""
    name = "Connector-v3"
    off = _jumanji_marl._SUITE_LIMIT_OFF

    def team(limit):
        env = _jumanji_marl.JumanjiTeam(name, jumanji.make(name, time_limit=off), limit)
        return TeamEnv(env, env_id=name)

    rec = _rollout(name, 50, seeds=[0], team=team(off), suite=jumanji.make(name, time_limit=off))
    ends = np.flatnonzero(rec["terminated"][0])
    assert len(ends), "no random rollout ended in 50 steps"
    limit = int(ends[0]) + 1  # the first episode's length
    assert int(rec["next_sobs"].step_count[0, limit - 1]) == limit
    short = _rollout(name, limit, seeds=[0], team=team(limit), suite=jumanji.make(name, time_limit=limit))
    np.testing.assert_array_equal(short["action"][0], rec["action"][0, :limit])  # the same episode
    assert bool(short["s_last"][0, -1]) and (short["s_discount"][0, -1] == 0).all()
    assert bool(short["terminated"][0, -1]) and not bool(short["truncated"][0, -1])
    assert not short["s_last"][0, :-1].any()


def test_connectors_agents_are_done_when_connected_or_blocked():
    """The adapter's own `dones` (JaxMARL's contract; `TeamEnv` reads only dones["__all__"]) beside the
    suite's env over each seed's first episode: an agent is done on the step the suite gives it
    discount 0 (connected or blocked) or when the episode ends, which is the suite's `LAST`; some
    agents are done before the episode ends."""
    name = "Connector-v3"
    env, _ = fusedrl.make(f"jumanji:{name}")
    suite = jumanji.make(name)

    def one(seed):
        def body(carry, key):
            state, sstate, smask = carry
            action = jax.random.categorical(key, jnp.where(smask, 0.0, -jnp.inf)).astype(jnp.int32)
            _, state, _, dones, _ = env.step_env(key, state, {a: action[i] for i, a in enumerate(env.agents)})
            with jax.numpy_rank_promotion("allow"):
                sstate, ts = suite.step(sstate, action)
            last = ts.step_type == StepType.LAST
            return (state, sstate, ts.observation.action_mask), (dones, ts.discount, last)

        key = jax.random.key(seed)
        _, state = env.reset(key)
        with jax.numpy_rank_promotion("allow"):
            sstate, ts = suite.reset(key)
        carry = (state, sstate, ts.observation.action_mask)
        return jax.lax.scan(body, carry, jax.random.split(jax.random.fold_in(key, 1), LIMITS[name]))[1]

    dones, discount, last = jax.tree.map(np.asarray, jax.jit(jax.vmap(one))(jnp.arange(3)))
    early = 0
    for s in range(3):
        end = int(np.flatnonzero(last[s])[0])  # the first episode's last step (the limit at the latest)
        np.testing.assert_array_equal(dones["__all__"][s, :end + 1], last[s, :end + 1])
        for i, a in enumerate(env.agents):
            want = (discount[s, :end + 1, i] == 0) | last[s, :end + 1]
            np.testing.assert_array_equal(dones[a][s, :end + 1], want, err_msg=f"seed {s} {a}")
            early += int(want[:end].sum())
    assert early > 0, "no agent was done before its episode ended: the test checks no agent's own end"


def test_ids_are_listed_and_agents_that_differ_are_refused():
    ids = suites.env_ids("jumanji")  # what `fusedrl envs --suites` lists of Jumanji
    assert all(f"jumanji:{n}" in ids for n in NAMES)
    with pytest.raises(ValueError, match="JobShop-v0: .*MultiDiscrete"):
        fusedrl.make("jumanji:JobShop-v0")
    with pytest.raises(TypeError, match="multi-agent env .* no params"):
        fusedrl.make("jumanji:Connector-v3", max_steps_in_episode=10)
    from jumanji import specs
    from jumanji.environments import LevelBasedForaging

    class Uneven(LevelBasedForaging):  # agent 1 without the load action
        @property
        def action_spec(self):
            return specs.MultiDiscreteArray(num_values=jnp.array([6, 5]), dtype=jnp.int32)

    with pytest.raises(ValueError, match=r"different numbers of actions \(\[6, 5\]\)"):
        _jumanji_marl.JumanjiTeam("LevelBasedForaging-v0", Uneven(), 100)
    assert "LevelBasedForaging-v0" in _jumanji.env_names()


# ------------------------------------------------------------------------------------ masks honoured
MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]])  # Cleaner's up, right, down, left


def test_masked_moves_are_never_taken_while_training():
    """Cleaner ends the episode when an agent moves into a wall or off the grid (half the moves of a
    random agent): every move of a short IPPO run is legal, read in NumPy from the row's own view (its
    tile and the walls), and the mask is exactly the legal moves."""
    config = PPOConfig(env_id="jumanji:Cleaner-v0", num_envs=2, num_steps=32, total_timesteps=2 * 32 * 2,
                       num_minibatches=1, update_epochs=1, hidden_sizes=(16,))
    train = make_train(config)
    hp = train.default_hparams()
    venv = train.make_env(hp)
    rollout = jax.jit(lambda state, key: train.rollout(state, hp, venv, key))
    state = jax.jit(train.init)(jax.random.key(0), hp)
    moves = 0
    for u in range(config.num_updates):
        state, traj = rollout(state, jax.random.key(u))
        obs, action = np.asarray(traj.obs["obs"]), np.asarray(traj.action)  # [T, N*A, R*C*4], [T, N*A]
        mask = np.asarray(traj.obs["action_mask"])
        channels = obs.reshape(obs.shape[:2] + (10, 10, 4))
        for t, row in np.ndindex(action.shape):
            wall, own = channels[t, row, ..., 1], channels[t, row, ..., 2]
            here = np.argwhere(own == 1)[0]
            legal = []
            for m in MOVES:
                r, c = here + m
                legal.append(bool(0 <= r < 10 and 0 <= c < 10 and wall[r, c] == 0))
            np.testing.assert_array_equal(mask[t, row], legal)
            assert legal[action[t, row]], f"step {t} row {row}: move {action[t, row]} into a wall"
            moves += 1
    assert moves == config.num_updates * 32 * 2 * 3
    # Episodes ran to the time limit or a clean floor, never cut by an illegal move.
    assert not (np.asarray(traj.episode_done) & (np.asarray(traj.episode_length) < 20)).any()


# ---------------------------------------------------------------------------------- training via CLI
def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("critic", ["decentralized", "centralized"])
def test_the_cli_trains_ippo_and_mappo_on_level_based_foraging(critic, tmp_path):
    out = tmp_path / "run"
    code, stdout, err = _cli("train", "--env", "jumanji:LevelBasedForaging-v0", "--set", f"critic={critic}",
                             "--set", "num_envs=4", "--set", "num_steps=25", "--set", "hidden_sizes=16",
                             "--total-timesteps", str(4 * 25 * 4), "--num-seeds", "2", "--eval-episodes", "1",
                             "--no-progress",
                             "--checkpoint-every", "0", "--out", out)
    assert code == 0, err[-3000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    assert json.loads((out / "config.json").read_text())["ppo"]["critic"] == critic
    # 4 envs x 100 steps: every env's first episode ended by the last update (LevelBasedForaging's time
    # limit is 100 steps).
    lines = (out / "metrics.csv").read_text().splitlines()
    rows = [dict(zip(lines[0].split(","), line.split(","), strict=True)) for line in lines[1:]]
    for seed in ("0", "1"):  # two seeds in one program
        last = [r for r in rows if r["seed"] == seed][-1]
        assert int(last["episodes_completed"]) >= 1 and 1 <= float(last["episode_length"]) <= 100
