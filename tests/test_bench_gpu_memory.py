"""`python -m fusedrl.bench gpu`: the value-in-rollout rows (`-vr`) and the capacity judged at the
run's real length from XLA's memory analysis (`--capacity-length`), on CPU at tiny sizes."""

from __future__ import annotations

import json
import sys

import jax
import numpy as np
import pytest

from fusedrl.bench import gpu
from fusedrl.bench._timing import memory_bytes

pytestmark = pytest.mark.timeout(600)


def test_vr_rows_are_named_parsed_and_paired_with_their_base_row():
    names = gpu.row_names(gpu.FULL, {"breakout": [256], "cartpole": None}, bf16=True, value_in_rollout=True)
    assert names[:6] == ["breakout-1", "breakout-256", "breakout-256-vr", "breakout-256-bf16",
                         "breakout-256-bf16-vr", "cartpole-1"]
    assert gpu.row_names(gpu.FULL) == ["breakout-1", "breakout-256", "cartpole-1", "cartpole-2048",
                                       "envs-breakout", "envs-cartpole"]  # off by default
    spec = gpu.parse_row("breakout-256-bf16-vr")
    assert (spec["agents"], spec["compute_dtype"], spec["value_in_rollout"]) == (256, "bfloat16", True)
    assert gpu.parse_row("breakout-256")["value_in_rollout"] is False
    assert gpu.parse_row("capacity-breakout-vr")["value_in_rollout"] is True
    assert gpu.parse_row("breakout-256-vr-bf16") is None  # one spelling: -bf16 first
    assert gpu.base_row("breakout-256-bf16-vr") == gpu.base_row("breakout-256-vr") == "breakout-256"
    assert gpu.row_tuning(gpu.parse_row("cartpole-3-vr")).value_in_rollout is True
    assert gpu.row_tuning(gpu.parse_row("cartpole-3")) is None  # the trainer's own choice


@pytest.fixture(scope="module")
def cartpole_rows():
    """The smoke CartPole row at 2 agents with and without value_in_rollout, trained in this process."""
    return list(gpu.training_rows(["cartpole-2", "cartpole-2-vr"], smoke=True))


def test_a_vr_row_trains_a_program_that_values_in_the_rollout(cartpole_rows):
    off, on = cartpole_rows
    # read off the trainer each row built, not the row's name
    assert (off["row"], off["value_in_rollout"]) == ("cartpole-2", False)
    assert (on["row"], on["value_in_rollout"]) == ("cartpole-2-vr", True)
    for r in (off, on):
        assert r["agents"] == 2 and r["env_steps"] == 2 * 8 * 16 * 4 and np.isfinite(r["final_return"])
        assert r["predicted_bytes"] > 0  # XLA:CPU has a memory analysis too


def test_summary_compares_a_vr_row_with_its_base_row_and_purejaxrl():
    info = {"impl": "fusedrl", "env_id": "gymnax:Breakout-MinAtar", "wall_s": 10.0, "agents": 256}
    results = [
        {**info, "row": "breakout-256", "steps_per_s": 20e6, "peak_bytes": 10_000 << 20,
         "predicted_bytes": 9_560 << 20},
        {**info, "row": "breakout-256-vr", "steps_per_s": 25e6, "peak_bytes": 7_440 << 20,
         "predicted_bytes": 7_000 << 20},
        {**info, "row": "breakout-256", "impl": "purejaxrl", "steps_per_s": 10e6, "peak_bytes": 9_000 << 20},
    ]
    lines = gpu.summarize(results)
    assert ("breakout-256-vr: value_in_rollout on/off steps/s 1.25x, peak memory 7,440 MiB vs 10,000 MiB "
            "(-10.0 MiB per agent), XLA's memory analysis 7,000 MiB vs 9,560 MiB (-10.0 MiB per agent)"
            ) in lines, lines
    vs = "breakout-256-vr: fusedrl/PureJaxRL steps/s 2.50x (ours with value_in_rollout, PureJaxRL float32)"
    assert any(line.startswith(vs) for line in lines), lines


# ---- the capacity judged from XLA's memory analysis ------------------------------------------


@pytest.fixture(scope="module")
def predictions():
    """Smoke CartPole's program compiled (not run) at 2 and 4 agents, at two run lengths."""
    short = list(gpu.predict_rows("cartpole-2", [2, 4], True, length=512, limit=1 << 40))
    long = list(gpu.predict_rows("cartpole-2", [2, 4], True, length=512 * 1000, limit=1 << 40))
    return short, long


