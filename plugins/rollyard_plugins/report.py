"""``rollyard report RUN_DIR [RUN_DIR …]``: a summary table of finished (or running) runs in the
terminal and PNG plots that overlay them, read from their metrics.jsonl.

Plots (one PNG each, written only when some run has the metric): reward raw and smoothed
against step and against training time, eval reward, policy entropy, response length, failure
rate, and step time by phase.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rollyard import Command, hookimpl
from rollyard.errors import ConfigError
from rollyard.options import add_spec_arguments, between, option, option_specs, options_from_args

#: Step-time phases, as metrics.jsonl keys, and their labels.
PHASES = {"time/rollout_s": "rollout", "time/train_s": "train",
          "time/weight_sync_s": "weight sync", "time/eval_s": "eval",
          "time/checkpoint_s": "checkpoint"}


@dataclass(frozen=True)
class ReportOptions:
    """The options of ``rollyard report``."""

    out: str | None = option(None, metavar="DIR",
                             help="folder for the PNG plots (default: RUN_DIR/report for one "
                                  "run, ./report for several)")
    smoothing: float = option(0.8, check=between(0.0, 0.99),
                              help="weight of the past in the smoothed reward curve "
                                   "(exponential moving average; 0: raw)")


@dataclass
class RunRecord:
    """One run folder's metrics rows, in step order."""

    path: Path
    rows: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return self.path.name

    def series(self, key: str, x: str = "step") -> tuple[list[float], list[float]]:
        """``(xs, ys)`` of the rows that have both keys."""
        points = [(row[x], row[key]) for row in self.rows if key in row and x in row]
        return [p[0] for p in points], [p[1] for p in points]

    def last(self, key: str) -> float | None:
        values = self.series(key)[1]
        return values[-1] if values else None

    def environments(self) -> list[str]:
        """The labels of a mixed run's environments (from ``samples/count/<env>``)."""
        prefix = "samples/count/"
        return sorted({key[len(prefix):] for row in self.rows for key in row
                       if key.startswith(prefix)})


def load_run(path: str | Path) -> RunRecord:
    """A run folder's metrics; a ConfigError naming the folder when it is not a run."""
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"rollyard report: {str(folder)!r}: no such folder")
    metrics = folder / "metrics.jsonl"
    if not metrics.is_file():
        raise ConfigError(f"rollyard report: {str(folder)!r} is not a run folder (it has no "
                          "metrics.jsonl; pass the folder `rollyard train` wrote, "
                          "<runs-dir>/<name>)")
    rows = []
    lines = metrics.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break  # a last line cut short by a kill
            raise ConfigError(f"rollyard report: {metrics}:{number} is not valid JSON") from None
    if not rows:
        raise ConfigError(f"rollyard report: {str(folder)!r} has no finished step yet "
                          "(metrics.jsonl is empty)")
    return RunRecord(folder, rows)


def smooth(values: list[float], weight: float) -> list[float]:
    """Exponential moving average with bias correction (TensorBoard's smoothing)."""
    out, average = [], 0.0
    for i, value in enumerate(values, 1):
        average = weight * average + (1 - weight) * value
        out.append(average / (1 - weight**i) if weight else value)
    return out


def elapsed(run: RunRecord) -> list[float]:
    """Training seconds at each row: ``time/elapsed_s``, or the summed step times of runs
    recorded before it existed."""
    if all("time/elapsed_s" in row for row in run.rows):
        return [row["time/elapsed_s"] for row in run.rows]
    total, out = 0.0, []
    for row in run.rows:
        total += row.get("time/step_s", 0.0)
        out.append(total)
    return out


