"""Each agent's own return wherever a user reads a multi-agent run's results: the trainer's metrics,
metrics.csv (one column per agent, kept on --resume), the loggers, summary.json and `fusedrl.evaluate`.

The env, `Tally`, pays agent i `W[i] * t` on step t of an episode whatever it does, and its episodes
last L = 3, 4 or 5 steps (drawn at reset; they terminate), so agent i's episode return is
`W[i] * L (L + 1) / 2` and the team's (the mean of the agents' rewards, summed) `mean(W) * L (L + 1) / 2`:
the float64 reference below.
"""

from __future__ import annotations

import csv
import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import spaces

import fusedrl
from fusedrl import runs
from fusedrl.envs import wrappers as W
from fusedrl.evaluation import eval_reset
from fusedrl.loggers import CSV_COLUMNS, TensorBoardLogger
from fusedrl.train import PPOConfig, make_train

ENV_ID = "Tally-v0"
AGENTS = ("agent_0", "agent_1", "agent_2")
WEIGHTS = np.array([1.0, 2.0, 5.0])  # agent i's reward on step t: WEIGHTS[i] * t
PER_AGENT = tuple(f"episode_return_{a}" for a in AGENTS)


@struct.dataclass
class TallyState:
    t: jax.Array  # [] int32 steps taken in the episode
    length: jax.Array  # [] int32 the episode's length: 3, 4 or 5


class Tally:
    """Observation per agent: [t / 5, L / 5] float32; action per agent: Discrete(2), ignored. Reward of
    agent i on step t (1-based): WEIGHTS[i] * t. The episode terminates after L steps."""

    agents = list(AGENTS)
    num_agents = 3

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def get_obs(self, s):
        x = jnp.stack([s.t, s.length]).astype(jnp.float32) / 5.0
        return {a: x for a in self.agents}

    def reset(self, key):
        s = TallyState(jnp.int32(0), jax.random.randint(key, (), 3, 6))
        return self.get_obs(s), s

    def step_env(self, key, s, actions):
        new = s.replace(t=s.t + 1)
        t = new.t.astype(jnp.float32)
        rewards = {a: jnp.float32(w) * t for a, w in zip(self.agents, WEIGHTS.tolist(), strict=True)}
        done = new.t >= new.length
        return self.get_obs(new), new, rewards, {**{a: done for a in self.agents}, "__all__": done}, {}


# 6 updates of 2 steps: no episode (3 to 5 steps) ends in the first update.
CONFIG = PPOConfig(env_id=ENV_ID, num_envs=4, num_steps=2, total_timesteps=4 * 2 * 6, update_epochs=1,
                   num_minibatches=1, hidden_sizes=(8,))
OPTIONS = dict(num_seeds=2, eval_episodes=8, progress_every=1, checkpoint_every=2)


@pytest.fixture(scope="module", autouse=True)
def tally():
    from fusedrl.envs import registry

    saved = dict(registry._REGISTRY)
    fusedrl.register(ENV_ID, Tally)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


class Rows:
    """A logger that keeps every row it is given."""

    def __init__(self):
        self.rows = []

    def log(self, update, rows):
        self.rows += [dict(r) for r in rows]

    def close(self):
        pass


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    rows = Rows()
    run = runs.train_run(CONFIG, tmp_path_factory.mktemp("run") / "run", progress_file=io.StringIO(),
                         loggers=[rows], **OPTIONS)
    return run, rows.rows


def read_csv(path):
    with open(path / "metrics.csv", newline="") as f:
        reader = csv.DictReader(f)
        return tuple(reader.fieldnames), list(reader)


def team_sums(returns):
    """L (L + 1) / 2 of the episodes behind per-agent returns [..., A] (each W[i] times it)."""
    return returns / WEIGHTS