def test_our_predicted_memory_is_flat_in_the_run_length_but_for_the_per_update_metrics(predictions):
    short, long = predictions
    assert [r["agents"] for r in short] == [2, 4] and all(r["fits"] for r in short + long)
    for s, lg in zip(short, long, strict=True):
        m = s["memory"]
        assert m["total"] == m["argument"] + m["output"] + m["temp"] - m["alias"] == s["predicted_bytes"]
        # 4 updates against 4,000: the outputs grow by the [num_updates] metrics (4-byte numbers), and
        # the temporaries by at most as much (the loop's stacked metrics before they are returned);
        # a per-step history would add num_envs x num_steps = 128 times as much per metric.
        growth = lg["memory"]["output"] - m["output"]
        assert growth > 0 and growth % (4 * s["agents"] * (4000 - 4)) == 0
        assert growth <= 64 * 4 * s["agents"] * (4000 - 4)  # a few dozen metrics
        assert 0 <= lg["memory"]["temp"] - m["temp"] <= growth


def test_predicted_output_bytes_are_the_real_outputs_bytes():
    # The analysis against what the program returns when it runs: the outputs' bytes.
    import fusedrl

    config = gpu.ppo_config("cartpole", True)
    keys = jax.random.split(jax.random.key(0), 3)
    compiled = jax.jit(jax.vmap(fusedrl.make_train(config))).lower(keys).compile()
    memory = memory_bytes(compiled)
    out = compiled(keys)
    def nbytes(x):
        return np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                          else x).nbytes

    leaves = jax.tree.leaves(out)
    # every leaf's bytes, plus at most a pointer per leaf: the output tuple's own index table
    assert 0 <= memory["output"] - sum(nbytes(x) for x in leaves) <= 8 * len(leaves)
    assert memory["argument"] == np.asarray(jax.random.key_data(keys)).nbytes


