"""The README's Python examples run as written, in order, in one namespace (as a reader pastes
them), with the training budget shrunk so that the test stays short."""

import pathlib
import re

import chex
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
# (text in the README, what the test runs instead): a smaller budget, nothing else.
SHRINK = [("total_timesteps=500_000", "total_timesteps=2048")]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_python_examples_run_in_order():
    blocks = python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 2, "the README's Python examples were not found"
    for old, new in SHRINK:
        assert sum(b.count(old) for b in blocks) == 1, f"the README no longer has {old!r}: update SHRINK"
        blocks = [b.replace(old, new) for b in blocks]
    ns: dict = {}
    exec(compile(blocks[0], "README.md, first example", "exec"), ns)
    # What the comments say each line gives.
    num_updates = ns["config"].num_updates
    assert ns["result"].metrics["episode_return"].shape == (num_updates,)
    assert ns["results"].metrics["episode_return"].shape == (8, num_updates)
    assert ns["swept"].metrics["episode_return"].shape == (8, num_updates)
    np.testing.assert_allclose(  # "the same 8 seeds"
        ns["swept"].metrics["policy_loss"], ns["results"].metrics["policy_loss"], rtol=1e-4, atol=1e-6)
    assert np.shape(ns["returns"]) == (64,)
    assert ns["acrobot"].env_id == "Acrobot-v1"
    for block in blocks[1:]:
        exec(compile(block, "README.md, a later example", "exec"), ns)
    lrs = ns["results"].metrics["learning_rate"][:, 0]  # three learning rates
    np.testing.assert_allclose(lrs, [1e-4, 3e-4, 1e-3], rtol=1e-6)
    # Evaluation during training: four pieces, a greedy mean after each, ending where one call ends,
    # with the agent of the first example's `train(key)` call, bit for bit.
    assert len(ns["curve"]) == 4 and all(np.isfinite(ns["curve"]))
    assert int(ns["state"].update) == num_updates == 4 * (num_updates // 4)
    chex.assert_trees_all_equal(ns["state"].params, ns["result"].params)
