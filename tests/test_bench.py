"""Smoke tests of `python -m fusedrl.bench`: the dispatcher and the `envs` benchmark at tiny sizes."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import subprocess
import sys

import pytest

import fusedrl.bench
from fusedrl.bench import envs as bench_envs
from fusedrl.sweep import usable_cores

TINY = ["--num-envs", "1,4", "--steps", "5", "--repeats", "1", "--min-time", "0"]


def test_envs_bench_prints_table_and_json_rows(capsys):
    assert bench_envs.main(TINY) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()

    assert any("jax " in line and "device " in line for line in lines), out
    header = [i for i, line in enumerate(lines) if line.split()[:1] == ["num_envs"]]
    assert len(header) == 1, out
    table = [line.split() for line in lines[header[0] + 1 : header[0] + 3]]
    assert [int(row[0]) for row in table] == [1, 4], out
    for row in table:
        assert row[-1].endswith("x") and float(row[-1][:-1]) > 0, out

    rows = [json.loads(line) for line in lines if line.startswith("{")]
    assert [row["num_envs"] for row in rows] == [1, 4]
    for row in rows:
        assert row["bench"] == "envs" and row["env_id"] == "CartPole-v1"
        assert row["jax"] and row["device"]
        assert row["scan_steps"] >= 5
        for field in ("ours_steps_per_s", "gymnax_steps_per_s", "ratio", "paired_ratio"):
            assert math.isfinite(row[field]) and row[field] > 0, (field, row)
        assert len(row["ours_seconds"]) == len(row["gymnax_seconds"]) == 1
        expected = row["ours_steps_per_s"] / row["gymnax_steps_per_s"]
        assert row["ratio"] == pytest.approx(expected)


@pytest.mark.parametrize("bad", [["--num-envs", "0"], ["--num-envs", "4,x"], ["--repeats", "0"]])
def test_envs_bench_rejects_bad_arguments(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_envs.main(bad)
    assert exc.value.code == 2
    assert "positive integer" in capsys.readouterr().err


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


def test_ppo_bench_measures_our_run():
    from fusedrl.bench.ppo import run_ours

    row = run_ours(seeds=2, num_envs=4, num_steps=16, total=4 * 16 * 2)
    assert row["impl"] == "fusedrl" and row["sps"] > 0 and row["compile_s"] > 0
    assert 0 < row["ret"] <= 500


def test_ppo_bench_measures_our_sweep():
    from fusedrl.bench.ppo import run_ours_sweep

    row = run_ours_sweep(seeds=2, num_envs=4, num_steps=16, total=4 * 16 * 2)
    assert row["impl"] == "fusedrl-sweep" and row["sps"] > 0 and row["compile_s"] >= 0
    assert row["train_s"] > 0 and 0 < row["ret"] <= 500


def test_ppo_bench_peer_errors_are_clear(tmp_path):
    from fusedrl.bench import ppo as bench_ppo

    with pytest.raises(SystemExit):  # PureJaxRL runs in the peers' interpreter: it needs one
        bench_ppo.main(["--purejaxrl-src", str(tmp_path)])
    with pytest.raises(RuntimeError, match="PUREJAXRL_SRC must name a folder"):
        bench_ppo.run_peer(sys.executable, bench_ppo.PUREJAXRL_RUNNER, 1, 4, 8, 32,
                           env={"PUREJAXRL_SRC": str(tmp_path)})


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


def test_ppo_bench_rejects_zero_repeats(capsys):
    from fusedrl.bench import ppo as bench_ppo

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


def test_ppo_bench_rejects_unknown_purejaxrl_configs(capsys):
    from fusedrl.bench import ppo as bench_ppo

    for argv in (["--purejaxrl-configs", "seeds9"],  # no such config
                 ["--purejaxrl-configs", "seeds8"],  # without --purejaxrl-src: nothing to skip
                 ["--configs", "seeds8", "--peer-python", sys.executable, "--purejaxrl-src", "x",
                  "--purejaxrl-configs", "wide"]):  # not among --configs
        with pytest.raises(SystemExit):
            bench_ppo.main(argv)
        assert "--purejaxrl-configs" in capsys.readouterr().err
    for bad in ("seeds64=512", "seeds8=lots"):  # seeds64 is not among the default --configs
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
    np.testing.assert_allclose(q.max(0).reshape(40, 33), grid, atol=2e-3)
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


def test_pendulum_compare_preset_scores_the_rows_policies_and_the_controller_from_the_same_starts():
    import jax
    import numpy as np

    import fusedrl
    from fusedrl.bench.pendulum_optimum import (
        ANGLE_BINS,
        compare_preset,
        controller_returns,
        hybrid_returns,
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
    never, none_taken = hybrid_returns(solved, trainer, result, k_eval, 24, 4.0, controller_far=True)
    always, all_taken = hybrid_returns(solved, trainer, result, k_eval, 24, 4.0, controller_far=False)
    np.testing.assert_allclose(never, policy, rtol=1e-5)
    np.testing.assert_allclose(always, dp, rtol=1e-4)
    assert np.all(np.asarray(none_taken) == 0) and np.all(np.asarray(all_taken) == 1)
    far, far_taken = hybrid_returns(solved, trainer, result, k_eval, 24, 2.0, controller_far=True)
    near, near_taken = hybrid_returns(solved, trainer, result, k_eval, 24, 2.0, controller_far=False)
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


def test_pendulum_optimum_cli_prints_its_rows_and_rejects_bad_arguments(capsys):
    import re

    from fusedrl.bench import pendulum_optimum

    argv = ["--grid", "16x9", "--actions", "3", "--episodes", "64", "--json"]
    assert pendulum_optimum.main(argv) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["grid"] == "16x9" and row["episodes"] == 64
    assert row["block64_min"] == row["block64_max"] == pytest.approx(row["mean_return"])
    assert row["gamma"] is None
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
