"""Smoke tests of `python -m fusedrl.bench`: the dispatcher and the `envs` benchmark at tiny sizes."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import subprocess
import sys

import pytest

import fusedrl.bench
from fusedrl.bench import envs as bench_envs
from fusedrl.streams import usable_cores

TINY = ["--num-envs", "1,4", "--steps", "5", "--repeats", "1", "--min-time", "0"]


def _table_and_rows(out: str) -> tuple[list[list[str]], list[dict]]:
    """The table rows (split into words) and the JSON rows of `bench envs` output."""
    lines = out.splitlines()
    header = [i for i, line in enumerate(lines) if line.split()[:2] == ["env", "num_envs"]]
    assert len(header) == 1, out
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    table = [line.split() for line in lines[header[0] + 1 : header[0] + 1 + len(rows)]]
    return table, rows


@pytest.mark.slow
def test_envs_bench_prints_table_and_json_rows(capsys):
    assert bench_envs.main(TINY) == 0  # no --env: CartPole-v1, ours against gymnax's of that name
    out = capsys.readouterr().out
    assert any("jax " in line and "device " in line for line in out.splitlines()), out
    table, rows = _table_and_rows(out)
    assert [(row[0], int(row[1]), row[4]) for row in table] == [("CartPole-v1", 1, "gymnax"),
                                                                ("CartPole-v1", 4, "gymnax")], out
    for row in table:
        assert row[-1].endswith("x") and float(row[-1][:-1]) > 0, out

    assert [row["num_envs"] for row in rows] == [1, 4]
    for row in rows:
        assert row["bench"] == "envs" and row["env_id"] == "CartPole-v1" and row["baseline"] == "gymnax"
        assert row["jax"] and row["device"]
        assert row["scan_steps"] >= 5
        for field in ("ours_steps_per_s", "baseline_steps_per_s", "ratio", "paired_ratio"):
            assert math.isfinite(row[field]) and row[field] > 0, (field, row)
        assert len(row["ours_seconds"]) == len(row["baseline_seconds"]) == 1
        expected = row["ours_steps_per_s"] / row["baseline_steps_per_s"]
        assert row["ratio"] == pytest.approx(expected)


@pytest.mark.slow
def test_envs_bench_steps_a_gymnax_id_and_an_env_without_baseline_in_one_table(capsys):
    argv = ["--env", "gymnax:Catch-bsuite", "--env", "probe:ActionReward-v0", "--num-envs", "3",
            "--steps", "4", "--repeats", "1", "--min-time", "0"]
    assert bench_envs.main(argv) == 0
    out = capsys.readouterr().out
    assert "probe:ActionReward-v0: no baseline: gymnax has no env of this name" in out
    table, rows = _table_and_rows(out)
    assert [row[:2] + row[4:5] for row in table] == [["gymnax:Catch-bsuite", "3", "gymnax"],
                                                     ["probe:ActionReward-v0", "3", "-"]], out
    assert table[1][-3:] == ["-", "-", "-"], out  # no baseline steps/s, ratio or paired ratio
    catch, probe = rows
    assert catch["env_id"] == "gymnax:Catch-bsuite" and catch["ratio"] > 0
    assert probe["baseline"] is None and probe["ratio"] is None and probe["baseline_seconds"] is None
    assert math.isfinite(probe["ours_steps_per_s"]) and probe["ours_steps_per_s"] > 0


@pytest.mark.parametrize("bad", [["--num-envs", "0"], ["--num-envs", "4,x"], ["--repeats", "0"]])
def test_envs_bench_rejects_bad_arguments(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_envs.main(bad)
    assert exc.value.code == 2
    assert "positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("env_id, message", [
    ("CartPoel-v1", "did you mean 'CartPole-v1'"),
    ("gymnax:Nope", "Unknown environment id 'gymnax:Nope'"),
    ("gymnasium:CartPole-v1", "Gymnasium envs step on the host"),
    ("nosuite:x", "Unknown environment suite 'nosuite:'"),
])
def test_envs_bench_rejects_bad_env_ids_before_compiling(env_id, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_envs.main(["--env", "CartPole-v1", "--env", env_id])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""  # nothing ran, not even the first env


def test_envs_bench_parses_repeated_env_ids_in_order_and_defaults_to_cartpole():
    parser = bench_envs.build_parser()
    assert parser.parse_args([]).envs is None  # main then benchmarks ENV_ID
    assert bench_envs.ENV_ID == "CartPole-v1"
    args = parser.parse_args(["--env", "gymnax:Breakout-MinAtar", "--env", "brax:ant", "--num-envs", "8"])
    assert args.envs == ["gymnax:Breakout-MinAtar", "brax:ant"] and args.num_envs == [8]


def test_envs_bench_masked_actions_are_uniform_over_the_allowed_ones():
    import jax
    import jax.numpy as jnp

    from fusedrl.envs.base import Discrete

    actions = bench_envs.Actions(Discrete(4), masked=True)
    x = actions.draw(jax.random.key(0), 4000, 2)  # [steps, envs, actions]
    assert x.shape == (4000, 2, 4)
    mask = jnp.array([[True, False, True, False], [False, False, False, True]])
    picked = jax.vmap(lambda xt: actions.pick(xt, mask))(x)  # [steps, envs]
    counts = [jnp.bincount(picked[:, e], length=4).tolist() for e in range(2)]
    assert counts[1] == [0, 0, 0, 4000]
    assert counts[0][1] == counts[0][3] == 0 and abs(counts[0][0] - 2000) < 150, counts
    unmasked = jax.vmap(actions.pick)(x)  # the baseline's side: any action
    assert sorted(set(unmasked.ravel().tolist())) == [0, 1, 2, 3]


def _fake_suite_module(name: str):
    """A small env suite of our own, `benchfake:Pick-v0`, on the suite-adapter contract of
    `fusedrl.envs.suites` (env_names, make_env, native_stepper): four actions, of which the
    observation's `action_mask` allows one (a new one each step, `time % 4`); reward 1 for the
    allowed action, else 0; episodes never terminate and are truncated after 1000 steps."""
    import types

    import jax
    import jax.numpy as jnp
    from flax import struct

    from fusedrl.envs._gymnax import spaces
    from fusedrl.envs.base import Discrete, Environment, EnvParams, EnvState

    @struct.dataclass
    class PickState(EnvState):
        time: jax.Array  # [] int32

    @struct.dataclass
    class PickParams(EnvParams):
        max_steps_in_episode: int = 1000

    class Pick(Environment):
        deterministic_step = True
        name = "benchfake:Pick-v0"

        @property
        def default_params(self):
            return PickParams()

        def reset_env(self, key, params):
            state = PickState(time=jnp.int32(0))
            return self.get_obs(state), state

        def step_env(self, key, state, action, params):
            reward = (action == state.time % 4).astype(jnp.float32)
            state = state.replace(time=state.time + 1)
            return self.get_obs(state), state, reward, jnp.bool_(False), {}

        def get_obs(self, state, params=None, key=None):
            return {"cue": jnp.zeros(1, jnp.float32), "action_mask": jnp.arange(4) == state.time % 4}

        def action_space(self, params=None):
            return Discrete(4)

        def observation_space(self, params=None):
            return spaces.Dict({"cue": spaces.Box(0.0, 0.0, (1,), jnp.float32),
                                "action_mask": spaces.Box(0, 1, (4,), jnp.bool_)})

    module = types.ModuleType(name)
    module.calls = []  # (name, num_envs) of each native_stepper call, then each action's shape and dtype

    def native_stepper(env_name, num_envs):
        """The suite's own stepping: its vmapped step with its own auto-reset (gymnax's `step`)."""
        module.calls.append((env_name, num_envs))
        env = Pick()
        params = env.default_params

        def init(key):
            return jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(key, num_envs), params)[1]

        def step(state, action):
            module.calls.append((action.shape, str(action.dtype)))
            keys = jax.random.split(jax.random.key(0), num_envs)
            vstep = jax.vmap(env.step, in_axes=(0, 0, 0, None))
            _, state, reward, _, _, _ = vstep(keys, state, action, params)
            return state, reward

        return init, step

    module.Pick = Pick
    module.env_names = lambda: ["Pick-v0"]
    module.make_env = lambda env_name: Pick()
    module.native_stepper = native_stepper
    return module


@pytest.fixture
def fake_suite(monkeypatch):
    """`benchfake:` registered as an env suite (its adapter module in sys.modules), for this test."""
    from fusedrl.envs import suites

    suite = suites.Suite("benchfake", "benchfake", ("jax",), "a suite of the tests")
    module = _fake_suite_module(suite.module)
    monkeypatch.setitem(suites.SUITES, suite.prefix, suite)
    monkeypatch.setitem(sys.modules, suite.module, module)
    return module


def test_envs_bench_steps_a_suite_env_against_its_adapters_native_stepper(fake_suite, capsys):
    argv = ["--env", "benchfake:Pick-v0", "--num-envs", "2", "--steps", "3", "--repeats", "1",
            "--min-time", "0"]
    assert bench_envs.main(argv) == 0
    table, [row] = _table_and_rows(capsys.readouterr().out)
    assert table[0][:2] + table[0][4:6] == ["benchfake:Pick-v0", "2", "benchfake", "native_stepper"]
    assert row["baseline"] == "benchfake native_stepper" and row["ratio"] > 0
    # Called once for the row's batch size; its step saw one action per env, in our action space's dtype.
    assert fake_suite.calls == [("Pick-v0", 2), ((2,), "int32")]


def test_envs_bench_ours_takes_only_actions_the_action_mask_allows(fake_suite):
    import jax

    target = bench_envs.resolve("benchfake:Pick-v0")
    assert target.ours.args[2] == bench_envs.Actions(target.ours.args[2].space, masked=True)
    init, run = target.ours(2, 3)
    acc = run(init(jax.random.key(0)), 2)[-1]
    # Per env and step: the mask sums to 1, the cue to 0, reward 1 for the allowed action, no episode ends.
    assert float(acc) == 2 * 3 * 2 * (1 + 1)


def test_envs_bench_suite_adapter_without_native_stepper_has_no_baseline(fake_suite, monkeypatch):
    monkeypatch.delattr(fake_suite, "native_stepper")
    target = bench_envs.resolve("benchfake:Pick-v0")  # nothing compiles
    assert target.baseline is None and target.baseline_name is None
    assert target.note == (
        "benchfake:Pick-v0: no baseline: the benchfake adapter (fusedrl.envs._benchfake) defines no "
        "native_stepper(name, num_envs), the suite's own vmapped step with its own auto-reset; its rows "
        "time ours alone.")


def test_envs_bench_action_mask_that_does_not_fit_the_action_space_is_a_usage_error(fake_suite, monkeypatch,
                                                                                    capsys):
    from fusedrl.envs.base import Discrete

    class PickOfThree(fake_suite.Pick):
        def action_space(self, params=None):
            return Discrete(3)

    monkeypatch.setattr(fake_suite, "make_env", lambda env_name: PickOfThree())
    with pytest.raises(SystemExit) as exc:
        bench_envs.main(["--env", "benchfake:Pick-v0"])
    assert exc.value.code == 2
    assert ("benchfake:Pick-v0: its observation's action_mask has shape (4,), which does not fit its action "
            "space Discrete(3") in capsys.readouterr().err


def test_envs_bench_native_stepper_reward_of_another_shape_is_an_error_naming_the_protocol(fake_suite):
    import jax

    stepper = fake_suite.native_stepper

    def bad_stepper(name, num_envs):
        init, step = stepper(name, num_envs)
        return init, lambda state, action: (lambda s, r: (s, r[:, None]))(*step(state, action))

    bad_stepper.__module__ = fake_suite.__name__
    target = bench_envs.resolve("benchfake:Pick-v0")
    init, run = bench_envs.make_native(bad_stepper, "Pick-v0", target.ours.args[2], 2, 3)
    with pytest.raises(ValueError, match=r"fusedrl\.envs\._benchfake\.native_stepper\('Pick-v0', 2\): step "
                       r"returned a reward of shape \(2, 1\); the protocol is step\(carry, action\)"):
        jax.eval_shape(run, jax.eval_shape(init, jax.random.key(0)), 1)


def test_subcommands_include_envs_and_skip_private_modules():
    names = fusedrl.bench.subcommands()
    assert "envs" in names
    assert not any(name.startswith("_") for name in names)
    for name in names:  # each listed subcommand can be run: it has main(argv)
        module = importlib.import_module(f"fusedrl.bench.{name}")
        inspect.signature(module.main).bind(["--help"])


def test_unknown_subcommand_lists_valid_ones(capsys):
    assert fusedrl.bench.main(["nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown subcommand 'nope'" in err
    assert "envs" in err


def test_no_subcommand_prints_usage(capsys):
    assert fusedrl.bench.main([]) == 2
    assert "usage: python -m fusedrl.bench <subcommand>" in capsys.readouterr().err
    assert fusedrl.bench.main(["--help"]) == 0
    assert "envs" in capsys.readouterr().out


@pytest.mark.subprocess
def test_module_entry_point_reports_unknown_subcommand():
    proc = subprocess.run(
        [sys.executable, "-m", "fusedrl.bench", "nope"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc
    assert "unknown subcommand 'nope'" in proc.stderr
    assert "envs" in proc.stderr


def test_sweep_bench_runs_and_reports_rows(capsys):
    from fusedrl.bench import sweep as bench_sweep

    # One setting only: each (agents, streams) compiles PureJaxRL's full-size program, and
    # tests/test_sweep.py checks the streams against one vmap.
    argv = ["--agents", "2", "--streams", "auto", "--num-updates", "1", "--min-time", "0", "--json"]
    assert bench_sweep.main(argv) in (0, None)
    rows = json.loads(capsys.readouterr().out)
    want = [(2, min(2, usable_cores()))]  # auto: one stream per usable core, at most one per agent
    assert [(r["agents"], r["streams"]) for r in rows] == want
    assert all(r["sps"] > 0 and r["compile_s"] >= 0 for r in rows)
    table = bench_sweep.format_table(rows)
    assert "streams" in table.splitlines()[0] and len(table.splitlines()) == len(want) + 1
    with pytest.raises(SystemExit):
        bench_sweep.main(["--streams", "0"])


@pytest.mark.slow
def test_presets_bench_runs_one_tiny_row(capsys, monkeypatch):
    import fusedrl
    from fusedrl.bench import presets as bench_presets

    calls = []
    evaluate = fusedrl.evaluate

    def recording(config, result, key, num_episodes=64, *, greedy=True):
        calls.append((num_episodes, greedy))
        return evaluate(config, result, key, num_episodes, greedy=greedy)

    monkeypatch.setattr(fusedrl, "evaluate", recording)
    argv = ["--env", "CartPole-v1", "--seeds", "2", "--episodes", "3",
            "--set", "total_timesteps=1024", "--set", "num_steps=16", "--json"]
    assert bench_presets.main(argv) in (0, None)
    out = capsys.readouterr().out
    assert "CartPole-v1" in out and "500" in out  # the row names the env and its reference
    assert sorted(calls) == [(3, False), (3, True)]  # greedy, then sampled as gymnax-blines does
    row = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert len(row["per_seed"]) == len(row["sampled_per_seed"]) == 2
    assert abs(row["sampled_min_seed"] - min(row["sampled_per_seed"])) <= 0.051  # rounded to 0.1
    assert f"sampled {row['sampled_mean']:.1f} ± {row['sampled_std']:.1f}" in out


@pytest.mark.slow
def test_runs_bench_compares_streams_with_the_single_vmap(capsys):
    from fusedrl.bench import runs as bench_runs
    from fusedrl.runs import num_streams

    tiny = ["--set", "num_envs=4", "--set", "num_steps=16", "--set", "total_timesteps=384",
            "--set", "update_epochs=1", "--set", "num_minibatches=2"]
    assert bench_runs.main(["--num-seeds", "2", "--repeats", "2", *tiny]) == 0
    out = capsys.readouterr().out
    assert "streams=1  median" in out and "(1.00x the single vmap)" in out
    if num_streams(2) == 2:  # on a machine with 2+ cores both programs ran
        assert "streams=2  median" in out
    with pytest.raises(SystemExit):
        bench_runs.main(["--set", "total_timesteps=lots"])


@pytest.mark.slow
def test_ppo_bench_measures_our_run():
    from fusedrl.bench.ppo import run_ours

    row = run_ours(seeds=2, num_envs=4, num_steps=16, total=4 * 16 * 2)
    assert row["impl"] == "fusedrl" and row["sps"] > 0 and row["compile_s"] > 0
    assert 0 < row["ret"] <= 500
    assert row["sps"] * row["train_s"] == pytest.approx(2 * 4 * 16 * 2)  # both seeds' steps


@pytest.mark.slow
def test_ppo_bench_measures_our_recurrent_run_at_purejaxrls_rnn_architecture():
    from fusedrl.bench.ppo import _config, run_ours

    config = _config(4, 16, 4 * 16 * 2, "gru")
    assert (config.recurrent, config.recurrent_size, config.hidden_sizes, config.activation) == (
        "gru", 128, (128, 128), "relu")
    row = run_ours(seeds=1, num_envs=4, num_steps=16, total=4 * 16 * 2, network="gru")
    assert row["impl"] == "fusedrl" and row["sps"] > 0 and row["sps"] * row["train_s"] == pytest.approx(128)


@pytest.mark.subprocess
def test_ppo_bench_recurrent_config_runs_purejaxrls_rnn_script_and_no_rejax(tmp_path, monkeypatch, capsys):
    # The recurrent row: ours and PureJaxRL's ppo_rnn.py (NETWORK "gru" to its runner), alternating,
    # with the ratio; rejax (no recurrent PPO) sits it out. The runs are stand-ins that record calls.
    from fusedrl.bench import ppo as bench_ppo

    calls = []

    def ours(cfg, total, fn="run_ours", python=None):
        calls.append(("ours", cfg.get("network")))
        return {"impl": "fusedrl", "compile_s": 1.0, "train_s": 1.0, "sps": 300.0, "ret": 1.0}

    def peer(python, script, *args, network="mlp", **kwargs):
        calls.append((os.path.basename(script), network))
        return {"impl": "peer", "compile_s": 1.0, "train_s": 1.0, "sps": 200.0, "ret": 1.0, "hangs": 0}

    monkeypatch.setattr(bench_ppo, "_subprocess_ours", ours)
    monkeypatch.setattr(bench_ppo, "run_peer", peer)
    (tmp_path / "purejaxrl").mkdir()
    argv = ["--configs", "recurrent", "--repeats", "2", "--peer-python", sys.executable, "--peer-script",
            __file__, "--purejaxrl-src", str(tmp_path)]
    with pytest.raises(SystemExit):  # the folder lacks ppo_rnn.py, which this config runs
        bench_ppo.main(argv)
    assert "no purejaxrl/ppo_rnn.py" in capsys.readouterr().err and not calls
    (tmp_path / "purejaxrl" / "ppo_rnn.py").write_text("")
    assert bench_ppo.main(argv) == 0
    assert sorted(calls) == sorted([("ours", "gru"), ("_purejaxrl_peer.py", "gru")] * 2)
    assert "recurrent ratio fusedrl/purejaxrl steps/s (median of runs): 1.50x" in capsys.readouterr().out


def test_ppo_bench_measures_our_sweep():
    from fusedrl.bench.ppo import run_ours_sweep

    row = run_ours_sweep(seeds=2, num_envs=4, num_steps=16, total=4 * 16 * 2)
    assert row["impl"] == "fusedrl-sweep" and row["sps"] > 0 and row["compile_s"] >= 0
    assert row["train_s"] > 0 and 0 < row["ret"] <= 500
    assert row["sps"] * row["train_s"] == pytest.approx(2 * 4 * 16 * 2)  # both seeds' steps, timed call


def _refuse_to_train(monkeypatch, bench_ppo):
    """An argument error that slipped through fails fast here, instead of starting full-size runs."""

    def train(*args, **kwargs):
        raise AssertionError("bench ppo started a run despite a bad argument")

    monkeypatch.setattr(bench_ppo, "_subprocess_ours", train)
    monkeypatch.setattr(bench_ppo, "run_peer", train)


@pytest.mark.subprocess
def test_ppo_bench_peer_errors_are_clear(tmp_path, monkeypatch):
    from fusedrl.bench import ppo as bench_ppo

    run_peer = bench_ppo.run_peer
    _refuse_to_train(monkeypatch, bench_ppo)
    with pytest.raises(SystemExit):  # PureJaxRL runs in the peers' interpreter: it needs one
        bench_ppo.main(["--purejaxrl-src", str(tmp_path)])
    with pytest.raises(RuntimeError, match="PUREJAXRL_SRC must name a folder"):
        run_peer(sys.executable, bench_ppo.PUREJAXRL_RUNNER, 1, 4, 8, 32,
                 env={"PUREJAXRL_SRC": str(tmp_path)})


@pytest.mark.subprocess
def test_ppo_bench_names_a_missing_peer_file_before_running_anything(tmp_path, monkeypatch, capsys):
    from fusedrl.bench import ppo as bench_ppo

    _refuse_to_train(monkeypatch, bench_ppo)
    (tmp_path / "purejaxrl").mkdir()
    missing = str(tmp_path / "missing")
    for argv, flag in (
        (["--peer-python", missing], "--peer-python"),
        (["--peer-python", sys.executable, "--peer-script", missing], "--peer-script"),
        (["--peer-python", sys.executable, "--peer-script", __file__, "--purejaxrl-src", str(tmp_path)],
         "--purejaxrl-src"),  # the folder is there, purejaxrl/ppo.py is not
        (["--baseline-python", missing], "--baseline-python"),
    ):
        with pytest.raises(SystemExit):
            bench_ppo.main(["--configs", "default"] + argv)
        err = capsys.readouterr().err
        assert f"{flag} {argv[-1]}" in err and "no " in err, err


@pytest.mark.subprocess
def test_ppo_bench_kills_and_retries_a_hung_peer(tmp_path):
    from fusedrl.bench import ppo as bench_ppo

    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(60)\n")
    result = bench_ppo.run_peer(sys.executable, str(script), 1, 4, 8, 32, timeout=1, attempts=2)
    assert result == {"hung": True, "hangs": 2}  # reported, not raised: the other runs go on


def test_ppo_bench_many_agents_goal_divides_our_64_by_each_peer():
    from fusedrl.bench.ppo import many_agents_goal

    rows = [
        {"config": "seeds8", "fusedrl": {"sps": 110.0}, "fusedrl-sweep": {"sps": 200.0},
         "purejaxrl": {"sps": 100.0}, "rejax": {"sps": 80.0}, "ratio_fusedrl_vs_rejax": 1.4},
        {"config": "seeds64", "fusedrl": {"sps": 150.0}, "fusedrl-sweep": {"sps": 300.0},
         "rejax": {"sps": 120.0}, "purejaxrl": {"hangs": 3}},  # hung in every attempt: no ratio
    ]
    vmap, swept = "\n".join(many_agents_goal(rows)).split("many agents: fusedrl-sweep")
    assert "many agents: fusedrl at 64 agents 150" in vmap and swept.startswith(" at 64 agents 300")
    assert "1.50x purejaxrl at seeds8" in vmap and "1.88x rejax at seeds8" in vmap
    assert "1.25x rejax at seeds64" in vmap and "purejaxrl at seeds64" not in vmap
    assert "3.00x purejaxrl at seeds8" in swept and "2.50x rejax at seeds64" in swept
    assert "fusedrl-sweep at seeds8" not in swept  # ours are never divided by ours
    assert many_agents_goal(rows[:1]) == []  # needs both configs


def test_ppo_bench_rejects_zero_repeats(capsys, monkeypatch):
    from fusedrl.bench import ppo as bench_ppo

    _refuse_to_train(monkeypatch, bench_ppo)
    with pytest.raises(SystemExit):
        bench_ppo.main(["--configs", "default", "--repeats", "0"])
    assert "--repeats must be >= 1" in capsys.readouterr().err


def test_hostloop_solve_rule_is_the_same_for_every_implementation():
    # SB3's per-rollout returns are built as our trainer's episode_return metric: the mean over
    # the episodes that ended in the update, carried over when none did, 0.0 before the first.
    from fusedrl.bench.hostloop import _solve_index, per_rollout_returns

    returns = per_rollout_returns([[], [10.0, 30.0], [], [500.0]] + [[480.0]] * 9)
    assert returns[:4].tolist() == [0.0, 20.0, 20.0, 500.0]
    # Updates 3..12 average (500 + 9 * 480) / 10 = 482 >= 475: solved at update 12, not earlier.
    assert _solve_index(returns) == 12
    assert _solve_index(returns[:12]) is None
    assert _solve_index([475.0] * 10) == 9  # the threshold itself is a solve


@pytest.mark.subprocess
def test_ppo_bench_rejects_unknown_purejaxrl_configs(capsys, monkeypatch):
    from fusedrl.bench import ppo as bench_ppo

    _refuse_to_train(monkeypatch, bench_ppo)
    for argv in (["--purejaxrl-configs", "seeds9"],  # no such config
                 ["--purejaxrl-configs", "seeds8"],  # without --purejaxrl-src: nothing to skip
                 ["--configs", "seeds8", "--peer-python", sys.executable, "--purejaxrl-src", "x",
                  "--purejaxrl-configs", "wide"]):  # not among --configs
        with pytest.raises(SystemExit):
            bench_ppo.main(argv)
        assert "--purejaxrl-configs" in capsys.readouterr().err
    for bad in ("seeds64=512", "seeds8=lots", "seeds8=0"):  # seeds64 is not among the default --configs
        with pytest.raises(SystemExit):
            bench_ppo.main(["--configs", "seeds8", "--timesteps", bad])
        assert "--timesteps" in capsys.readouterr().err


KERNELS_HLO = """HloModule m

