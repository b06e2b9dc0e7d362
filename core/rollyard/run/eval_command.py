"""``rollyard eval``: the evaluation of ``--eval-interval`` on any Hugging Face model folder,
with the inference engines only (one rollout worker in this process; no Ray, no trainer)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rollyard.config import RunConfig
from rollyard.errors import ConfigError
from rollyard.models.cache import cached_tiny_model
from rollyard.plugins import PluginManager
from rollyard.run.driver import PluginSelection, rollout_spec
from rollyard.run.engines import EngineFleet
from rollyard.run.eval_split import EvalPlan, run_evaluation


def evaluate_model(config: RunConfig, manager: PluginManager) -> dict[str, float]:
    """Start the engines on ``config.model`` (the default run's tiny model when unset), run
    one evaluation of the rollout's eval split and return its ``eval/*`` metrics."""
    from rollyard.isolation.placement import check_in_process
    from rollyard.run.rollout_workers import RolloutWorker

    if config.mixed:
        raise ConfigError(f"rollyard eval evaluates one environment; --rollout-plugin "
                          f"{config.rollout_plugin!r} names several (give one of them)")
    selection = PluginSelection(config, manager)
    check_in_process(manager, config.rollout_plugin, config.rollout_env, "rollyard eval",
                     selection.options("rollout", config.rollout_plugin))
    config = selection.selected_config()
    model_dir = Path(config.model) if config.model else cached_tiny_model(config.seed)
    if not (model_dir / "config.json").exists():
        raise ConfigError(f"--model {str(model_dir)!r} has no config.json (a Hugging Face "
                          "model folder is expected)")
    engine = (selection.engine(selection.options("engine", config.engine))
              if selection.engine else None)
    with EngineFleet(engine, str(model_dir), config.num_engines,
                     list(config.engine_url) or None) as fleet:
        worker = RolloutWorker(rollout_spec(config, selection, model_dir, fleet.start()), 0)

        async def evaluate() -> dict[str, float]:
            try:
                plan = EvalPlan.of(config, worker.num_tasks("eval"), "rollyard eval")
                started = time.perf_counter()
                metrics = await run_evaluation(plan, worker.evaluate, config.seed, 0)
                metrics["time/eval_s"] = time.perf_counter() - started  # engines up
                return metrics
            finally:
                await worker.close()

        return asyncio.run(evaluate())
