"""`python -m fusedrl.bench marl` at tiny sizes: our IPPO/MAPPO runs, the table, the config check
against JaxMARL's yaml, and the peer runner's greedy evaluation against a plain loop over JaxMARL's env."""

from __future__ import annotations

import json
import os
import sys
import types

import numpy as np
import pytest

pytest.importorskip("jaxmarl")

from fusedrl.bench import _jaxmarl_peer as peer  # noqa: E402
from fusedrl.bench import marl  # noqa: E402

TINY = [
    "--seeds",
    "2",
    "--repeats",
    "1",
    "--num-envs",
    "4",
    "--num-steps",
    "26",
    "--total-timesteps",
    "104",
    "--eval-episodes",
    "3",
]
#: JaxMARL's yaml numbers (baselines/IPPO/config/ippo_ff_mpe.yaml,
#: baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml).
YAML = {
    "ippo": {
        "LR": 2.5e-4,
        "UPDATE_EPOCHS": 4,
        "NUM_MINIBATCHES": 4,
        "GAMMA": 0.99,
        "GAE_LAMBDA": 0.95,
        "CLIP_EPS": 0.2,
        "ENT_COEF": 0.01,
        "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 0.5,
        "ACTIVATION": "tanh",
        "ANNEAL_LR": True,
        "ENV_NAME": "MPE_simple_spread_v3",
    },
    "mappo": {
        "LR": 2e-3,
        "UPDATE_EPOCHS": 4,
        "NUM_MINIBATCHES": 4,
        "GAMMA": 0.99,
        "GAE_LAMBDA": 0.95,
        "CLIP_EPS": 0.2,
        "ENT_COEF": 0.01,
        "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 0.5,
        "ACTIVATION": "tanh",
        "ANNEAL_LR": True,
        "ENV_NAME": "MPE_simple_spread_v3",
        "FC_DIM_SIZE": 128,
        "GRU_HIDDEN_DIM": 128,
        "SCALE_CLIP_EPS": False,
    },
}


@pytest.fixture(scope="module")
def ours_only():
    """`bench marl` with both algorithms, ours alone, each run in this process (the subprocess
    around `run_ours` is the only thing replaced): its stdout."""
    import contextlib
    import io

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setattr(marl, "ours_in_subprocess", lambda *a, timeout: marl.run_ours(*a))
        assert marl.main(TINY) == 0
    return out.getvalue()


@pytest.mark.slow
def test_marl_bench_trains_and_evaluates_both_algorithms_at_jaxmarls_config(ours_only):
    runs = [json.loads(line) for line in ours_only.splitlines() if line.startswith('{"algo"')]
    assert [r["impl"] for r in runs] == ["fusedrl-ippo", "fusedrl-mappo"]
    for r in runs:
        assert r["env_steps"] == 104 and len(r["greedy"]) == len(r["train_ret"]) == 2
        assert r["sps"] * r["train_s"] == pytest.approx(2 * 104)  # both seeds' steps over the training calls
        assert all(-200 < g < 0 for g in r["greedy"])  # MPE spread: distances are penalties
        assert r["greedy"][0] != r["greedy"][1]  # two seeds, two policies
    rows = json.loads(ours_only.splitlines()[-1])
    assert [row["algo"] for row in rows] == ["ippo", "mappo"] and not any("ratio" in row for row in rows)
    assert rows[0]["fusedrl-ippo"]["greedy_mean"] == pytest.approx(np.mean(runs[0]["greedy"]))
    for algo in marl.ALGOS:  # our configs carry JaxMARL's numbers
        assert marl.config_mismatches(algo, YAML[marl.PEER_ALGO[algo]]) == []
    assert marl.config("mappo", 16, 128, 2048).critic == "centralized"
    assert marl.config("mappo", 16, 128, 2048).recurrent == "gru"
    assert marl.config("mappo-ff", 16, 128, 2048).recurrent is None
    assert marl.config("ippo", 16, 128, 2048).critic == "decentralized"


