"""One line per step on the console: step, mean reward, tokens/s, step time."""

from __future__ import annotations

from rich.console import Console
from rollyard import hookimpl

console = Console(stderr=False, highlight=False)


@hookimpl
def on_run_start(config, run_dir):
    console.print(f"[bold]rollyard[/] run [cyan]{run_dir}[/] rollout={config['rollout_plugin']} "
                  f"engine={config.get('engine')} tp={config['train_tp']} dp={config['train_dp']}")


def step_line(step: int, metrics: dict[str, float]) -> str:
    """The console line of a step. A step that trained on nothing says ``skipped`` and why;
    a value a step lacks is left out, never shown as ``nan``."""
    trained = metrics.get("train/num_samples_trained", 0) > 0
    if step == 0 and "eval/pass@1" in metrics:  # the eval of the untrained model
        return (f"step   0  before training  eval {metrics['eval/reward']:.3f} "
                f"pass@1 {metrics['eval/pass@1']:.2f}")
    if not trained:
        outcome = "skipped: all groups had equal rewards"
    elif "train/loss" in metrics:
        outcome = f"loss {metrics['train/loss']:+.4f}"
    else:
        outcome = "trained"
    evaluated = (f"  eval {metrics['eval/reward']:.3f} pass@1 {metrics['eval/pass@1']:.2f}"
                 if "eval/reward" in metrics else "")
    return (f"step {step:>3}  reward {metrics.get('reward/mean', 0.0):.3f}  "
            f"tokens/s {metrics.get('perf/tokens_per_s', 0.0):7.1f}  "
            f"step {metrics.get('time/step_s', 0.0):5.1f}s  "
            f"failed {metrics.get('samples/failed_rate', 0.0):.2f}  {outcome}{evaluated}")


@hookimpl
def on_step_end(step, metrics):
    console.print(step_line(step, metrics), soft_wrap=True)  # one line, however narrow


@hookimpl
def on_run_end(run_dir, status):
    # the error itself is the command's own last line (``error: ...``), not repeated here
    style = "green" if status == "completed" else "red"
    console.print(f"[{style}]run {status}[/]: {run_dir}")
