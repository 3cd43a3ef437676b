"""The report's plots, drawn from recorded reports (tests/data/reports/,
cut from reports that were committed under docs/results/), checked as a
reader would look at them: intervals that stay above zero, tick labels
in plain numbers, one P99 axis per job, labels that do not overlap, a
legend outside the data."""

import itertools
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from prism.bench import report  # noqa: E402
from prism.common.workloads import WORKLOADS  # noqa: E402

RECORDED_DIR = Path(__file__).resolve().parent / "data" / "reports"
# Eight schedulers with a wide interval (mq-deadline's on the HDD), five
# with a bimodal one (bfq's on the SSD), a narrow y range on the cloud
# volume, and an fsync mix.
RECORDED = ["hdd-v3-v2-6.12", "ssd-model-v3-6.12", "cloud-v3-v2-6.12", "cloud-apps-6.12"]
PLAIN = re.compile(r"^\d+(\.\d+)?$")


def _load(name: str) -> dict:
    """A recorded report's runs, analysed and summarised as the report is."""
    doc = json.loads((RECORDED_DIR / f"{name}.json").read_text())
    doc["summaries"], doc["extra"] = report.analyse(doc["runs"])
    return doc


def _mixes(doc: dict):
    for s in doc["summaries"]:
        w = WORKLOADS.get(s["workload"])
        if w and w.high_job and w.low_job and w.baseline and s["job"] == w.high_job \
                and s["scheduler"] == "none":
            yield s["kernel"], s["workload"], w


def _tick_labels(axis) -> list[str]:
    lo, hi = sorted(axis.get_view_interval())
    return [t.get_text() for t, v in zip(axis.get_ticklabels(), axis.get_ticklocs(),
                                         strict=True) if lo <= v <= hi and t.get_text()]


@pytest.mark.parametrize("name", RECORDED)
def test_tradeoff_plot_reads_at_a_glance(name):
    doc = _load(name)
    mixes = list(_mixes(doc))
    assert mixes, name
    for kernel, workload, w in mixes:
        points = report.tradeoff_points(doc["runs"], doc["summaries"], kernel, workload)
        assert len(points) >= 3
        for p in points:
            assert 0 < p["x_low"] <= p["x"] <= p["x_high"], p
            # Throughput: an arithmetic interval, cut at zero (bfq on the SSD).
            assert 0 <= p["y_low"] <= p["y"] <= p["y_high"], p
        colors = report.scheduler_colors([p["scheduler"] for p in points])
        fig = report.tradeoff_figure(plt, points, w, "t", colors)
        try:
            ax = fig.axes[0]
            assert ax.get_xscale() == ax.get_yscale() == "log"
            for axis in (ax.xaxis, ax.yaxis):
                labels = _tick_labels(axis)
                assert len(labels) >= 2 and all(PLAIN.match(t) for t in labels), labels
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            frame = ax.get_window_extent(renderer)
            texts = [t for t in ax.texts if t.get_text()]
            assert sorted(t.get_text() for t in texts) == sorted(
                ["ideal"] + [p["scheduler"] for p in points])
            # The text itself (an annotation's extent takes in its leader line).
            boxes = [Text.get_window_extent(t, renderer) for t in texts]
            for a, b in itertools.combinations(boxes, 2):
                assert report._overlap(a, b) == 0, (name, a, b)
            for b in boxes:
                assert report._overlap(b, frame) == pytest.approx(b.width * b.height)
            # The ideal corner is marked: a star at the best alone tail
            # with the most bulk throughput any scheduler moved.
            best = max(p["y"] for p in points)
            assert any(list(line.get_xdata()) == [1.0] and list(line.get_ydata()) == [best]
                       and line.get_marker() == "*" for line in ax.get_lines())
        finally:
            plt.close(fig)


@pytest.mark.parametrize("name", RECORDED[:3])
def test_bars_give_each_job_its_own_p99_axis_and_stay_above_zero(name):
    doc = _load(name)
    for kernel, workload in dict.fromkeys((s["kernel"], s["workload"])
                                          for s in doc["summaries"]):
        rows = [s for s in doc["summaries"]
                if s["kernel"] == kernel and s["workload"] == workload]
        scheds = list(dict.fromkeys(s["scheduler"] for s in rows))
        jobs = list(dict.fromkeys(s["job"] for s in rows))
        for sched, job, (metric, _, scale) in itertools.product(scheds, jobs,
                                                                 report.BAR_METRICS):
            v = report.bar_values(rows, sched, job, metric, scale)
            if v is not None:
                assert 0 <= v[0] <= v[1] <= v[2], (sched, job, metric, v)
        fig = report.bars_figure(plt, rows, scheds, jobs, "t",
                                 report.scheduler_colors(scheds))
        try:
            p99 = [ax.get_label() for ax in fig.axes if ax.get_label().startswith("p99_us ")]
            assert sorted(p99) == sorted(f"p99_us {job}" for job in jobs)
            for ax in fig.axes:
                assert ax.get_xlim()[0] == 0
                assert all(PLAIN.match(t) for t in _tick_labels(ax.xaxis))
        finally:
            plt.close(fig)


def test_latency_over_time_uses_every_repetition_with_the_legend_outside():
    doc = _load("hdd-v3-v2-6.12")
    runs, reps = doc["runs"], doc["plan"]["reps"]
    band = report.series_bands(runs, "6.12", "database_backup", "prism", "database_sim",
                               "lat_series_us")
    assert band and all(n == reps for *_, n in band)
    assert all(lo <= med <= hi for _, med, lo, hi, _ in band)
    assert any(lo != hi for _, _, lo, hi, _ in band)
    scheds = list(dict.fromkeys(r["scheduler"] for r in runs))
    fig = report.latency_figure(plt, runs, "6.12", "database_backup", scheds, "database_sim",
                                "t", report.scheduler_colors(scheds))
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()]
        assert len(legends) == 1
        box = legends[0].get_window_extent(renderer)
        for ax in fig.axes:
            assert report._overlap(box, ax.get_window_extent(renderer)) == 0
            assert all(PLAIN.match(t) for t in _tick_labels(ax.yaxis))
        # The latency plotted is the one the headline uses (fio's lat),
        # and the work per second is on a linear axis from zero, where a
        # starved second shows.
        titles = [ax.get_title() for ax in fig.axes[:2]]
        assert "submission + completion" in titles[0] and "I/Os completed" in titles[1]
        assert fig.axes[1].get_yscale() == "linear" and fig.axes[1].get_ylim()[0] == 0
    finally:
        plt.close(fig)


@pytest.mark.parametrize("v,text", [(0.5, "0.5"), (2, "2"), (1.5, "1.5"), (1000, "1000"),
                                    (0.3 * 1, "0.3"), (2e6, "2000000"), (0.07, "0.07")])
def test_plain_numbers(v, text):
    assert report.plain_number(v) == text


def test_log_ticks_are_round_and_enough():
    assert report.log_ticks(0.07, 30) == [0.1, 1.0, 10.0]
    assert report.log_ticks(0.8, 1.9) == [0.8, 0.9, 1.0, 1.2, 1.5]
    assert report.log_ticks(1, 7) == [1.0, 2.0, 5.0]