def test_marl_bench_names_a_peer_config_that_differs():
    assert marl.config_mismatches("ippo", {**YAML["ippo"], "LR": 1e-3}) == ["LR=0.001 vs lr=0.00025"]
    assert marl.config_mismatches("mappo", {**YAML["mappo"], "UPDATE_EPOCHS": 10, "FC_DIM_SIZE": 64}) == [
        "UPDATE_EPOCHS=10 vs update_epochs=4",
        "FC_DIM_SIZE=64 vs hidden_sizes[0]=128",
    ]
    assert marl.config_mismatches("mappo", {**YAML["mappo"], "GRU_HIDDEN_DIM": 64}) == [
        "GRU_HIDDEN_DIM=64 vs recurrent_size=128",
        "GRU_HIDDEN_DIM=64 (one layer after the GRU) vs hidden_sizes[1:]=(128,)",
    ]
    assert marl.config_mismatches("mappo-ff", {**YAML["mappo"], "FC_DIM_SIZE": 64}) == [
        "FC_DIM_SIZE, GRU_HIDDEN_DIM=(64, 128) vs hidden_sizes=(128, 128)"
    ]
    assert marl.config_mismatches("mappo", {**YAML["mappo"], "SCALE_CLIP_EPS": True}) == [
        "SCALE_CLIP_EPS=True vs clip_eps unscaled"
    ]
    assert marl.config_mismatches("ippo", {**YAML["ippo"], "ENV_NAME": "MPE_simple_v3"}) == [
        "ENV_NAME='MPE_simple_v3' vs jaxmarl:MPE_simple_spread_v3"
    ]


@pytest.mark.parametrize(
    "wrong",
    [
        dict(recurrent=None),
        dict(recurrent="lstm"),
        dict(recurrent_size=64),
        dict(hidden_sizes=(128,)),
        dict(hidden_sizes=(128, 128, 128)),
        dict(activation="tanh"),
        dict(agent_id=True),
        dict(bootstrap_truncation=True),
        dict(clip_grad_per_network=False),
    ],
)
def test_marl_bench_reports_a_mappo_network_unlike_jaxmarls(wrong, monkeypatch):
    monkeypatch.setitem(marl.FIELDS, "mappo", {**marl.FIELDS["mappo"], **wrong})
    assert marl.config_mismatches("mappo", YAML["mappo"])


def test_marl_bench_mappo_has_the_layers_of_jaxmarls_mappo_rnn_mpe():
    # mappo_rnn_mpe.py's ActorRNN and CriticRNN, from the yaml's widths: Dense(FC_DIM_SIZE) on the
    # input, flax's GRUCell(GRU_HIDDEN_DIM), Dense(GRU_HIDDEN_DIM), the head (5 actions; 1 value). Its
    # inputs: an agent's observation (18) and the world state, all three concatenated (54); ours the
    # same (agent_id=False: no one-hot id appended).
    import jax

    import fusedrl

    fc, gru = YAML["mappo"]["FC_DIM_SIZE"], YAML["mappo"]["GRU_HIDDEN_DIM"]
    cell = {k: (gru, gru) for k in ("ir", "iz", "in", "hr", "hz", "hn")}
    cell.update({k + "_bias": (gru,) for k in ("ir", "iz", "in", "hn")})  # flax's GRUCell: no hr, hz bias

    def jaxmarl_layers(inputs, head):
        return [(inputs, fc), cell, (gru, gru), (gru, head)]

    params = jax.eval_shape(fusedrl.make_train(marl.config("mappo", 4, 26, 104)), jax.random.key(0)).params
    params = params["params"]

    def ours(net, torso):
        p = params[net]
        shapes = {k: v["kernel"].shape for k, v in p["cell"].items()}
        shapes.update({k + "_bias": v["bias"].shape for k, v in p["cell"].items() if "bias" in v})
        layers = [p["embed_0"]["kernel"].shape, shapes]
        layers += [p[f"{torso}_{i}"]["kernel"].shape for i in range(sum(k.startswith(torso + "_") and
                                                                         k[-1].isdigit() for k in p))]
        return [*layers, p[f"{torso}_head"]["kernel"].shape]

    assert ours("actor", "actor") == jaxmarl_layers(18, 5)
    assert ours("critic", "critic") == jaxmarl_layers(3 * 18, 1)
    assert set(params) == {"actor", "critic"}


