"""Overlay of both frameworks' reward curves against training wall time (one panel per op; one
line style per seed when the benchmark ran several).

Run by vs_trl.py with the benchmark venv's Python (which has matplotlib)::

    python plot.py results.json reward_vs_time.png
"""

from __future__ import annotations

import json
import sys
from bisect import bisect_left

WINDOW_S = 5.0
COLORS = {"rollyard": "tab:blue", "trl": "tab:orange"}
LINE_STYLES = ["-", "--", ":", "-."]


def smooth(ts: list[float], ys: list[float], window: float) -> list[float]:
    """Mean of the points in the last ``window`` seconds up to each point."""
    prefix = [0.0]
    for y in ys:
        prefix.append(prefix[-1] + y)
    out = []
    for i, t in enumerate(ts):
        j = bisect_left(ts, t - window)
        out.append((prefix[i + 1] - prefix[j]) / (i + 1 - j))
    return out


def main(results_file: str, out_file: str) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = json.loads(open(results_file).read())
    runs = results["runs"]
    seeds = results.get("seeds", [0])
    ops = list(dict.fromkeys(r["op"] for r in runs))
    fig, axes = plt.subplots(1, len(ops), figsize=(6.5 * len(ops), 4.2), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for run in (r for r in runs if r["op"] == op):
            ts = [p[0] for p in run["curve"]]
            ys = [p[1] for p in run["curve"]]
            if not ts:
                continue
            color = COLORS.get(run["framework"])
            ax.plot(ts, ys, color=color, alpha=0.2, linewidth=0.6)
            label = run["framework"] + (f" (lr {run['lr']:g})" if run.get("lr") else "")
            style = "-"
            if len(seeds) > 1:
                label += f", seed {run['seed']}"
                style = LINE_STYLES[seeds.index(run["seed"]) % len(LINE_STYLES)]
            ax.plot(ts, smooth(ts, ys, WINDOW_S), color=color, linewidth=1.8, linestyle=style,
                    label=label)
        for level in results.get("thresholds", []):
            ax.axhline(level, color="grey", linestyle=":", linewidth=0.8)
        ax.set_title(f"toy {op}: {results['groups']} prompts x {results['group_size']}, "
                     f"{results['max_new_tokens']} new tokens")
        ax.set_xlabel("training wall time (s)")
        ax.set_ylabel(f"mean reward (char-f1 + exact-match, max {results['reward_max']:g})")
        ax.set_xlim(0, results["budget"])
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left")
    fig.suptitle(f"rollyard vs TRL GRPOTrainer, {results['budget']:g} s each "
                 f"(thin: per step; thick: {WINDOW_S:g} s moving mean)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_file, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
