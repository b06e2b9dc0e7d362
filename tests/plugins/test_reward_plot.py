"""The reward-plot logger: ``reward.png`` from metrics.jsonl, with whole-number steps."""

from __future__ import annotations

import json
from pathlib import Path

from rollyard_plugins.loggers.reward_plot import on_run_end, plot_rewards, reward_figure


def test_the_step_axis_has_integer_ticks_only() -> None:
    import matplotlib.pyplot as plt

    fig = reward_figure([(1, 0.1), (2, 0.4), (3, 0.5)], "run")
    try:
        ax = fig.axes[0]
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert len(ticks) >= 2
        assert all(float(t).is_integer() for t in ticks), ticks
    finally:
        plt.close(fig)


def test_run_end_draws_reward_png_from_the_metrics(tmp_path: Path) -> None:
    rows = [{"step": 1, "reward/mean": 0.25}, {"step": 2, "loss": 1.0},
            {"step": 2, "reward/mean": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    on_run_end(run_dir=str(tmp_path), status="completed", error=None)
    assert (tmp_path / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nothing_is_drawn_without_a_reward(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    assert plot_rewards(metrics, tmp_path / "reward.png") is None
    assert not (tmp_path / "reward.png").exists()