def test_the_trainers_per_agent_returns_are_each_agents_own(finished):
    run, _ = finished
    m = {k: np.asarray(v, np.float64) for k, v in run.result.metrics.items()}
    each = np.stack([m[name] for name in PER_AGENT], axis=-1)  # [seeds, updates, A]
    ended = m["episode_length"] > 0
    assert not ended[:, 0].any() and ended[:, 1:].all()
    sums = team_sums(each)[ended]
    np.testing.assert_allclose(sums, np.repeat(sums[:, :1], 3, axis=1), rtol=1e-6)  # W[i] * the same sum
    assert ((sums >= 6) & (sums <= 15)).all()  # means of 6, 10, 15 (L = 3, 4, 5)
    np.testing.assert_allclose(m["episode_return"][ended], sums[:, 0] * WEIGHTS.mean(), rtol=1e-6)


def test_metrics_csv_has_a_column_per_agent(finished):
    """metrics.csv: the usual columns, then one per agent, each the trainer's metric for that seed and
    update; empty (as episode_return) before the seed's first episode ends."""
    run, _ = finished
    header, rows = read_csv(run.path)
    assert header == CSV_COLUMNS + PER_AGENT
    m = run.result.metrics
    assert len(rows) == CONFIG.num_updates * 2
    for row in rows:
        s, u = int(row["seed"]), int(row["update"]) - 1
        if u == 0:
            assert all(row[name] == "" for name in PER_AGENT + ("episode_return",)), row
            continue
        for name in PER_AGENT + ("episode_return",):
            assert float(row[name]) == pytest.approx(float(m[name][s, u]), rel=1e-6), (name, row)
        sums = team_sums(np.array([float(row[name]) for name in PER_AGENT]))
        np.testing.assert_allclose(sums, sums[0], rtol=1e-6)


def test_a_resumed_run_keeps_the_per_agent_columns(finished, tmp_path, interrupt_at):
    """Interrupted after update 3 (its checkpoint holds update 2), then resumed: metrics.csv has the same
    header and rows as the run never interrupted."""
    run, _ = finished
    restore = interrupt_at(3)
    with pytest.raises(KeyboardInterrupt):
        runs.train_run(CONFIG, tmp_path / "run", progress_file=io.StringIO(), **OPTIONS)
    restore()
    assert read_csv(tmp_path / "run")[0] == CSV_COLUMNS + PER_AGENT
    runs.resume_run(tmp_path / "run", progress_file=io.StringIO())
    resumed = read_csv(tmp_path / "run")
    assert resumed[0] == CSV_COLUMNS + PER_AGENT
    assert resumed == read_csv(run.path)


def test_the_loggers_get_each_agents_return_and_no_placeholder(finished, tmp_path, tensorboard_scalars):
    """The rows of a run reach TensorBoard (tensorboardX's event files, read back) with every agent's
    return, except before a seed's first episode (where the trainer's 0.0 is no return)."""
    _, rows = finished
    logger = TensorBoardLogger(tmp_path)
    logger.log(1, rows)
    logger.close()
    scalars = tensorboard_scalars(tmp_path)
    first_steps = CONFIG.batch_size  # update 1: no episode has ended
    for s in (0, 1):
        for name in PER_AGENT:
            logged = {step: v for tag, v, step in scalars if tag == f"seed_{s}/{name}"}
            assert first_steps not in logged
            want = {int(r["env_steps"]): r[name] for r in rows if r["seed"] == s and r["update"] > 1}
            assert logged == pytest.approx(want) and len(want) == CONFIG.num_updates - 1


def test_summary_json_and_evaluate_run_report_each_agent(finished):
    run, _ = finished
    summary = json.loads((run.path / "summary.json").read_text())
    m = run.result.metrics
    assert list(summary["final_train_return_per_agent"]) == list(AGENTS)
    for a, name in zip(AGENTS, PER_AGENT, strict=True):
        want = np.asarray(m[name])[:, -1]
        assert summary["final_train_return_per_agent"][a] == pytest.approx(want, abs=1e-3)
    per_agent = np.array([summary["eval_return_per_agent"][a] for a in AGENTS]).T  # [seeds, A]
    np.testing.assert_allclose(per_agent.mean(axis=1), summary["eval_return_per_seed"], atol=2e-3)
    sums = team_sums(per_agent)
    np.testing.assert_allclose(sums, np.repeat(sums[:, :1], 3, axis=1), rtol=1e-3)
    again = runs.evaluate_run(run.path)
    assert list(again["per_agent"]) == list(AGENTS)
    np.testing.assert_allclose(np.array([again["per_agent"][a] for a in AGENTS]).T, per_agent, atol=2e-3)