def _fake_run(impl, sps, config=None):
    return {
        "impl": impl,
        "compile_s": 1.0,
        "train_s": 1.0,
        "sps": sps,
        "env_steps": 104,
        "greedy": [-20.0, -22.0],
        "train_ret": [-25.0, -26.0],
        **({"config": config} if config else {}),
    }


def _jaxmarl_src(tmp_path):
    for path in (p for pair in peer.SCRIPTS.values() for p in pair):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    return ["--peer-python", sys.executable, "--jaxmarl-src", str(tmp_path)]


def test_marl_bench_alternates_the_sides_and_prints_the_ratio_of_medians(tmp_path, monkeypatch, capsys):
    # Stand-ins for the two sides' processes: what is tested is the order, the medians and the ratio.
    calls = []
    ours_sps, peer_sps = iter([300.0, 600.0, 100.0, 300.0]), iter([200.0, 100.0, 50.0])

    def ours(algo, *args, timeout):
        calls.append("ours")
        return _fake_run(f"fusedrl-{algo}", next(ours_sps))

    def theirs(python, src, algo, *args, timeout):
        calls.append("peer")
        assert os.path.isfile(os.path.join(src, peer.SCRIPTS[algo][0]))
        return _fake_run(f"jaxmarl-{algo}", next(peer_sps), YAML[algo])

    monkeypatch.setattr(marl, "ours_in_subprocess", ours)
    monkeypatch.setattr(marl, "peer_in_subprocess", theirs)
    argv = [*TINY, "--algos", "ippo", "--repeats", "3", *_jaxmarl_src(tmp_path)]
    assert marl.main(argv) == 0
    assert calls == ["ours", "peer", "peer", "ours", "ours", "peer"]  # the order rotates every repeat
    out = capsys.readouterr().out
    # 300 / 100; paired: the median of 300/200, 600/100, 100/50
    assert "ippo: ratio fusedrl/jaxmarl steps/s (median of runs): 3.00x, paired 2.00x" in out
    row = json.loads(out.splitlines()[-1])[0]
    assert row["jaxmarl-ippo"]["sps_runs"] == [200, 100, 50] and row["ratio"] == pytest.approx(3.0)

    # A peer whose yaml was changed stops the benchmark at its first run.
    calls.clear()
    monkeypatch.setattr(
        marl,
        "peer_in_subprocess",
        lambda python, src, algo, *a, timeout: (
            calls.append("peer") or _fake_run(f"jaxmarl-{algo}", 200.0, {**YAML[algo], "ENT_COEF": 0.0})
        ),
    )
    with pytest.raises(SystemExit, match="ENT_COEF=0.0 vs ent_coef=0.01"):
        marl.main([*TINY, "--algos", "ippo", "--repeats", "3", *_jaxmarl_src(tmp_path)])
    assert calls == ["ours", "peer"]  # no second repeat