def summary_table(runs: list[RunRecord], smoothing: float) -> Any:
    """The terminal summary: one row per run."""
    from rich import box
    from rich.table import Table

    table = Table(title="rollyard report", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("run", "steps", "time", "first", "last", "smoothed", "eval", "pass@1",
                   "failed", "step"):
        if column == "run":
            table.add_column(column, overflow="fold")
        else:
            table.add_column(column, justify="right")
    table.caption = ("first, last: the first and last step's mean reward; smoothed: its "
                     "moving average at the end; eval, pass@1: the last evaluation; failed: "
                     "mean share of samples failed or aborted; step: mean seconds per step")
    for run in runs:
        rewards = run.series("reward/mean")[1]
        failed = [row.get("samples/failed_rate", 0.0) + row.get("samples/aborted_rate", 0.0)
                  for row in run.rows]
        steps = [row.get("time/step_s", 0.0) for row in run.rows]
        table.add_row(
            run.label, str(run.rows[-1]["step"]), f"{elapsed(run)[-1]:.0f}s",
            _number(rewards[0] if rewards else None), _number(run.last("reward/mean")),
            f"{smooth(rewards, smoothing)[-1]:.3f}" if rewards else "–",
            _number(run.last("eval/reward")), _number(run.last("eval/pass@1")),
            f"{sum(failed) / len(failed):.1%}", f"{sum(steps) / len(steps):.2f}s")
    return table


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def write_plots(runs: list[RunRecord], out: Path, smoothing: float) -> list[Path]:
    """The overlay plots, as PNG files in ``out``; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out.mkdir(parents=True, exist_ok=True)
    written = []

    def figure(name: str, title: str, xlabel: str, ylabel: str, draw) -> None:
        fig, ax = plt.subplots(figsize=(7, 4))
        if not draw(ax):
            plt.close(fig)
            return
        if xlabel == "step":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append(out / name)

    def rewards_against(xs_of) -> Any:
        def draw(ax) -> bool:
            for i, run in enumerate(runs):
                xs, ys = xs_of(run), [row.get("reward/mean") for row in run.rows]
                points = [(x, y) for x, y in zip(xs, ys) if y is not None]
                if not points:
                    continue
                color = f"C{i}"
                ax.plot([p[0] for p in points], [p[1] for p in points], color=color,
                        alpha=0.3, linewidth=1, label=f"{run.label} (raw)")
                ax.plot([p[0] for p in points], smooth([p[1] for p in points], smoothing),
                        color=color, label=f"{run.label} (smoothed)")
            return bool(ax.lines)
        return draw

    def lines(key: str, scale: float = 1.0) -> Any:
        def draw(ax) -> bool:
            for i, run in enumerate(runs):
                xs, ys = run.series(key)
                if xs:
                    ax.plot(xs, [y * scale for y in ys], marker="o" if len(xs) < 30 else None,
                            color=f"C{i}", label=run.label)
            return bool(ax.lines)
        return draw

    def failure(ax) -> bool:
        for i, run in enumerate(runs):
            ax.plot([row["step"] for row in run.rows],
                    [row.get("samples/failed_rate", 0.0) + row.get("samples/aborted_rate", 0.0)
                     for row in run.rows], color=f"C{i}", label=run.label)
        return True

    def phases(ax) -> bool:
        styles = ["-", "--", ":", "-.", (0, (1, 3))]
        for i, run in enumerate(runs):
            for style, (key, phase) in zip(styles, PHASES.items()):
                xs, ys = run.series(key)
                if xs and any(ys):
                    ax.plot(xs, ys, color=f"C{i}", linestyle=style,
                            label=f"{run.label}: {phase}")
        return bool(ax.lines)

    def by_environment(ax) -> bool:
        styles = ["-", "--", ":", "-."]
        for i, run in enumerate(runs):
            for j, env in enumerate(run.environments()):
                xs, ys = run.series(f"reward/mean/{env}")
                if xs:
                    ax.plot(xs, smooth(ys, smoothing), color=f"C{i}",
                            linestyle=styles[j % len(styles)], label=f"{run.label}: {env}")
        return bool(ax.lines)

    figure("reward_step.png", "reward (raw and smoothed)", "step", "mean reward",
           rewards_against(lambda run: [row["step"] for row in run.rows]))
    figure("reward_time.png", "reward against training time", "training time (s)",
           "mean reward", rewards_against(elapsed))
    figure("eval_reward.png", "eval reward", "step", "eval reward", lines("eval/reward"))
    figure("entropy.png", "policy entropy", "step", "entropy (nats/token)",
           lines("train/entropy"))
    figure("response_length.png", "response length", "step", "tokens",
           lines("response/len_mean"))
    figure("reward_env.png", "reward by environment (smoothed)", "step", "mean reward",
           by_environment)
    figure("failure_rate.png", "failed or aborted samples", "step", "share", failure)
    figure("step_time.png", "step time by phase", "step", "seconds", phases)
    return written


class ReportCommand(Command):
    """Summarises and plots run folders."""

    name = "report"
    help = "summary table and overlay plots (PNG) of one or more run folders"
    Options = ReportOptions

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                            help="run folders written by `rollyard train`")
        add_spec_arguments(parser, option_specs(ReportOptions, ""), dest_is_name=True)

    def run(self, args: SimpleNamespace) -> int:
        from rich.console import Console

        options = options_from_args(ReportOptions, args)
        runs = [load_run(path) for path in args.runs]
        out = Path(options.out) if options.out else (
            runs[0].path / "report" if len(runs) == 1 else Path("report"))
        console = Console(highlight=False)
        console.print(summary_table(runs, options.smoothing))
        for path in write_plots(runs, out, options.smoothing):
            console.print(f"wrote {path}")
        return 0


@hookimpl
def register_commands(register):
    register(ReportCommand)