def test_evaluate_returns_each_agents_return_per_episode(finished):
    """`fusedrl.evaluate(..., per_agent=True)`: agent i's return in each episode is W[i] L (L + 1) / 2,
    with L the length its env drew at the evaluation's reset (read from the start states `eval_reset`
    gives, as `evaluate` resets); the team's is the plain `evaluate`'s, the agents' mean."""
    run, _ = finished
    key = jax.random.key(3)
    train = make_train(CONFIG)
    one = jax.tree.map(lambda x: x[1], run.result.replace(metrics={}))  # seed 1
    got = fusedrl.evaluate(CONFIG, one, key, num_episodes=8, per_agent=True)
    assert list(got) == ["episode_return", *PER_AGENT]
    venv, _, env_state, _ = eval_reset(train, one, key, 8)
    teams = W.find_wrapper_state(venv, env_state, W.EpisodeStatistics).inner.inner.env_state
    length = np.asarray(teams.inner.length, np.float64)  # [8] each episode's L
    assert len(np.unique(length)) > 1
    want = (length * (length + 1) / 2)[:, None] * WEIGHTS  # [8, A]
    for i, name in enumerate(PER_AGENT):
        np.testing.assert_allclose(np.asarray(got[name], np.float64), want[:, i], rtol=1e-6, err_msg=name)
    np.testing.assert_allclose(got["episode_return"], want.mean(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(got["episode_return"], fusedrl.evaluate(CONFIG, one, key, num_episodes=8))
    both = fusedrl.evaluate(CONFIG, run.result, key, num_episodes=8, per_agent=True)  # 2 seeds
    assert all(np.shape(v) == (2, 8) for v in both.values())
    each = np.stack([np.asarray(both[name], np.float64) for name in PER_AGENT], axis=-1)
    sums = team_sums(each)
    np.testing.assert_allclose(sums, np.repeat(sums[..., :1], 3, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(both["episode_return"], each.mean(axis=-1), rtol=1e-6)
    with pytest.raises(TypeError, match="per_agent must be True"):
        fusedrl.evaluate(CONFIG, one, key, num_episodes=8, per_agent="yes")


def test_a_single_agent_evaluation_per_agent_is_the_return_alone():
    config = PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=4, total_timesteps=8, hidden_sizes=(4,))
    result = jax.jit(make_train(config))(jax.random.key(0))
    got = fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=2, per_agent=True, max_steps=20)
    assert list(got) == ["episode_return"]
    np.testing.assert_array_equal(got["episode_return"], fusedrl.evaluate(
        config, result, jax.random.key(1), num_episodes=2, max_steps=20))


def test_per_agent_columns_come_in_the_order_of_the_agents_numbers():
    """A team of 12 (JaxMARL names them agent_0 ... agent_11): metrics.csv's per-agent columns are in
    the agents' order, agent_2 before agent_10, whatever order the metrics come in."""
    from fusedrl.loggers import csv_columns

    names = [f"episode_return_agent_{i}" for i in range(12)]
    shuffled = [str(n) for n in np.random.default_rng(0).permutation(names)]
    assert csv_columns(shuffled + ["episode_return", "policy_loss"]) == CSV_COLUMNS + tuple(names)


def test_a_run_that_ends_before_any_episode_reports_no_agents_train_return(tmp_path):
    """One update of 2 steps (Tally's episodes last 3 to 5): summary.json's final training returns are
    None, the team's and each agent's, never the trainer's 0.0 placeholder."""
    config = CONFIG.replace(total_timesteps=CONFIG.batch_size)
    run = runs.train_run(config, tmp_path / "run", progress_file=io.StringIO(), num_seeds=1, eval_episodes=2,
                         checkpoint_every=0)
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["final_train_return_per_seed"] == [None]
    assert summary["final_train_return_per_agent"] == {a: [None] for a in AGENTS}