def test_predict_rows_stop_at_the_first_size_that_does_not_fit(predictions):
    short, _ = predictions
    two, four = (r["predicted_bytes"] for r in short)
    assert two < four
    rows = list(gpu.predict_rows("cartpole-2", [2, 4, 8, 16], True, length=512, limit=(two + four) // 2))
    assert [(r["agents"], r["fits"]) for r in rows] == [(2, True), (4, False)]
    assert rows[0]["limit_bytes"] == (two + four) // 2 and rows[1]["predicted_bytes"] == four
    with pytest.raises(ValueError, match="--device-memory-mib"):  # XLA:CPU has no bytes_limit
        next(gpu.predict_rows("cartpole-2", [2], True, length=512))


@pytest.mark.subprocess
def test_purejaxrl_peer_predicts_memory_that_grows_with_the_run_length(purejaxrl_stand_in):
    # The stand-in's habit is PureJaxRL's: one [steps, envs] metric per update returned. The peer's
    # predict mode compiles it at two lengths; the outputs grow by exactly that history, and the
    # doubling stops at the first size over the limit.
    from fusedrl.bench.ppo import run_peer

    config = json.dumps(gpu.purejaxrl_config("cartpole", smoke=False))

    def predict(total, limit):
        ask = json.dumps({"agents": [2, 4, 8], "limit": limit})
        out = run_peer(sys.executable, gpu.PEER_RUNNER, 2, 4, 8, total, attempts=1,
                       env={"PUREJAXRL_SRC": str(purejaxrl_stand_in), "FUSEDRL_PUREJAXRL_CONFIG": config,
                            "FUSEDRL_PUREJAXRL_PREDICT": ask})
        return out["predict"]

    short, long = predict(32 * 10, 1 << 40), predict(32 * 1000, 1 << 40)
    assert [r["agents"] for r in short] == [2, 4, 8] and all(r["fits"] for r in short)
    for s, lg in zip(short, long, strict=True):
        assert lg["memory"]["output"] - s["memory"]["output"] == 4 * s["agents"] * 32 * (1000 - 10)
    cut = predict(32 * 1000, long[1]["memory"]["total"] - 1)  # 4 agents are one byte over
    assert [(r["agents"], r["fits"]) for r in cut] == [(2, True), (4, False)]


def test_capacity_length_predicts_both_sides_then_times_each_largest_fit(monkeypatch, capsys, tmp_path):
    # Stand-ins for the worker processes: ours fits up to 1,024 agents at the full length, PureJaxRL
    # up to 256. What is checked: the sizes compiled, which sizes are then timed (short runs), the
    # summary's labels and ratios, and that the prediction never runs with preallocation.
    (tmp_path / "purejaxrl").mkdir()
    (tmp_path / "purejaxrl" / "ppo.py").write_text("")
    calls = []

    def run_group(kind, env, rows, smoke, timeout, env_vars=None, **extra):
        calls.append((kind, rows[0], extra.get("sizes"), extra.get("length"), extra.get("total_timesteps"),
                      (env_vars or {}).get("XLA_PYTHON_CLIENT_PREALLOCATE")))
        if kind == "predict":
            for n in extra["sizes"]:
                fits = n <= 1024
                yield {"row": extra["label"], "kind": "predict", "agents": n, "num_envs": 64,
                       "total_timesteps": extra["length"], "predicted_bytes": n * (42 << 20),
                       "limit_bytes": 50_000 << 20, "fits": fits, "memory": {}}
                if not fits:
                    return
            return
        n = gpu.parse_row(rows[0])["agents"]
        yield {"row": extra["label"], "agents": n, "num_envs": 64, "env_steps": n * 32768, "compile_s": 1.0,
               "run_s": 1.0, "wall_s": 2.0, "steps_per_s": 3e7, "final_return": 1.0,
               "peak_bytes": n * (42 << 20), "total_timesteps": 32768}

    def run_purejaxrl(env, agents, smoke, args, env_vars=None, attempts=3, total_timesteps=None):
        ask = json.loads(env_vars["FUSEDRL_PUREJAXRL_PREDICT"])
        calls.append(("peer-predict", ask["agents"], total_timesteps,
                      env_vars["XLA_PYTHON_CLIENT_PREALLOCATE"]))
        return {"predict": [{"agents": n, "memory": {"total": n * (150 << 20)}, "limit_bytes": 50_000 << 20,
                             "fits": n * 150 <= 50_000} for n in ask["agents"] if n <= 512]}

    def purejaxrl_row(name, env, n, smoke, args, env_vars=None, attempts=3):
        calls.append(("peer-train", n, args.total_timesteps))
        return {"row": name, "impl": "purejaxrl", "agents": n, "num_envs": 64, "env_steps": n * 32768,
                "compile_s": 1.0, "run_s": 1.0, "wall_s": 2.0, "steps_per_s": 2e7, "final_return": 1.0,
                "peak_bytes": n * (37 << 20), "total_timesteps": 32768}

    monkeypatch.setattr(gpu, "run_group", run_group)
    monkeypatch.setattr(gpu, "run_purejaxrl", run_purejaxrl)
    monkeypatch.setattr(gpu, "purejaxrl_row", purejaxrl_row)
    monkeypatch.setattr(gpu, "device_info", lambda: {"device": "gpu:test", "device_count": 1})
    code = gpu.main(["--rows", "capacity-breakout", "--capacity-start", "256", "--capacity-max", "4096",
                     "--capacity-length", "10000000", "--total-timesteps", "32768",
                     "--purejaxrl-src", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert calls == [
        ("predict", "breakout-256", [256, 512, 1024, 2048, 4096], 10_000_000, None, "false"),
        ("peer-predict", [256, 512, 1024, 2048, 4096], 10_000_000, "false"),
        ("train", "breakout-1024", None, None, 32768, None),  # our largest fit, a short run
        ("peer-train", 256, 32768),  # theirs
    ], calls
    assert ("capacity-breakout, fusedrl: 1,024 agents predicted to fit at 10,000,000 env steps per agent "
            "(43,008 of 50,000 MiB); 2,048 would need 86,016 MiB; 30.00M steps/s at 32,768 env steps per "
            "agent (timed at a short run; its memory is flat in the run's length") in out
    assert ("capacity-breakout, purejaxrl: 256 agents predicted to fit at 10,000,000 env steps per agent "
            "(38,400 of 50,000 MiB); 512 would need 76,800 MiB; 20.00M steps/s at 32,768 env steps per agent "
            "(predicted to fit at full length, timed at a short run") in out
    assert ("capacity-breakout: fusedrl/PureJaxRL agent capacity at 10,000,000 env steps per agent 4.0x; "
            "aggregate steps/s there 1.50x") in out