def test_marl_bench_runs_the_feed_forward_mappo_against_jaxmarls_recurrent_script(tmp_path, monkeypatch):
    seen = []
    ours = lambda algo, *a, timeout: _fake_run(f"fusedrl-{algo}", 2.0)  # noqa: E731
    monkeypatch.setattr(marl, "ours_in_subprocess", ours)

    def theirs(python, src, algo, *args, timeout):
        seen.append(algo)
        return _fake_run(f"jaxmarl-{algo}", 1.0, YAML[algo])

    monkeypatch.setattr(marl, "peer_in_subprocess", theirs)
    assert marl.main([*TINY, "--algos", "mappo-ff", *_jaxmarl_src(tmp_path)]) == 0
    assert seen == ["mappo"]  # the runner knows the script's name, mappo_rnn_mpe.py


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--algos", "vdn"], "--algos: unknown"),
        (["--seeds", "0"], "--seeds must be >= 1"),
        (["--total-timesteps", "100"], "less than one update's batch"),
        (["--peer-python", sys.executable], "go together"),
        (["--peer-python", "/no/python", "--jaxmarl-src", "."], "no such file"),
    ],
)
def test_marl_bench_refuses_bad_arguments_before_training(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(marl, "ours_in_subprocess", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(SystemExit):
        marl.main(argv)
    assert message in capsys.readouterr().err


def test_marl_bench_refuses_a_jaxmarl_folder_without_the_scripts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(marl, "ours_in_subprocess", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(SystemExit):
        marl.main(["--algos", "mappo", "--peer-python", sys.executable, "--jaxmarl-src", str(tmp_path)])
    err = capsys.readouterr().err
    assert "baselines/MAPPO/mappo_rnn_mpe.py" in err and "ippo_ff_mpe.py" not in err


def test_peer_runner_greedy_returns_match_a_plain_loop_over_jaxmarls_env():
    # The runner's batched evaluation (the scripts' agent-major rows, episodes stopped at their first
    # end) against one episode at a time, stepped in Python, summed in float64.
    import jax

    with jax.numpy_rank_promotion("allow"):  # JaxMARL's MPE broadcasts implicitly
        _greedy_returns_match_a_plain_loop()


def _greedy_returns_match_a_plain_loop():
    import distrax
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import jaxmarl

    class ActorCritic(nn.Module):  # the shape of ippo_ff_mpe.py's network: (pi, value)
        action_dim: int
        activation: str = "tanh"

        @nn.compact
        def __call__(self, x):
            return distrax.Categorical(logits=nn.Dense(self.action_dim)(x)), jnp.zeros(x.shape[:-1])

    config = {"ENV_NAME": "MPE_simple_spread_v3", "ENV_KWARGS": {}, "ACTIVATION": "tanh"}
    env = jaxmarl.make("MPE_simple_spread_v3")
    agents = env.agents
    net = ActorCritic(env.action_space(agents[0]).n)
    params = net.init(jax.random.PRNGKey(3), jnp.zeros(env.observation_space(agents[0]).shape))
    episodes, key = 4, jax.random.PRNGKey(7)
    got = np.asarray(
        peer._greedy_returns(
            "ippo", types.SimpleNamespace(ActorCritic=ActorCritic), config, params, key, episodes
        )
    )

    w, b = (np.asarray(params["params"]["Dense_0"][k], np.float64) for k in ("kernel", "bias"))
    key, reset_key = jax.random.split(key)
    step_keys = jax.random.split(key, env.max_steps + 2)
    want = []
    for e in range(episodes):
        obs, state = env.reset(jax.random.split(reset_key, episodes)[e])
        total, t = 0.0, 0
        while True:
            actions = {a: int(np.argmax(np.asarray(obs[a], np.float64) @ w + b)) for a in agents}
            obs, state, reward, done, _ = env.step(
                jax.random.split(step_keys[t], episodes)[e], state, actions
            )
            total += np.mean([float(reward[a]) for a in agents])
            t += 1
            if bool(done["__all__"]):
                break
        assert t == env.max_steps + 1
        want.append(total)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert len(set(np.round(want, 3))) == episodes  # four different starts: the episodes are told apart


LBF = "jumanji:LevelBasedForaging-v0"


def test_marl_bench_lbf_runs_our_lbf_preset_and_names_the_env_to_both_sides(tmp_path, monkeypatch, capsys):
    import fusedrl

    # Our side on LevelBasedForaging is its preset: the same numbers as JaxMARL's ippo_ff_mpe.yaml.
    assert marl.config("ippo", 16, 128, 500_000, LBF) == fusedrl.preset(LBF)
    assert marl.config_mismatches("ippo", {**YAML["ippo"], "ENV_NAME": LBF}, LBF) == []
    assert marl.config_mismatches("ippo", YAML["ippo"], LBF) == [f"ENV_NAME='MPE_simple_spread_v3' vs {LBF}"]
    assert marl.config_mismatches("ippo", {**YAML["ippo"], "ENV_NAME": LBF}) == [
        f"ENV_NAME={LBF!r} vs jaxmarl:MPE_simple_spread_v3"
    ]

    seen = []

    def ours(algo, *args, timeout):
        seen.append(("ours", args[-1]))
        return _fake_run(f"fusedrl-{algo}", 2.0)

    def theirs(python, src, algo, *args, timeout):
        seen.append(("peer", args[-1]))
        return _fake_run(f"jaxmarl-{algo}", 1.0, {**YAML[algo], "ENV_NAME": marl.peer_env_name(args[-1])})

    monkeypatch.setattr(marl, "ours_in_subprocess", ours)
    monkeypatch.setattr(marl, "peer_in_subprocess", theirs)
    assert marl.main([*TINY, "--algos", "ippo", "--env", LBF, *_jaxmarl_src(tmp_path)]) == 0
    assert seen == [("ours", LBF), ("peer", LBF)]
    assert f"; {LBF}, 4 envs x 26 steps" in capsys.readouterr().out
    seen.clear()
    assert marl.main([*TINY, "--algos", "ippo", *_jaxmarl_src(tmp_path)]) == 0  # MPE stays the default
    assert seen == [("ours", marl.ENV_ID), ("peer", marl.ENV_ID)]
    with pytest.raises(SystemExit):
        marl.main([*TINY, "--env", "jumanji:Snake-v1"])
    assert "--env: invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("env_id, name", [(marl.ENV_ID, "MPE_simple_spread_v3"), (LBF, LBF)])
def test_marl_bench_hands_the_peer_runner_the_env_its_script_makes(env_id, name, monkeypatch):
    argvs = []
    monkeypatch.setattr(marl, "_subprocess", lambda argv, timeout, env=None: argvs.append(argv) or {})
    marl.peer_in_subprocess("python", "src", "ippo", 2, 4, 26, 104, 3, env_id, timeout=1.0)
    assert argvs[0][1:] == [marl.PEER_RUNNER, "ippo", "2", "4", "26", "104", "3", name]


def _lbf_heuristic(x):
    """A policy that scores on LevelBasedForaging, from one agent's `agents_view` rows [..., 12] (foods,
    self, other: (row, col, level) each): walk to the first uneaten food and load beside it; its
    action [...]. Written with numpy's functions on numpy arrays and jnp's on jax arrays."""
    xp = np if isinstance(x, np.ndarray) else __import__("jax").numpy
    food = x[..., :6].reshape(x.shape[:-1] + (2, 3))
    target = xp.where(food[..., 0, 2:3] > 0, food[..., 0, :2], food[..., 1, :2])
    d = target - x[..., 6:8]
    dr, dc = d[..., 0], d[..., 1]
    adjacent = xp.abs(dr) + xp.abs(dc) == 1
    # NOOP 0, UP 1 (row - 1), DOWN 2, LEFT 3 (col - 1), RIGHT 4, LOAD 5
    return xp.select([adjacent, dr < 0, dr > 0, dc < 0, dc > 0], [5, 1, 2, 3, 4], 0)


@pytest.fixture(scope="module")
def lbf():
    """(JaxMARL's view of our LevelBasedForaging adapter, Jumanji's own env with its own time limit as
    jitted (reset, step), run with the rank promotion Jumanji's code relies on)."""
    import jax
    import jumanji

    suite = jumanji.make("LevelBasedForaging-v0")
    reset, step = jax.jit(suite.reset), jax.jit(suite.step)

    def allowed(fn):
        def run(*args):
            with jax.numpy_rank_promotion("allow"):
                return fn(*args)

        return run

    return peer.jaxmarl_view(LBF), (allowed(reset), allowed(step))


def test_jaxmarl_view_of_lbf_steps_like_jumanjis_own_env(lbf):
    # JaxMARL's `MultiAgentEnv.step` (auto-reset to `reset(split(key)[1])`) on the view, against Jumanji's
    # own env stepped with the same actions: per-agent observations, rewards, dones and masks, through
    # episodes that end on all food eaten and at the time limit (step 100). Actions: the heuristic
    # or, one time in three, any action (masked ones too: ippo_ff_mpe.py reads no masks).
    import jax
    import jax.numpy as jnp
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv
    from jaxmarl.environments.spaces import Box, Discrete

    view, (suite_reset, suite_step) = lbf
    assert isinstance(view, MultiAgentEnv) and view.agents == ["agent_0", "agent_1"] and view.num_agents == 2
    assert isinstance(view.action_space("agent_1"), Discrete) and view.action_space("agent_1").n == 6
    assert isinstance(view.observation_space("agent_0"), Box)
    assert view.observation_space("agent_0").shape == (12,)
    rng = np.random.default_rng(0)
    key = jax.random.PRNGKey(5)
    key, k = jax.random.split(key)
    obs, state = view.reset(k)
    s_state, ts = suite_reset(k)
    ends = {"eaten": 0, "time": 0}
    t, total = 0, np.zeros(2)
    for _ in range(260):
        rows = np.asarray(ts.observation.agents_view, np.float64)
        for i, a in enumerate(view.agents):
            np.testing.assert_array_equal(np.asarray(obs[a]), rows[i].astype(np.float32))
            mask = view.get_avail_actions(state)[a]
            np.testing.assert_array_equal(np.asarray(mask), ts.observation.action_mask[i])
        act = np.where(rng.random(2) < 1 / 3, rng.integers(0, 6, 2), _lbf_heuristic(rows))
        key, k = jax.random.split(key)
        actions = {a: jnp.int32(act[i]) for i, a in enumerate(view.agents)}
        obs, state, reward, done, _ = view.step(k, state, actions)
        s_state, ts = suite_step(s_state, jnp.asarray(act, jnp.int32))
        t += 1
        np.testing.assert_allclose([float(reward[a]) for a in view.agents], ts.reward, rtol=0, atol=0)
        total += np.asarray(ts.reward, np.float64)
        last = bool(ts.last())
        assert bool(done["__all__"]) == last and all(bool(done[a]) == last for a in view.agents)
        if last:
            ends["time" if t == 100 else "eaten"] += 1
            t = 0
            s_state, ts = suite_reset(jax.random.split(k)[1])  # JaxMARL's step resets with split(key)[1]
    assert ends["eaten"] >= 1 and ends["time"] >= 1, ends  # both kinds of end were crossed
    assert total.sum() > 0


def test_peer_runner_greedy_returns_on_lbf_match_a_plain_loop_over_jumanjis_env(lbf, monkeypatch):
    # The runner's evaluation of a policy on the view (the script's agent-major rows, episodes stopped at
    # their first end, the team return: the sum over the episode of the mean agent reward, at most 0.5)
    # against one episode at a time on Jumanji's own env, summed in float64. The policy: the heuristic,
    # as the shape of ippo_ff_mpe.py's network, whose argmax the runner takes.
    import distrax
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import jaxmarl

    class ActorCritic(nn.Module):
        action_dim: int
        activation: str = "tanh"

        @nn.compact
        def __call__(self, x):
            logits = 10.0 * jax.nn.one_hot(_lbf_heuristic(x), self.action_dim)
            return distrax.Categorical(logits=logits), jnp.zeros(x.shape[:-1])

    monkeypatch.setattr(jaxmarl, "make", jaxmarl.make)  # restored after the test
    peer._route_make(jaxmarl)
    _, (suite_reset, suite_step) = lbf
    episodes, key = 6, jax.random.PRNGKey(11)
    config = {"ENV_NAME": LBF, "ENV_KWARGS": {}, "ACTIVATION": "tanh"}
    got = np.asarray(peer._greedy_returns("ippo", types.SimpleNamespace(ActorCritic=ActorCritic), config, {},
                                          key, episodes))
    _, reset_key = jax.random.split(key)
    want = []
    for e in range(episodes):
        state, ts = suite_reset(jax.random.split(reset_key, episodes)[e])
        total = 0.0
        while True:
            act = _lbf_heuristic(np.asarray(ts.observation.agents_view, np.float64))
            state, ts = suite_step(state, jnp.asarray(act, jnp.int32))
            total += float(np.mean(np.asarray(ts.reward, np.float64)))
            if bool(ts.last()):
                break
        want.append(total)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert max(want) > 0.2 and min(want) < max(want) and max(want) <= 0.5 + 1e-6  # scored, told apart


def test_marl_bench_summarizes_every_seed_with_mean_std_and_iqm():
    """A side's summary over the seeds of all its runs: mean, std (ddof 0), and the interquartile
    mean (the mean of the middle half) with a 95% bootstrap interval inside the seeds' range."""
    greedy = [-30.0, -21.0, -20.0, -19.5, -19.0, -18.5, -18.0, -12.0]  # two runs of four seeds
    runs = [dict(sps=1.0, compile_s=1.0, greedy=greedy[:4], train_ret=[-1.0]),
            dict(sps=3.0, compile_s=2.0, greedy=greedy[4:], train_ret=[-3.0])]
    s = marl.summarize(runs)
    assert s["greedy"] == greedy and s["sps"] == 2.0
    assert s["greedy_mean"] == pytest.approx(sum(greedy) / 8)
    assert s["greedy_std"] == pytest.approx((sum((g - sum(greedy) / 8) ** 2 for g in greedy) / 8) ** 0.5)
    assert s["greedy_iqm"] == pytest.approx((-20.0 - 19.5 - 19.0 - 18.5) / 4)  # the outer quarters cut
    low, high = s["greedy_iqm_95"]
    assert -30.0 <= low < s["greedy_iqm"] < high <= -12.0
    same = marl.summarize([dict(sps=1.0, compile_s=1.0, greedy=[-5.0] * 4, train_ret=[])])
    assert same["greedy_iqm"] == same["greedy_iqm_95"][0] == same["greedy_iqm_95"][1] == -5.0


def test_marl_bench_takes_the_median_run_and_the_mean_training_return():
    """Steps/s and compile seconds are medians over a side's runs (one run slowed by the other users of
    a shared machine must not move them); the training return is the mean of every seed's last one."""
    runs = [dict(sps=1.0, compile_s=9.0, greedy=[1.0], train_ret=[-1.0, -2.0]),
            dict(sps=2.0, compile_s=1.0, greedy=[2.0], train_ret=[-3.0]),
            dict(sps=30.0, compile_s=2.0, greedy=[3.0], train_ret=[-6.0])]
    s = marl.summarize(runs)
    assert (s["sps"], s["compile_s"], s["sps_runs"]) == (2.0, 2.0, [1, 2, 30])
    assert s["train_ret_mean"] == pytest.approx(-3.0)
    untrained = dict(sps=1.0, compile_s=1.0, greedy=[1.0], train_ret=[])
    assert marl.summarize([untrained])["train_ret_mean"] is None


def test_the_mpe_preset_is_the_bench_ippo_at_jaxmarls_batch():
    """The MPE_simple_spread_v3 preset is IPPO at JaxMARL's numbers (`marl.FIELDS`, checked against its
    yaml above) with ippo_ff_mpe.yaml's 16 envs x 128 steps, for 1e6 env steps."""
    import fusedrl

    assert marl.config("ippo", 16, 128, 1_000_000) == fusedrl.preset(marl.ENV_ID)