%fused_computation (param_0: f32[2,2], param_1: f32[2,2]) -> f32[2,2] {
  %param_0 = f32[2,2]{1,0} parameter(0)
  %param_1 = f32[2,2]{1,0} parameter(1)
  ROOT %dot.1 = f32[2,2]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%body (p: (s32[], f32[2,2])) -> (s32[], f32[2,2]) {
  %p = (s32[], f32[2,2]{1,0}) parameter(0)
  %x = f32[2,2]{1,0} get-tuple-element(%p), index=1
  %dot_fusion.3 = f32[2,2]{1,0} fusion(%x, %x), kind=kOutput, calls=%fused_computation
  %add.7 = f32[2,2]{1,0} add(%dot_fusion.3, %dot_fusion.3)
  ROOT %t = (s32[], f32[2,2]{1,0}) tuple(%i, %add.7)
}

ENTRY %main (x: f32[2,2]) -> f32[2,2] {
  %while.2 = (s32[], f32[2,2]{1,0}, /*index=2*/f32[2]{0}) while(%tuple), condition=%cond, body=%body
  %gte = f32[2,2]{1,0} get-tuple-element(%while.2), index=1
  ROOT %tanh.1 = f32[2,2]{1,0} tanh(%gte)
}
"""


def test_kernels_bench_sums_kernels_not_the_loops_around_them():
    from fusedrl.bench.kernels import Kernels, aggregate, format_report

    kernels = Kernels.from_hlo(KERNELS_HLO)
    assert kernels.has_dot["dot_fusion.3"] and not kernels.has_dot["add.7"]
    assert "while.2" not in kernels.has_dot  # a container: its span holds the kernels below
    events = [
        {"ph": "X", "name": "while.2", "dur": 1000.0, "tid": 1},
        {"ph": "X", "name": "ThunkExecutor::Execute", "dur": 500.0, "tid": 1},
        {"ph": "X", "name": "dot_fusion.3", "dur": 10.0, "tid": 1},
        {"ph": "X", "name": "dot_fusion.3", "dur": 10.0, "tid": 2},
        {"ph": "X", "name": "add.7", "dur": 5.0, "tid": 2},
        {"ph": "X", "name": "tanh.1", "dur": 3.0, "tid": 1},
        {"ph": "i", "name": "tanh.1", "tid": 1},  # not a complete event
    ]
    p = aggregate(events, kernels, updates=2, wall_s=40e-6)
    assert p.kernel_us == {"dot_fusion": 20.0, "add": 5.0, "tanh": 3.0}
    assert p.kernel_count == {"dot_fusion": 2, "add": 1, "tanh": 1}
    assert p.dot_us == 20.0 and p.thread_us == {1: 13.0, 2: 15.0}
    assert p.cores_busy == pytest.approx(28 / 40)
    per_kernel = aggregate(events, kernels, updates=2, wall_s=40e-6, by_instruction=True)
    report = format_report(1e-3, per_kernel, top=2, shapes=kernels.shape)
    assert "dot_fusion.3" in report and "f32[2,2]{1,0}" in report and "(1 more rows)" in report
    assert "cores busy 0.70" in report and "matrix product: 71%" in report  # 20 of 28 us
    # Per update (2 here): 4 kernels, 40 us traced wall.
    assert "kernels per update: 2," in report and "0.02 ms traced" in report
    assert "more rows" not in format_report(1e-3, per_kernel, top=3)  # 3 rows: all listed


@pytest.mark.slow
def test_kernels_bench_profiles_a_tiny_run(capsys):
    import re

    from fusedrl.bench import kernels as bench_kernels

    argv = ["--num-envs", "4", "--num-steps", "16", "--updates", "2", "--repeats", "1", "--top", "3"]
    assert bench_kernels.main(argv) == 0
    out = capsys.readouterr().out
    count = float(re.search(r"kernels per update: ([\d,]+)", out).group(1).replace(",", ""))
    dots = float(re.search(r"matrix product: (\d+)%", out).group(1))
    assert count > 100 and 0 < dots < 100  # the trace's kernels were found and some did matmuls
    assert "(more rows)" not in out and "more rows)" in out  # --top 3 cut the table
    with pytest.raises(SystemExit):
        bench_kernels.main(["--updates", "0"])


def test_pendulum_optimum_dp_is_exact_one_step_ahead_and_its_controller_earns_its_values():
    import jax
    import jax.numpy as jnp
    import numpy as np

    from fusedrl.bench.pendulum_optimum import run_controller, solve

    solved = solve(40, 33, 9)
    values, value_at, params = solved.values, solved.value_at, solved.params
    assert values.shape == (params.max_steps_in_episode + 1, 40, 33)
    v = np.asarray(values)
    assert np.all(v[1:] <= v[:-1] + 1e-4)  # rewards are <= 0: more steps to go, lower value
    # One step to go: the best reward from each grid state, by the env's formula (torque 0 is
    # in the grid, so the torque cost is 0).
    theta = np.linspace(-np.pi, np.pi, 40, endpoint=False)[:, None]
    vel = np.linspace(-8.0, 8.0, 33)[None, :]
    angle = np.mod(theta + np.pi, 2 * np.pi) - np.pi
    np.testing.assert_allclose(v[1], -(angle**2 + 0.1 * vel**2), rtol=1e-5, atol=1e-4)
    # Interpolation returns grid values at grid points, wraps the angle, and clips the velocity.
    assert float(value_at(values[1], jnp.float32(theta[3, 0]), jnp.float32(vel[0, 5]))) == (
        pytest.approx(v[1][3, 5], abs=1e-4)
    )
    assert float(value_at(values[1], jnp.float32(theta[3, 0] + 2 * np.pi), jnp.float32(20.0))) == (
        pytest.approx(v[1][3, 32], abs=1e-3)
    )
    seam = jnp.float32(theta[39, 0] + np.pi / 40)  # halfway from the last angle to the first
    assert float(value_at(values[1], seam, jnp.float32(vel[0, 5]))) == (
        pytest.approx((v[1][39, 5] + v[1][0, 5]) / 2, abs=1e-3)
    )

    # The controller acts on the grid with one step fewer to go than the state it acts in, and
    # its value estimate at a start is that of the full horizon's grid.
    from fusedrl.bench.pendulum_optimum import _lookahead, _start_states, controller_returns

    horizon = params.max_steps_in_episode
    ti, vj = np.repeat(np.arange(0, 40, 5), 3), np.tile([0, 12, 24], 8)  # 24 grid states
    states = _start_states(jnp.float32(theta[ti, 0]), jnp.float32(vel[0, vj]))
    choose = jax.vmap(_lookahead(solved), in_axes=(0, None))
    for k in (0, horizon - 1):
        best, nxt, reward = choose(states, k)
        ahead = value_at(values[horizon - k - 1], nxt.theta, nxt.theta_dot)  # [states, torques]
        np.testing.assert_array_equal(best, jnp.argmax(reward + ahead, axis=1))
    assert not np.array_equal(choose(states, horizon - 1)[0], choose(states, horizon - 2)[0])
    _, at_start = controller_returns(solved, states)
    np.testing.assert_allclose(at_start, v[horizon][ti, vj], rtol=1e-5)

    returns, start_values = run_controller(solved, jax.random.PRNGKey(0), 128)
    returns, start_values = np.asarray(returns), np.asarray(start_values)
    # Even this coarse grid swings the pendulum up and holds it: hanging still from the same starts
    # costs ~-1,200 per episode, and the preset's PPO agents score about -148.
    assert returns.mean() > -175
    # The controller earns what the DP promised, start by start (the grid's interpolation error
    # is all that separates them).
    assert abs(returns.mean() - start_values.mean()) < 15
    assert np.corrcoef(returns, start_values)[0, 1] > 0.8


def test_pendulum_optimum_discounted_solves_its_bellman_equation_and_earns_its_discounted_values():
    import jax
    import jax.numpy as jnp
    import numpy as np

    from fusedrl.bench.pendulum_optimum import _lookahead, _start_states, run_controller, solve

    gamma = 0.9
    solved = solve(40, 33, 9, gamma)
    assert solved.values.shape == (1, 40, 33)
    # The stationary grid is the fixed point of the discounted backup, computed here by hand.
    grid = solved.values[0]
    theta, vel = jnp.meshgrid(jnp.linspace(-np.pi, np.pi, 40, endpoint=False, dtype=jnp.float32),
                              jnp.linspace(-8.0, 8.0, 33, dtype=jnp.float32), indexing="ij")
    states = _start_states(theta.ravel(), vel.ravel())
    step = jax.vmap(solved.env.step_env, in_axes=(None, 0, None, None))
    q = []
    for torque in solved.torques:
        _, nxt, reward, _, _ = step(None, states, torque[None], solved.params)
        value = solved.value_at(grid, nxt.theta, nxt.theta_dot)
        q.append(reward + gamma * value)
        # The controller's lookahead discounts the same way.
        np.testing.assert_allclose(solved.lookahead_value(grid, nxt), gamma * value, rtol=1e-6)
    q = jnp.stack(q)
    # Within 1e-3 of the fixed point (as `solve` promises) means one more backup moves the grid by
    # at most 1e-3 * (1 - gamma) / gamma (about 1.1e-4); float32 rounding leaves ~1.5e-5.
    np.testing.assert_allclose(q.max(0).reshape(40, 33), grid, atol=1e-4)
    # The controller picks, from each grid state, a torque the backup's maximum came from ...
    choose = _lookahead(solved)
    picked = jax.vmap(lambda state: choose(state, 0)[0])(states)
    np.testing.assert_allclose(q[picked, jnp.arange(q.shape[1])], q.max(0), atol=1e-5)
    # ... and earns, in discounted return, what the grid promised (up to interpolation).
    returns, start_values = run_controller(solved, jax.random.PRNGKey(0), 128)

    def discounted(state):
        def act(state, k):
            best, nxt, reward = choose(state, k)
            return jax.tree.map(lambda x: x[best], nxt), reward[best]

        horizon = solved.params.max_steps_in_episode
        rewards = jax.lax.scan(act, state, jnp.arange(horizon))[1]
        return (rewards * gamma ** jnp.arange(horizon)).sum()

    keys = jax.random.split(jax.random.PRNGKey(0), 128)  # run_controller's starts
    _, starts = jax.vmap(solved.env.reset_env, in_axes=(0, None))(keys, solved.params)
    earned = np.asarray(jax.jit(jax.vmap(discounted))(starts))
    assert abs(earned.mean() - float(np.mean(start_values))) < 1.0
    assert np.corrcoef(earned, start_values)[0, 1] > 0.99
    # Scored as the evaluation scores (undiscounted), a short-sighted objective costs: with gamma
    # 0.5 the controller never swings up (hanging still from these starts costs ~-1,200), with 0.9
    # it does, though worse than the undiscounted optimum (about -139 on this grid).
    myopic, _ = run_controller(solve(40, 33, 9, 0.5), jax.random.PRNGKey(0), 128)
    assert float(np.mean(myopic)) < -800 < -250 < float(np.mean(returns)) < -145


@pytest.mark.slow
def test_pendulum_compare_preset_scores_the_rows_policies_and_the_controller_from_the_same_starts():
    import jax
    import numpy as np

    import fusedrl
    from fusedrl.bench.pendulum_optimum import (
        ANGLE_BINS,
        compare_preset,
        controller_returns,
        hybrid_program,
        policy_and_starts,
        solve,
    )
    from fusedrl.bench.presets import train_preset
    from fusedrl.envs import make

    short = dict(total_timesteps=32 * 128 * 3)  # 3 updates: a policy that cannot swing up yet
    config, result, _, _, k_eval = train_preset("Pendulum-v1", 2, 0, **short)
    trainer = fusedrl.make_train(config)
    policy, starts = policy_and_starts(trainer, result, k_eval, 24)
    # The returns are the ones `fusedrl.evaluate` (and so a `bench presets` row) reports ...
    np.testing.assert_allclose(policy, fusedrl.evaluate(config, result, k_eval, 24), rtol=1e-5)
    # ... and `starts` are the states those episodes began in: stepping the raw env from them
    # with the policy (observations normalised by hand) earns the same returns.
    env, params = make("Pendulum-v1")

    def rollout(seed_result, start):
        stats = trainer.obs_stats(seed_result.state, seed_result.hparams)

        def step(state, _):
            obs = stats.normalize(env.get_obs(state, params)[None], clip=10.0)
            pi, _ = trainer.network.apply(seed_result.params, obs)
            _, state, reward, _, _ = env.step_env(None, state, pi.mode()[0], params)
            return state, reward

        return jax.lax.scan(step, start, None, length=params.max_steps_in_episode)[1].sum()

    by_hand = jax.jit(jax.vmap(jax.vmap(rollout, in_axes=(None, 0))))(result, starts)
    np.testing.assert_allclose(by_hand, policy, rtol=1e-3)

    solved = solve(40, 33, 9)
    dp, _ = controller_returns(solved, jax.tree.map(lambda x: x.reshape(-1), starts))
    dp = np.asarray(dp).reshape(2, 24)
    # Hybrids: with the controller acting nowhere they earn the policy's returns, everywhere the
    # controller's; split at an angle, each takes some of the steps (of different trajectories).
    hybrid = hybrid_program(solved, trainer, 24)  # one program for every threshold and side
    never, none_taken = hybrid(result, k_eval, 4.0, controller_far=True)
    always, all_taken = hybrid(result, k_eval, 4.0, controller_far=False)
    np.testing.assert_allclose(never, policy, rtol=1e-5)
    np.testing.assert_allclose(always, dp, rtol=1e-4)
    assert np.all(np.asarray(none_taken) == 0) and np.all(np.asarray(all_taken) == 1)
    far, far_taken = hybrid(result, k_eval, 2.0, controller_far=True)
    near, near_taken = hybrid(result, k_eval, 2.0, controller_far=False)
    assert 0 < float(np.mean(far_taken)) < 1 and 0 < float(np.mean(near_taken)) < 1
    # The policy here cannot swing up: the controller acting near the top (where it holds the
    # pendulum once up) gains more than acting only below the sides.
    assert np.mean(policy) < np.mean(far) < np.mean(near) <= np.mean(dp) + 5

    cmp = compare_preset(solved, 24, seeds=2, seed=0, hybrids=(2.0,), **short)
    assert cmp["policy_per_seed"] == pytest.approx(np.asarray(policy).mean(1), abs=0.06)  # 1 decimal
    assert [(h["controller_where"], h["threshold"]) for h in cmp["hybrids"]] == [("far", 2.0), ("near", 2.0)]
    means = [float(np.mean(far)), float(np.mean(near))]
    assert [h["mean"] for h in cmp["hybrids"]] == pytest.approx(means, rel=1e-5)
    assert cmp["hybrids"][0]["controller_steps"] == pytest.approx(float(np.mean(far_taken)))
    assert cmp["dp_per_seed"][1] == pytest.approx(float(dp[1].mean()), abs=0.06)
    bins = cmp["bins"]
    assert [b["angle"][0] for b in bins] == list(ANGLE_BINS[:-1])
    assert sum(b["share"] for b in bins) == pytest.approx(1.0)
    shown = [b for b in bins if b["share"] > 0]
    assert shown and all(b["gap"] == pytest.approx(b["dp"] - b["policy"]) for b in shown)
    # After 3 updates the policy cannot swing up, the controller can, from every start angle.
    assert all(b["gap"] > 50 and b["lost_swings"] > 0.5 for b in shown)
    assert cmp["dp"] > -200 > cmp["policy"]


@pytest.mark.slow
def test_pendulum_optimum_cli_prints_its_rows_and_rejects_bad_arguments(capsys):
    import re

    import jax
    import numpy as np

    from fusedrl.bench import pendulum_optimum

    argv = ["--grid", "16x9", "--actions", "3", "--episodes", "64", "--json"]
    assert pendulum_optimum.main(argv) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["grid"] == "16x9" and row["episodes"] == 64
    assert row["block64_min"] == row["block64_max"] == pytest.approx(row["mean_return"])
    assert row["gamma"] is None
    from fusedrl.bench.pendulum_optimum import run_controller, solve

    returns, start_values = run_controller(solve(16, 9, 3), jax.random.PRNGKey(0), 64)
    assert row["mean_return"] == pytest.approx(float(np.mean(returns)), rel=1e-5)
    assert row["sem"] == pytest.approx(float(np.std(returns, ddof=1)) / 8, rel=1e-4)  # sqrt(64)
    assert row["dp_value"] == pytest.approx(float(np.mean(start_values)), rel=1e-5)
    assert pendulum_optimum.main([*argv[:-1], "--gamma", "0.9"]) == 0  # as text, not JSON
    out = capsys.readouterr().out
    assert "best discounted return, gamma 0.9, (solved in" in out and "(discounted)" in out
    bad_args = (["--grid", "16"], ["--grid", "2x9"], ["--actions", "1"], ["--episodes", "0"],
                ["--gamma", "1"], ["--gamma", "0"],
                ["--seeds", "4"], ["--set", "gamma=0.99"], ["--hybrid", "2"],  # need --compare-preset
                ["--hybrid", "0", "--compare-preset"], ["--hybrid", "3.2", "--compare-preset"])
    for bad in bad_args:
        with pytest.raises(SystemExit):
            pendulum_optimum.main(bad)
        err = capsys.readouterr().err
        assert bad[0] in err
    # --compare-preset prints its table after the controller's lines (and a second JSON row).
    short = ["--grid", "16x9", "--actions", "3", "--episodes", "8", "--compare-preset", "--seeds", "1",
             "--set", "total_timesteps=4096", "--set", "num_envs=32"]
    assert pendulum_optimum.main(short) == 0
    out = capsys.readouterr().out
    assert "overrides {'total_timesteps': 4096, 'num_envs': 32}" in out
    assert "from the same 8 starts per seed" in out and "2.6 to 3.14" in out
    assert re.search(r"^\s+all\s+100%\s+-\d+\.\d\s+-\d+\.\d", out, re.M)
    assert "Hybrids" not in out
    assert pendulum_optimum.main([*short, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [len(rows), rows[1]["seeds"], len(rows[1]["bins"]), rows[1]["hybrids"]] == [2, 1, 4, []]
    assert pendulum_optimum.main([*short, "--hybrid", "2.5"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s+\|angle\| > 2\.5\s+\d+%\s+-\d+\.\d", out, re.M)
    assert re.search(r"^\s+\|angle\| <= 2\.5\s+\d+%\s+-\d+\.\d", out, re.M)


def test_envs_bench_size_calibrates_on_the_faster_side_and_reports_medians_of_alternating_runs(monkeypatch):
    # Stand-ins for the jitted programs and their timings: what is checked is the bookkeeping.
    import jax
    import jax.numpy as jnp

    per_chunk = {"ours": 1e-3, "baseline": 3e-3}  # while calibrating: ours is the faster side
    timed = {"ours": [0.010, 0.030, 0.012], "baseline": [0.040, 0.030, 0.060]}  # the 3 repeats
    calls = []

    def builder(impl):
        def build(num_envs, steps):
            def run(carry, num_chunks):
                return carry

            run.impl = impl
            return (lambda key: jnp.float32(0)), run

        return build

    def time_call(run, carry, num_chunks):
        calls.append((run.impl, int(num_chunks)))
        seen = sum(impl == run.impl for impl, _ in calls)
        # Calibration times 1 chunk, then 10 (1 ms per chunk of ours: 10 ms >= --min-time 9 ms).
        return per_chunk[run.impl] * int(num_chunks) if seen <= 2 else timed[run.impl][seen - 3]

    monkeypatch.setattr(bench_envs, "_time_call", time_call)
    target = bench_envs.Target("X-v0", builder("ours"), builder("baseline"), "gymnax")
    row = bench_envs.bench_size(target, 8, 5, repeats=3, min_time=0.009, key=jax.random.key(0))
    assert row["env_id"] == "X-v0" and row["baseline"] == "gymnax"
    assert row["scan_steps"] == 5 * 10  # calibrated until the faster side lasts --min-time
    assert calls[-6:] == [("ours", 10), ("baseline", 10), ("baseline", 10), ("ours", 10),
                          ("ours", 10), ("baseline", 10)]  # the first of each pair alternates
    assert row["ours_seconds"] == timed["ours"] and row["baseline_seconds"] == timed["baseline"]
    # steps/s count every env's steps, over the median of the repeats.
    assert row["ours_steps_per_s"] == pytest.approx(8 * 50 / 0.012)
    assert row["baseline_steps_per_s"] == pytest.approx(8 * 50 / 0.040)
    assert row["ratio"] == pytest.approx(0.040 / 0.012)
    assert row["paired_ratio"] == pytest.approx(4.0)  # median of baseline/ours per repeat: 4, 1, 5

    calls.clear()  # without a baseline: ours alone, calibrated on itself
    alone = bench_envs.Target("X-v0", builder("ours"), None, None, "no baseline")
    row = bench_envs.bench_size(alone, 8, 5, repeats=3, min_time=0.009, key=jax.random.key(0))
    assert {impl for impl, _ in calls} == {"ours"} and row["scan_steps"] == 5 * 10
    assert row["ours_steps_per_s"] == pytest.approx(8 * 50 / 0.012)
    assert row["baseline_steps_per_s"] is None and row["baseline_seconds"] is None
    assert row["ratio"] is None and row["paired_ratio"] is None


def test_compile_then_run_times_the_compile_apart_from_the_run():
    import time

    from fusedrl.bench._timing import compile_then_run

    class Jitted:  # what compile_then_run uses of a jax.jit-wrapped function
        def lower(self, *args):
            return self

        def compile(self):
            time.sleep(0.5)
            return lambda *args: (time.sleep(0.05), sum(args))[1]

    out, compile_s, run_s = compile_then_run(Jitted(), 1, 2)
    assert out == 3 and compile_s >= 0.5 and 0.05 <= run_s < 0.5


@pytest.mark.subprocess
def test_ppo_bench_rotates_runs_takes_medians_of_finished_runs_and_divides_ours_by_each_peer(
    monkeypatch, capsys
):
    from fusedrl.bench import ppo as bench_ppo

    ran = []
    sps = {("fusedrl", 1): [100.0, 300.0, 200.0], ("fusedrl", 8): [800.0, 600.0, 700.0],
           ("fusedrl-sweep", 8): [900.0, 1000.0, 1100.0]}
    peer = [{"hung": True, "hangs": 3}, {"sps": 50.0, "hangs": 1}, {"sps": 100.0, "hangs": 0}]

    def ours(cfg, total, fn="run_ours"):
        label = "fusedrl" if fn == "run_ours" else "fusedrl-sweep"
        ran.append((label, cfg["seeds"], total))
        n = sum(r[:2] == (label, cfg["seeds"]) for r in ran)
        return {"impl": label, "sps": sps[label, cfg["seeds"]][n - 1], "compile_s": 1.0, "ret": 9.0}

    def run_peer(python, script, seeds, num_envs, num_steps, total, env=None, timeout=900, attempts=3):
        ran.append(("rejax", seeds, total))
        n = sum(r[:2] == ("rejax", seeds) for r in ran)
        return {"compile_s": 2.0, "ret": 8.0, **peer[n - 1]}

    monkeypatch.setattr(bench_ppo, "_subprocess_ours", ours)
    monkeypatch.setattr(bench_ppo, "run_peer", run_peer)
    argv = ["--configs", "default,seeds8", "--repeats", "3", "--peer-python", sys.executable,
            "--peer-script", __file__, "--timesteps", "seeds8=4096"]
    assert bench_ppo.main(argv) == 0
    out = capsys.readouterr().out
    # Each repeat starts with the next implementation; fusedrl-sweep only at multi-seed configs.
    assert [r[0] for r in ran] == ["fusedrl", "rejax", "rejax", "fusedrl", "fusedrl", "rejax",
                                   "fusedrl", "fusedrl-sweep", "rejax", "fusedrl-sweep", "rejax",
                                   "fusedrl", "rejax", "fusedrl", "fusedrl-sweep"]
    assert {r[2] for r in ran if r[1] == 1} == {500_000} and {r[2] for r in ran if r[1] == 8} == {4096}
    default, seeds8 = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert default["fusedrl"]["sps"] == 200.0 and default["rejax"]["sps"] == 75.0  # hung run left out
    assert default["rejax"]["hangs"] == 4 and default["rejax"]["sps_runs"] == [50, 100]
    assert default["ratio_fusedrl_vs_rejax"] == pytest.approx(200 / 75)
    assert "fusedrl-sweep" not in default and "ratio_fusedrl-sweep_vs_rejax" not in default
    assert seeds8["ratio_fusedrl_vs_rejax"] == pytest.approx(700 / 75)
    assert seeds8["ratio_fusedrl-sweep_vs_rejax"] == pytest.approx(1000 / 75)
    assert "seeds8   ratio fusedrl-sweep/rejax steps/s (median of runs): 13.33x" in out


def test_ppo_bench_config_is_purejaxrls_cartpole_config():
    from fusedrl.bench import ppo as bench_ppo
    from fusedrl.bench.sweep import config_for

    assert bench_ppo.CONFIGS == {
        "default": dict(seeds=1, num_envs=4, num_steps=128),
        "seeds8": dict(seeds=8, num_envs=4, num_steps=128),
        "wide": dict(seeds=1, num_envs=2048, num_steps=16),
        "seeds64": dict(seeds=64, num_envs=4, num_steps=128),
        "recurrent": dict(seeds=1, num_envs=4, num_steps=128, network="gru"),  # ppo_rnn.py's
    }
    # `bench sweep` spells PureJaxRL's config out field by field: `bench ppo` trains the same.
    assert bench_ppo._config(4, 128, 10 * 4 * 128) == config_for(10)


@pytest.mark.subprocess
def test_ppo_bench_peer_retry_reports_the_hangs_before_a_finished_run(tmp_path):
    from fusedrl.bench import ppo as bench_ppo

    script = tmp_path / "hang_once.py"  # hangs on its first run only
    script.write_text("import os, time\nmark = os.environ['MARK']\nif not os.path.exists(mark):\n"
                      "    open(mark, 'w').close()\n    time.sleep(60)\nprint('{\"sps\": 1.0}')\n")
    result = bench_ppo.run_peer(sys.executable, str(script), 1, 4, 8, 32,
                                env={"MARK": str(tmp_path / "mark")}, timeout=2, attempts=3)
    assert result == {"sps": 1.0, "hangs": 1}


@pytest.mark.subprocess
def test_purejaxrl_peer_counts_the_steps_of_every_seed(tmp_path):
    # A stand-in for PureJaxRL's make_train with its metrics' layout [updates, steps, envs].
    from fusedrl.bench import ppo as bench_ppo

    (tmp_path / "purejaxrl").mkdir()
    (tmp_path / "purejaxrl" / "ppo.py").write_text(
        "import jax.numpy as jnp\n\n"
        "def make_train(config):\n"
        "    def train(key):\n"
        "        shape = (2, config['NUM_STEPS'], config['NUM_ENVS'])\n"
        "        done = jnp.zeros(shape, bool).at[-1, :, 0].set(True)\n"
        "        rets = jnp.full(shape, 7.0).at[-1, :, 1].set(1000.0)\n"
        "        return {'metrics': {'returned_episode': done, 'returned_episode_returns': rets}}\n"
        "    return train\n"
    )
    row = bench_ppo.run_peer(sys.executable, bench_ppo.PUREJAXRL_RUNNER, 3, 4, 8, 100,
                             env={"PUREJAXRL_SRC": str(tmp_path)})
    assert row["sps"] * row["train_s"] == pytest.approx(3 * 3 * 4 * 8)  # 3 seeds x 3 updates of 32
    assert row["ret"] == 7.0 and row["hangs"] == 0  # returns of finished episodes only


@pytest.mark.subprocess
def test_purejaxrl_peer_runs_ppo_rnn_on_the_installed_flax(tmp_path):
    # A stand-in for PureJaxRL's ppo_rnn.py that builds its GRU as that script does, with flax < 0.7's
    # GRUCell interface (no features; a static initialize_carry), and returns its metrics as "metric".
    from fusedrl.bench import ppo as bench_ppo

    (tmp_path / "purejaxrl").mkdir()
    (tmp_path / "purejaxrl" / "ppo_rnn.py").write_text(
        "import jax, jax.numpy as jnp, flax.linen as nn\n\n"
        "def make_train(config):\n"
        "    def train(key):\n"
        "        n = config['NUM_ENVS']\n"
        "        carry = nn.GRUCell.initialize_carry(jax.random.PRNGKey(0), (n,), 128)\n"
        "        cell = nn.GRUCell()\n"
        "        params = cell.init(key, carry, jnp.ones((n, 3)))\n"
        "        new, _ = cell.apply(params, carry, jnp.ones((n, 3)))\n"
        "        shape = (2, config['NUM_STEPS'], n)\n"
        "        done = jnp.ones(shape, bool)\n"
        "        rets = jnp.full(shape, 1.0) * new.shape[-1]\n"
        "        return {'metric': {'returned_episode': done, 'returned_episode_returns': rets}}\n"
        "    return train\n"
    )
    row = bench_ppo.run_peer(sys.executable, bench_ppo.PUREJAXRL_RUNNER, 1, 4, 8, 64,
                             env={"PUREJAXRL_SRC": str(tmp_path)}, network="gru")
    assert row["ret"] == 128.0  # the carry has ppo_rnn.py's 128 units
    assert row["sps"] * row["train_s"] == pytest.approx(2 * 4 * 8)
    with pytest.raises(RuntimeError, match="purejaxrl/ppo.py"):  # the feed-forward script is not there
        bench_ppo.run_peer(sys.executable, bench_ppo.PUREJAXRL_RUNNER, 1, 4, 8, 64,
                           env={"PUREJAXRL_SRC": str(tmp_path)})


def test_sweep_bench_measure_counts_every_agent_and_books_the_first_calls_extra_as_compile(monkeypatch):
    import importlib
    import types

    from fusedrl.bench import sweep as bench_sweep

    clock, durations = [0.0], iter([5.0, 2.0, 1.0, 3.0])  # the first call, then 3 timed calls

    def sweep(config, num_agents, keep_state, streams):
        clock[0] += next(durations)

    monkeypatch.setattr(importlib.import_module("fusedrl.sweeps"), "sweep", sweep)
    monkeypatch.setattr(bench_sweep, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    row = bench_sweep.measure(3, 2, min_time=0.0, repeats=3, streams=1)
    steps = 2 * 4 * 128  # per agent: 2 updates of 4 envs x 128 steps
    assert row["env_steps_per_agent"] == steps and row["calls"] == 3 and row["run_s"] == 2.0
    assert row["compile_s"] == 3.0  # first call minus the median call
    assert row["sps"] == 3 * steps / 2.0 and row["sps_per_agent"] == steps / 2.0
    assert row["s_per_agent_per_1m_steps"] == pytest.approx(2.0 / 3 * 1e6 / steps)


def test_sweep_bench_speedup_is_over_one_agent_of_the_same_streams():
    from fusedrl.bench.sweep import format_table

    def row(agents, streams, sps):
        return {"agents": agents, "streams": streams, "sps": sps, "compile_s": 0.0, "run_s": 1.0,
                "sps_per_agent": sps / agents, "s_per_agent_per_1m_steps": 1.0}

    rows = [row(1, 2, 100.0), row(1, 1, 200.0), row(8, 2, 500.0), row(8, 1, 400.0), row(8, 3, 900.0)]
    speedups = [line.split()[-1] for line in format_table(rows).splitlines()[1:]]
    assert speedups == ["1.0x", "1.0x", "5.0x", "2.0x", "4.5x"]  # no 1-agent row at 3: over streams=1


def test_sweep_bench_measures_a_setting_once_when_two_resolve_alike(monkeypatch, capsys):

    import jax

    from fusedrl.bench import sweep as bench_sweep

    measured = []

    def measure(num_agents, num_updates, min_time, repeats, streams=None):
        measured.append((num_agents, streams))
        return {"agents": num_agents, "streams": streams, "sps": 1.0, "compile_s": 0.0}

    monkeypatch.setattr(bench_sweep, "measure", measure)
    assert bench_sweep.main(["--agents", "1,4", "--streams", "auto,1", "--json"]) == 0
    from fusedrl.streams import resolve_streams

    auto4 = resolve_streams(None, tuple(jax.devices()), 4)
    assert measured == [(1, None)] + [(4, None)] + ([(4, 1)] if auto4 != 1 else [])
    assert len(json.loads(capsys.readouterr().out)) == len(measured)


def test_runs_bench_counts_every_seed_alternates_and_divides_by_the_single_vmap(monkeypatch, capsys):
    import types

    from fusedrl.bench import runs as bench_runs

    def compiled(config, num_seeds, every, streams):
        return types.SimpleNamespace(default_hparams=lambda: None), f"streams {streams}", 0.0

    ran = []
    walls = {"streams 2": iter([1.0, 2.0, 1.5]), "streams 1": iter([3.0, 4.0, 3.5])}

    def timed_run(run, keys, hparams, config, csv_path):
        ran.append(run)
        return next(walls[run]), 0.0

    monkeypatch.setattr(bench_runs, "num_streams", lambda num_seeds: 2)
    monkeypatch.setattr(bench_runs, "compiled_run", compiled)
    monkeypatch.setattr(bench_runs, "timed_run", timed_run)
    assert bench_runs.main(["--num-seeds", "4", "--repeats", "3", "--set", "total_timesteps=4096"]) == 0
    assert ran == ["streams 2", "streams 1", "streams 1", "streams 2", "streams 2", "streams 1"]
    out = capsys.readouterr().out
    steps = 4 * fusedrl.preset("CartPole-v1", total_timesteps=4096).env_steps  # all 4 seeds'
    assert f"streams=2  median {steps / 1.5:12,.0f} env steps/s  (2.33x the single vmap)" in out
    assert f"streams=1  median {steps / 3.5:12,.0f} env steps/s  (1.00x the single vmap)" in out


def test_presets_bench_row_reports_greedy_and_sampled_stats_across_seed_means(monkeypatch):
    import types

    import jax
    import numpy as np

    import fusedrl
    from fusedrl.bench import presets as bench_presets

    config = types.SimpleNamespace(env_steps=1000)
    result = types.SimpleNamespace(metrics={"episode_return": np.array([[1.0, 5.0], [2.0, 6.0]])})
    monkeypatch.setattr(bench_presets, "train_preset",
                        lambda env_id, seeds, seed, **o: (config, result, 1.0, 2.0, jax.random.key(0)))
    greedy_returns = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])  # [seeds, episodes]: means 2, 20
    sampled = np.array([[0.0, 0.0, 3.0], [4.0, 4.0, 4.0]])  # seed means 1, 4

    keys = {}

    def evaluate(config, result, key, num_episodes=64, *, greedy=True):
        keys[greedy] = jax.random.key_data(key)
        return greedy_returns if greedy else sampled

    monkeypatch.setattr(fusedrl, "evaluate", evaluate)
    row = bench_presets.run_preset("CartPole-v1", 2, 3)
    assert (row["mean"], row["std"], row["min_seed"], row["per_seed"]) == (11.0, 9.0, 2.0, [2.0, 20.0])
    assert (row["sampled_mean"], row["sampled_std"], row["sampled_min_seed"]) == (2.5, 1.5, 1.0)
    assert row["sampled_per_seed"] == [1.0, 4.0] and row["final_train_return"] == [5.0, 6.0]
    assert (row["train_s"], row["compile_s"], row["env_steps"]) == (2.0, 1.0, 1000)
    assert (keys[True] != keys[False]).any()  # sampled episodes have their own key


def test_hostloop_bridge_books_its_first_update_as_compile(monkeypatch):
    import types

    import numpy as np

    import fusedrl.learners
    from fusedrl.bench import hostloop

    clock = [0.0]

    def make_train(config, callback):
        def train(key):
            for i in range(config.num_updates):
                clock[0] += 10.0 if i == 0 else 1.0  # update 0 compiles
                callback({})
            return types.SimpleNamespace(metrics={"episode_return": np.full(config.num_updates, 500.0)})

        return train

    monkeypatch.setattr(fusedrl.learners, "make_train", make_train)
    monkeypatch.setattr(hostloop, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    row = hostloop.run_bridge(256 * 12)  # 12 updates of 8 envs x 32 steps
    assert (row["compile_s"], row["train_s"]) == (10.0, 11.0)
    assert row["steps_per_s"] == 256 * 11 / 11.0  # the 11 updates after the compiling one
    assert row["solve_update"] == hostloop.WINDOW - 1 and row["solve_s"] == 9.0
    assert row["times"] == [float(i) for i in range(12)]


def test_pendulum_start_angle_bins_cover_every_angle_once():
    import math

    import numpy as np

    from fusedrl.bench.pendulum_optimum import ANGLE_BINS, _bin_masks

    angle = np.array([0.0, 0.5, 1.0, 2.0, 2.6, 3.0, math.pi])  # |theta| is pi at theta = -pi
    masks = np.array(_bin_masks(angle))
    assert masks.sum(0).tolist() == [1] * len(angle)
    assert [int(np.flatnonzero(m)[0]) for m in masks.T] == [0, 0, 1, 2, 3, 3, 3]
    assert len(masks) == len(ANGLE_BINS) - 1


def test_hostloop_fused_solve_time_counts_from_the_end_of_update_0(monkeypatch):
    import types

    import numpy as np

    from fusedrl.bench import hostloop

    returns = np.array([0.0, 0.0] + [500.0] * 12)  # 14 updates: solved at update 11
    result = types.SimpleNamespace(metrics={"episode_return": returns})
    monkeypatch.setattr(hostloop, "compile_then_run", lambda fn, key: (result, 3.0, 14.0))
    row = hostloop.run_fused(256 * 14)
    assert (row["compile_s"], row["train_s"], row["steps_per_s"]) == (3.0, 14.0, 256.0)
    assert row["times"] == [float(i) for i in range(14)]  # 1 s per update, from the end of update 0
    assert (row["solve_update"], row["solve_s"]) == (11, 11.0)  # as the bridge's stamps[i] - stamps[0]


def test_hostloop_and_sweep_benches_reject_budgets_below_their_minimum(monkeypatch, capsys):
    from fusedrl.bench import hostloop
    from fusedrl.bench import sweep as bench_sweep

    def measure(*args, **kwargs):
        raise AssertionError("measured despite a bad argument")

    monkeypatch.setattr(hostloop, "measure", measure)
    monkeypatch.setattr(bench_sweep, "measure", measure)
    with pytest.raises(SystemExit):  # one update of 8 envs x 32 steps is not enough
        hostloop.main(["--total-timesteps", str(2 * 256 - 1), "--no-sb3"])
    assert "at least two updates" in capsys.readouterr().err
    for bad in (["--num-updates", "0"], ["--repeats", "0"]):
        with pytest.raises(SystemExit):
            bench_sweep.main(["--agents", "1", *bad])
        assert "must be >= 1" in capsys.readouterr().err


def test_cpu_model_names_the_processor_and_its_widest_simd_extension():
    # A preset row is bit-identical only on one processor model (XLA:CPU picks kernels by the SIMD
    # extensions, and their rounding differs), so the benchmarks print which one they ran on.
    from fusedrl.bench._timing import cpu_model, cpu_model_from

    x86 = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
           "model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse4_2 avx avx2 avx512f avx512_fp16\n")
    assert cpu_model_from(x86) == "Intel(R) Xeon(R) Processor (family 6 model 207), avx512f"
    avx2 = x86.replace(" avx512f", "")
    assert cpu_model_from(avx2) == "Intel(R) Xeon(R) Processor (family 6 model 207), avx2"
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes\nCPU part\t: 0xd0c\nModel\t: Neoverse\n"
    assert cpu_model_from(arm) == "Neoverse, asimd"
    assert isinstance(cpu_model(), str) and cpu_model()


# ---- python -m fusedrl.bench gpu ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.timeout(900)
def test_gpu_bench_smoke_prints_a_row_and_a_json_line_per_measurement():
    # The training group (probe, one agent, vmapped agents) and the env-stepping group, each in
    # its worker process, as on a GPU; CartPole only, to keep the compiles few.
    # Then the phase breakdown of the vmapped row (`--profile`), in its own worker too.
    proc = subprocess.run(
        [sys.executable, "-m", "fusedrl.bench", "gpu", "--smoke",
         "--rows", "cartpole-1,cartpole-3,envs-cartpole", "--profile", "cartpole-3",
         "--profile-updates", "1"],
        capture_output=True, text=True, timeout=800,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    assert [r["row"] for r in rows] == ["cartpole-1", "cartpole-3"] + ["envs-cartpole"] * 3 + ["cartpole-3"]
    profiled = rows.pop()
    assert profiled["kind"] == "profile" and profiled["agents"] == 3 and profiled["updates"] == 1
    assert all(profiled["seconds"][phase] > 0 for phase in ("env", "policy", "loss", "optimizer")), profiled
    assert sum(profiled["seconds"].values()) == pytest.approx(profiled["busy_seconds"])
    assert "cartpole-3 device time per phase (host events): env " in proc.stdout
    one, many = rows[:2]
    assert one["agents"] == 1 and many["agents"] == 3
    assert one["env_steps"] == 8 * 16 * 4 and many["env_steps"] == 3 * 8 * 16 * 4
    for r in rows:
        assert r["bench"] == "gpu" and r["impl"] == "fusedrl" and r["smoke"] is True and r["jax"]
        assert r["device"].split(":")[0] in ("cpu", "gpu", "cuda", "tpu") and r["device_count"] >= 1
        assert r["steps_per_s"] == pytest.approx(r["env_steps"] / r["run_s"])
        assert r["peak_bytes"] is None  # XLA:CPU keeps no memory statistics: the table says n/a
    for r in (one, many):
        assert r["wall_s"] == pytest.approx(r["compile_s"] + r["run_s"]) and math.isfinite(r["final_return"])
    assert one["probe_total_timesteps"] == 2 * 8 * 16 and one["flat"] is None
    assert [r["num_envs"] for r in rows[2:]] == [16, 64, 256]
    assert all(r["env_steps"] % (r["num_envs"] * 10) == 0 for r in rows[2:])
    table = [line.split() for line in lines if line.split()[:1] in (["cartpole-1"], ["envs-cartpole"])]
    assert table[0][:3] == ["cartpole-1", "fusedrl", "1"] and table[0][-1] == "n/a"
    assert "memory in total_timesteps, cartpole-1: n/a" in proc.stdout
    assert "cartpole-3: training at" in proc.stdout  # against the env's own stepping rate


def test_gpu_bench_configs_are_purejaxrls():
    import fusedrl
    from fusedrl.bench import gpu

    upper = {"LR": "lr", "NUM_ENVS": "num_envs", "NUM_STEPS": "num_steps",
             "TOTAL_TIMESTEPS": "total_timesteps", "UPDATE_EPOCHS": "update_epochs",
             "NUM_MINIBATCHES": "num_minibatches", "GAMMA": "gamma", "GAE_LAMBDA": "gae_lambda",
             "CLIP_EPS": "clip_eps", "ENT_COEF": "ent_coef", "VF_COEF": "vf_coef",
             "MAX_GRAD_NORM": "max_grad_norm", "ACTIVATION": "activation", "ANNEAL_LR": "anneal_lr"}
    for env, theirs in (("breakout", gpu.PUREJAXRL_MINATAR), ("cartpole", gpu.PUREJAXRL_CARTPOLE)):
        for smoke in (False, True):
            ours = gpu.ppo_config(env, smoke)
            pjx = gpu.purejaxrl_config(env, smoke)
            assert {f: getattr(ours, f) for f in upper.values()} == {upper[k]: pjx[k] for k in upper}
            assert ours.hidden_sizes == (64, 64)  # PureJaxRL's ActorCritic: 2x64 actor and critic
            assert ours.env_id.removeprefix("gymnax:") == pjx["ENV_NAME"] == theirs["ENV_NAME"]
            assert ours.normalize_obs is False and ours.clip_value_loss and ours.normalize_adv
    # examples/brax_minatar.ipynb's MinAtar PPO; purejaxrl/ppo.py's CartPole (our preset).
    minatar = gpu.PUREJAXRL_MINATAR
    assert (minatar["LR"], minatar["NUM_ENVS"], minatar["NUM_STEPS"], minatar["NUM_MINIBATCHES"],
            minatar["TOTAL_TIMESTEPS"]) == (5e-3, 64, 128, 8, 1e7)
    assert gpu.ppo_config("cartpole", False) == fusedrl.preset("CartPole-v1")
    assert gpu.row_names(gpu.FULL) == ["breakout-1", "breakout-256", "cartpole-1", "cartpole-2048",
                                       "envs-breakout", "envs-cartpole"]
    assert gpu.FULL["env_sizes"] == (4096, 65536, 262144)


def test_gpu_bench_flat_check_allows_the_per_update_metrics_and_nothing_more():
    from fusedrl.bench import gpu

    probe = {"total_timesteps": 100, "peak_bytes": 10 << 20}
    row = {"env_steps": 1000, "metric_bytes": 4000, "peak_bytes": (10 << 20) + 4000 + gpu.FLAT_SLACK_BYTES}
    assert gpu.flat_check(probe, row)["flat"] is True
    assert gpu.flat_check(probe, {**row, "peak_bytes": row["peak_bytes"] + 1})["flat"] is False
    out = gpu.flat_check(probe, {**row, "peak_bytes": None})
    assert out["flat"] is None and out["per_step_history_bytes"] == 4000


def test_gpu_bench_reports_a_group_that_outlives_its_timeout_as_error_rows():
    from fusedrl.bench import gpu

    rows = list(gpu.run_group("train", "cartpole", ["cartpole-1", "cartpole-3"], True, timeout=0.5))
    assert [r["row"] for r in rows] == ["cartpole-1", "cartpole-3"]
    assert all("killed after 0 s" in r["error"] for r in rows)


@pytest.mark.parametrize("bad, message", [
    (["--rows", "breakout-x"], "unknown or no row"),
    (["--rows", "breakout-0"], "unknown or no row"),
    (["--profile", "envs-cartpole"], "here only training rows"),
    (["--agents", "256,1"], "agent counts >= 2"),
    (["--total-timesteps", "0"], "--total-timesteps must be >= 1"),
    (["--xla-flags=xla_gpu_triton_gemm_any=True"], "each start with '--'"),
    (["--purejaxrl-rows", "breakout-1"], "needs --purejaxrl-src"),
    (["--purejaxrl-src", "/nonexistent"], "no purejaxrl/ppo.py"),
    (["--purejaxrl-src", ".", "--purejaxrl-rows", "envs-cartpole"], "unknown or no row"),
])
def test_gpu_bench_rejects_bad_arguments_before_running_anything(bad, message, capsys, tmp_path, monkeypatch):
    from fusedrl.bench import gpu

    (tmp_path / "purejaxrl").mkdir()
    (tmp_path / "purejaxrl" / "ppo.py").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        gpu.main(bad)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.subprocess
def test_purejaxrl_gpu_peer_trains_the_given_config_and_counts_every_seed(tmp_path):
    # A stand-in for PureJaxRL's make_train (metrics [updates, steps, envs]) that checks the config.
    from fusedrl.bench import gpu
    from fusedrl.bench.ppo import run_peer

    (tmp_path / "purejaxrl").mkdir()
    (tmp_path / "purejaxrl" / "ppo.py").write_text(
        "import jax.numpy as jnp\n\n"
        "def make_train(config):\n"
        "    assert config['ENV_NAME'] == 'Breakout-MinAtar' and config['LR'] == 5e-3, config\n"
        "    assert (config['NUM_ENVS'], config['NUM_STEPS'], config['TOTAL_TIMESTEPS']) == (4, 8, 100)\n"
        "    def train(key):\n"
        "        shape = (3, config['NUM_STEPS'], config['NUM_ENVS'])\n"
        "        done = jnp.zeros(shape, bool).at[-1, :, 0].set(True)\n"
        "        rets = jnp.full(shape, 7.0).at[-1, :, 1].set(1000.0)\n"
        "        return {'metrics': {'returned_episode': done, 'returned_episode_returns': rets}}\n"
        "    return train\n"
    )
    config = json.dumps(gpu.purejaxrl_config("breakout", smoke=False))
    row = run_peer(sys.executable, gpu.PEER_RUNNER, 2, 4, 8, 100,
                   env={"PUREJAXRL_SRC": str(tmp_path), "FUSEDRL_PUREJAXRL_CONFIG": config})
    assert row["sps"] * row["train_s"] == pytest.approx(2 * 3 * 4 * 8)  # 2 seeds x 3 updates of 32
    assert row["ret"] == 7.0 and row["peak_bytes"] is None and row["hangs"] == 0


def test_gpu_bench_row_names_follow_agents_bf16_and_capacity():
    from fusedrl.bench import gpu

    names = gpu.row_names(gpu.FULL, {"breakout": [256, 512], "cartpole": None}, bf16=True, capacity=True)
    assert names == ["breakout-1", "breakout-256", "breakout-256-bf16", "breakout-512", "breakout-512-bf16",
                     "capacity-breakout", "cartpole-1", "cartpole-2048", "cartpole-2048-bf16",
                     "capacity-cartpole", "envs-breakout", "envs-cartpole"]
    assert gpu.parse_row("breakout-512-bf16") == {"kind": "train", "env": "breakout", "agents": 512,
                                                  "compute_dtype": "bfloat16", "value_in_rollout": False}
    assert gpu.parse_row("capacity-cartpole")["kind"] == "capacity" and gpu.parse_row("cartpole-x") is None
    config = gpu.ppo_config("breakout", False, total_timesteps=32768, compute_dtype="bfloat16")
    assert config.compute_dtype == "bfloat16" and config.total_timesteps == 32768 and config.num_envs == 64
    assert gpu.purejaxrl_config("breakout", False, 32768)["TOTAL_TIMESTEPS"] == 32768
    assert gpu.capacity_sizes(256, 2048) == [256, 512, 1024, 2048] and gpu.capacity_sizes(3, 5) == [3]


def test_gpu_bench_knows_xlas_out_of_memory_error():
    from fusedrl.bench import gpu

    # XLA's own words (jaxlib's XlaRuntimeError on a GPU that cannot hold the program's buffers)
    assert gpu.is_out_of_memory("XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
                                "allocate 68719476736 bytes.")
    assert not gpu.is_out_of_memory("XlaRuntimeError: INTERNAL: CUDA error: an illegal memory access")


def test_gpu_bench_capacity_doubles_until_out_of_memory_and_tries_purejaxrl_at_the_same_sizes(
        monkeypatch, capsys, tmp_path):
    # Stand-ins for the worker processes: ours runs out of memory at 1024 agents, PureJaxRL at 512.
    # What is checked: the sizes tried, where each side stops, the summary and the exit code.
    from fusedrl.bench import gpu

    (tmp_path / "purejaxrl").mkdir()
    (tmp_path / "purejaxrl" / "ppo.py").write_text("")
    oom = "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1 bytes."
    ours, theirs, env_seen = [], [], []

    def run_group(kind, env, rows, smoke, timeout, env_vars=None, **extra):
        n = gpu.parse_row(rows[0])["agents"]
        ours.append(n)
        env_seen.append(env_vars)
        if n >= 1024:
            yield {"row": extra["label"], "error": oom, "out_of_memory": True}
            return
        yield {"row": extra["label"], "agents": n, "num_envs": 64, "env_steps": n * 10, "compile_s": 1.0,
               "run_s": 1.0, "wall_s": 2.0, "steps_per_s": 1e6 * n, "final_return": 1.0,
               "peak_bytes": n << 20, "total_timesteps": 10}

    def purejaxrl_row(name, env, n, smoke, args, env_vars=None, attempts=3):
        theirs.append((n, attempts))
        if n >= 512:
            return {"row": name, "impl": "purejaxrl", "agents": n, "error": oom, "out_of_memory": True}
        return {"row": name, "impl": "purejaxrl", "agents": n, "num_envs": 64, "env_steps": n * 10,
                "compile_s": 1.0, "run_s": 1.0, "wall_s": 2.0, "steps_per_s": 2e6 * n, "final_return": 1.0,
                "peak_bytes": n << 21, "total_timesteps": 10}

    monkeypatch.setattr(gpu, "run_group", run_group)
    monkeypatch.setattr(gpu, "purejaxrl_row", purejaxrl_row)
    monkeypatch.setattr(gpu, "device_info", lambda: {"device": "gpu:test", "device_count": 1})
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    code = gpu.main(["--rows", "capacity-breakout", "--agents", "256", "--purejaxrl-src", str(tmp_path),
                     "--xla-flags=--xla_gpu_triton_gemm_any=True"])
    out = capsys.readouterr().out
    assert code == 0, out  # out of memory is what a capacity row measures, not a failure
    assert ours == [256, 512, 1024] and theirs == [(256, 1), (512, 1)]
    assert all(e["XLA_PYTHON_CLIENT_MEM_FRACTION"] == gpu.CAPACITY_MEM_FRACTION for e in env_seen)
    assert all("--xla_gpu_triton_gemm_any=True" in e["XLA_FLAGS"] for e in env_seen)
    assert "capacity-breakout, fusedrl: 512 agents ran (512.00M steps/s" in out
    assert "out of device memory at 1,024 agents" in out and "out of device memory at 512 agents" in out
    assert "capacity-breakout: fusedrl/PureJaxRL agent capacity 2.0x; best aggregate steps/s 1.00x" in out
    assert "capacity-breakout    purejaxrl    512 out of device memory" in out


def test_gpu_bench_xla_flags_reach_the_worker_process():
    # An unknown flag in XLA_FLAGS makes XLA abort at start-up: the worker's error row says so.
    from fusedrl.bench import gpu

    rows = list(gpu.run_group("train", "cartpole", ["cartpole-1"], True, timeout=300,
                              env_vars={"XLA_FLAGS": "--xla_fusedrl_no_such_flag=1"}))
    assert len(rows) == 1 and "xla_fusedrl_no_such_flag" in rows[0]["error"], rows


@pytest.mark.subprocess
def test_ppo_bench_grid_alternates_persistent_workers_and_divides_by_ours(tmp_path):
    # Two stand-in workers speaking the grid's protocol (real processes, no jax): one answers 1 s per
    # run, the other 2 s; each logs the commands it got. One compile per cell each, one warm-up run
    # left out, then `repeats` runs each; the ratio is the baseline's seconds over ours.
    from fusedrl.bench import ppo as bench_ppo

    def worker(name, seconds):
        code = (f"import json, sys\nfor line in sys.stdin:\n"
                f"    open({str(tmp_path / name) + '.log'!r}, 'a').write(line)\n"
                f"    print(json.dumps({{'s': {seconds}}}), flush=True)\n")
        (tmp_path / f"{name}.py").write_text(code)
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / name}.py\n")  # ignores -c CODE
        script.chmod(0o755)
        return str(script)

    rows = bench_ppo.grid({"fusedrl": worker("ours", 1.0), "baseline": worker("base", 2.0)},
                          [(2, 4), (1, 2048)], repeats=3, transitions=4096)
    sizes = [(r["agents"], r["envs"], r["steps"], r["updates"]) for r in rows]
    assert sizes == [(2, 4, 128, 4), (1, 2048, 4, 1)]
    for row in rows:
        assert row["ratio_baseline"] == row["min_ratio_baseline"] == 2.0
        assert row["runs_s"] == {"fusedrl": [1.0] * 3, "baseline": [2.0] * 3}
    for name in ("ours", "base"):
        cmds = [json.loads(line) for line in (tmp_path / f"{name}.log").read_text().splitlines()]
        runs = [{"run": 1}] * 4  # a warm-up and 3 timed
        assert cmds == [{"cell": [2, 4, 128, 4]}] + runs + [{"cell": [1, 2048, 4, 1]}] + runs
