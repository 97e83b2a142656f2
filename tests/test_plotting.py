"""Learning curves and the progress line: episode statistics start at the first completed episode."""

import io
import time

import numpy as np
import pytest

from fusedrl.plotting import _moving_average, curve_figure, seed_statistics
from fusedrl.progress import ProgressBar


def test_moving_average_leaves_out_missing_values():
    y = np.array([[np.nan, np.nan, 1.0, 3.0, 5.0, np.nan, 7.0]])
    expected = [np.nan, np.nan, 1.0, 2.0, 3.0, 4.0, 6.0]  # window 3: the known values among the last 3
    np.testing.assert_allclose(_moving_average(y, 3)[0], expected)
    full = np.arange(10.0)[None]
    np.testing.assert_allclose(_moving_average(full, 4)[0],
                               [np.mean(full[0, max(0, i - 3):i + 1]) for i in range(10)])


def test_curve_starts_at_each_seeds_first_completed_episode():
    # MountainCar-like: returns near -200 once episodes end; before that the trainer reports 0.0
    # with episode_length 0, which must not be drawn as a return of 0.
    length = np.array([[0, 0, 200, 200, 200, 200], [0, 0, 0, 0, 200, 190]])
    ret = np.where(length > 0, -200.0, 0.0) + np.array([[0, 0, 0, 1, 2, 3], [0, 0, 0, 0, 0, 10]])
    metrics = {"episode_return": ret, "episode_length": length,
               "env_steps": np.tile(np.arange(1, 7) * 100, (2, 1))}
    fig = curve_figure(metrics, smooth=1)
    mean = fig.axes[0].lines[-1].get_ydata()
    np.testing.assert_allclose(mean, [np.nan, np.nan, -200.0, -199.0, -199.0, -193.5])
    seeds = [line.get_ydata() for line in fig.axes[0].lines[:2]]
    np.testing.assert_allclose(seeds[1], [np.nan] * 4 + [-200.0, -190.0])
    one = curve_figure({k: v[0] for k, v in metrics.items()}, smooth=2)  # one seed, smoothed
    np.testing.assert_allclose(one.axes[0].lines[-1].get_ydata(),
                               [np.nan, np.nan, -200.0, -199.5, -198.5, -197.5])


def test_a_curve_with_nothing_to_draw_says_why_over_the_runs_steps():
    # MountainCar with a short budget: no episode ends, and the plot was an empty axis from -0.04 to 0.04.
    metrics = {"episode_return": np.zeros((2, 5)), "episode_length": np.zeros((2, 5), np.int32),
               "entropy": np.full((2, 5), np.nan), "env_steps": np.tile(np.arange(1, 6) * 64, (2, 1))}
    for metric, why in [("episode_return", "no episode ended in this run"), ("entropy", "no finite entropy")]:
        ax = curve_figure(metrics, metric=metric).axes[0]
        assert [t.get_text() for t in ax.texts] == [why] and ax.get_xlim() == (0, 320)
    assert len(curve_figure({**metrics, "episode_length": np.ones((2, 5))}).axes[0].texts) == 0


@pytest.mark.parametrize(
    "rows, shown",
    [
        ([{"episode_return": 0.0, "episode_length": 0}] * 2, "return n/a"),
        ([{"episode_return": 0.0, "episode_length": 0}, {"episode_return": -180.0, "episode_length": 180}],
         "return -180.0"),
        ([{"episode_return": 10.0, "episode_length": 10}, {"episode_return": 20.0, "episode_length": 20}],
         "return 15.0"),
    ],
)
def test_progress_line_shows_returns_of_seeds_with_a_completed_episode(rows, shown):
    bar = ProgressBar(10, 64, len(rows), file=io.StringIO())
    try:
        assert bar.info(1, rows).endswith(shown), bar.info(1, rows)
    finally:
        bar.close()


def test_tensorboard_and_wandb_rows_leave_out_placeholder_episode_statistics():
    from fusedrl.loggers import _without_placeholders

    before = {"seed": 0, "env_steps": 64, "episode_return": 0.0, "episode_length": 0, "entropy": 0.69}
    assert _without_placeholders(before) == {"seed": 0, "env_steps": 64, "entropy": 0.69}
    after = {**before, "episode_return": -200.0, "episode_length": 200}
    assert _without_placeholders(after) == after


def test_progress_sps_counts_every_seed():
    bar = ProgressBar(10, 1000, 2, file=io.StringIO())
    try:
        bar.start = time.perf_counter() - 10.0  # 10 s of training
        # 10 updates x 1000 steps per seed, 2 seeds: 20k steps in 10 s.
        assert "10k steps x2  2k SPS" in bar.info(10, [{"episode_return": 1.0, "episode_length": 5}] * 2)
    finally:
        bar.close()


def test_plain_progress_always_prints_the_last_update():
    # 11 updates, one call each: lines at 2, 4, 6, 8, 10 (every ~10%), then the end, 11/11,
    # although 11 is less than 10% after 10.
    out = io.StringIO()
    bar = ProgressBar(11, 64, 1, file=out)
    try:
        for update in range(1, 12):
            bar.log(update, [{"episode_return": 1.0, "episode_length": 5}])
    finally:
        bar.close()
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("update 11/11"), lines


def test_seed_statistics_are_population_std_and_min_max_of_known_seeds():
    # Negative returns; seed 0 has no value yet at update 1.
    y = np.array([[-1.0, np.nan, -2.0], [-3.0, -5.0, -4.0]])
    mean, std, low, high = seed_statistics(y)
    np.testing.assert_allclose(mean, [-2.0, -5.0, -3.0])
    np.testing.assert_allclose(std, [1.0, 0.0, 1.0])  # over the seeds themselves (ddof 0)
    np.testing.assert_allclose(low, [-3.0, -5.0, -4.0])
    np.testing.assert_allclose(high, [-1.0, -5.0, -2.0])
    none = seed_statistics(np.full((2, 1), np.nan))
    assert all(np.isnan(x).all() for x in none)
