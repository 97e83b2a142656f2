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


# ------------------------------------------------------------- IQM and its bootstrap interval
def _iqm_reference(values):
    """rliable's published definition: the mean of the middle 50% (trim 25% at each end, rounded down)."""
    v = np.sort(np.asarray(values, np.float64).ravel())
    cut = int(0.25 * len(v))
    return v[cut:len(v) - cut].mean()


def test_iqm_is_the_mean_of_the_middle_half():
    from fusedrl.plotting import iqm

    assert iqm(np.arange(1.0, 9.0)) == 4.5  # 1..8: the mean of 3, 4, 5, 6
    rng = np.random.default_rng(0)
    for n in range(1, 10):
        scores = rng.standard_cauchy((n, 7))
        np.testing.assert_allclose(iqm(scores, axis=0), [_iqm_reference(c) for c in scores.T], rtol=1e-12)


def test_bootstrap_interval_is_the_percentile_interval_of_every_resample():
    # 4 runs of one task: the 4**4 resamples are equally likely; the interval's ends are the 2.5th and
    # 97.5th percentiles of their IQMs (up to the bootstrap's sampling: between the 1.5th and 3.5th).
    import itertools

    from fusedrl.plotting import stratified_bootstrap_interval

    scores = np.array([3.0, 10.0, 11.0, 40.0])
    exact = [_iqm_reference(scores[list(i)]) for i in itertools.product(range(4), repeat=4)]
    low, high = stratified_bootstrap_interval(scores[:, None, None], reps=20000)
    assert np.percentile(exact, 1.5) <= low[0] <= np.percentile(exact, 3.5), (low, np.percentile(exact, 2.5))
    assert np.percentile(exact, 96.5) <= high[0] <= np.percentile(exact, 98.5), high


def test_bootstrap_resamples_runs_within_each_task():
    # Stratified: every resample keeps 3 runs of each task, so the IQM of (0, 0, 0, 10, 10, 10) is 5
    # in all of them; resampling the 6 scores as one pool would spread it.
    from fusedrl.plotting import stratified_bootstrap_interval

    scores = np.array([[0.0, 10.0]] * 3)[:, :, None]  # [runs, tasks, points]
    low, high = stratified_bootstrap_interval(scores, reps=500)
    assert low[0] == high[0] == 5.0


def test_the_band_never_leaves_the_range_the_seeds_reached():
    from fusedrl.plotting import iqm_band

    rng = np.random.default_rng(1)
    y = np.clip(rng.standard_cauchy((3, 300)) * 50 + 250, 0, 500)  # heavy tails, few seeds
    y[0, :5] = np.nan  # seed 0 has no episode yet
    center, low, high = iqm_band(y, reps=500)
    lo_seen, hi_seen = np.nanmin(y, 0), np.nanmax(y, 0)
    assert np.all(lo_seen <= low) and np.all(high <= hi_seen)
    assert np.all(low <= center) and np.all(center <= high)
    np.testing.assert_allclose(center[5:], [_iqm_reference(c) for c in y[:, 5:].T])
    np.testing.assert_allclose(center[:5], y[1:, :5].mean(0))  # the two seeds with values


def _write_run(path, metrics, env_id="CartPole-v1"):
    """A run folder as `fusedrl train` writes its metrics.csv (the library's own writer)."""
    import json

    from fusedrl.loggers import format_rows, metrics_to_rows

    path.mkdir(parents=True)
    (path / "metrics.csv").write_text(format_rows(metrics_to_rows(metrics), header=True))
    (path / "config.json").write_text(json.dumps({"algo": "ppo", "ppo": {"env_id": env_id}}))


def _metrics(seeds, updates, seed=0):
    from fusedrl.train.ppo import METRIC_NAMES

    rng = np.random.default_rng(seed)
    out = {name: rng.normal(size=(seeds, updates)) for name in METRIC_NAMES}
    out["episode_length"] = np.where(np.arange(updates) < 2, 0, 20 + np.arange(updates)) * np.ones((seeds, 1))
    out["episode_return"] = np.where(out["episode_length"] > 0, rng.uniform(0, 500, (seeds, updates)), 0.0)
    out["env_steps"] = np.tile((np.arange(updates) + 1) * 64, (seeds, 1))
    return out


def test_plot_command_writes_a_png_of_one_run_and_of_several(tmp_path, capsys):
    from fusedrl.cli import main
    from fusedrl.plot_cli import read_run_metrics

    metrics = _metrics(4, 30)
    _write_run(tmp_path / "a", metrics)
    _write_run(tmp_path / "b", _metrics(1, 20, seed=1))
    read = read_run_metrics(tmp_path / "a")  # what the figure draws: the run's metrics, placeholders NaN
    np.testing.assert_allclose(read["episode_return"][:, 2:], metrics["episode_return"][:, 2:])
    assert np.isnan(read["episode_return"][:, :2]).all()
    for runs, out in ([["a"], "one.png"], [["a", "b"], "two.png"]):
        assert main(["plot", *(str(tmp_path / r) for r in runs), "--out", str(tmp_path / out)]) == 0
        assert (tmp_path / out).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("what, message", [
    ("missing", "no run folder"), ("empty", "has no metrics.csv"), ("sweep", "is a sweep folder"),
])
def test_plot_command_names_what_is_not_a_run(tmp_path, capsys, what, message):
    from fusedrl.cli import main

    run = tmp_path / "run"
    if what != "missing":
        run.mkdir()
    if what == "sweep":
        (run / "sweep.json").write_text("{}")
    assert main(["plot", str(run), "--out", str(tmp_path / "x.png")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_legend_sits_outside_the_axes():
    metrics = _metrics(3, 40)
    fig = curve_figure(metrics)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.x0 >= ax.get_window_extent(renderer).x1  # right of the axes: it covers no curve
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["seed 0", "seed 1", "seed 2"] and labels[-1] == "IQM of 3 seeds", labels


def test_the_interval_is_drawn_above_the_seed_lines():
    """16 seed lines under the band would hide it (a filled area's default zorder is below a line's)."""
    fig = curve_figure(_metrics(4, 40))
    ax = fig.axes[0]
    band = next(c for c in ax.collections if "interval" in c.get_label())
    seeds = [line for line in ax.get_lines() if line.get_label().startswith("seed")]
    iqm_line = next(line for line in ax.get_lines() if line.get_label().startswith("IQM"))
    assert seeds and all(band.get_zorder() > line.get_zorder() for line in seeds)
    assert iqm_line.get_zorder() > band.get_zorder()
