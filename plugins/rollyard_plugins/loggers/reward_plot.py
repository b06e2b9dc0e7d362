"""``reward.png``: mean reward per step, drawn when the run ends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rollyard import hookimpl

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_rewards(metrics_file: Path, out_file: Path) -> Path | None:
    """Plot reward/mean against step from a metrics.jsonl; None when there is nothing to plot."""
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    points = [(r["step"], r["reward/mean"]) for r in rows if "reward/mean" in r]
    if not points:
        return None
    import matplotlib.pyplot as plt

    fig = reward_figure(points, out_file.parent.name)
    fig.savefig(out_file, dpi=100)
    plt.close(fig)
    return out_file


def reward_figure(points: list[tuple[int, float]], title: str) -> Figure:
    """The reward curve of ``(step, mean reward)`` points. Steps are whole numbers, so the
    step axis has integer ticks only (a three-step run would otherwise show step 1.25)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


@hookimpl
def on_run_end(run_dir, status, error):
    metrics = Path(run_dir) / "metrics.jsonl"
    if metrics.exists():
        plot_rewards(metrics, Path(run_dir) / "reward.png")
