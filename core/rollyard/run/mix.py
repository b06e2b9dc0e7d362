"""A run's environments side by side: each one's config, and their rollout workers as one pool.

Every environment of a mixed run (:mod:`rollyard.environments`) is run as if it were the only
one: :func:`environment_config` gives the run's config with that environment's plugin, options
and overrides, from which its plugins are selected, its workers placed (in a venv of their own
when it needs one) and its rollout pool built, exactly as for a run of one environment.
:class:`EnvironmentPools` then deals each step's task indices to the pools, marks every sample
with its environment's label (``metadata["env"]``) and, when there are several, prefixes task
ids with it (``<label>/<id>``), so replay, evaluation and checkpoints never confuse the tasks
of two environments.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rollyard.config import RunConfig
from rollyard.environments import Environment
from rollyard.errors import ConfigError
from rollyard.options import build_options
from rollyard.plugin_options import table_of
from rollyard.plugins import PluginManager
from rollyard.run.group_draw import ENV_KEY
from rollyard.run.rollout_backend import RolloutBackend
from rollyard.types import Sample

#: (task indices, sampling seeds) of one environment's groups.
Share = tuple[list[int], list[int]]


def environment_config(config: RunConfig, env: Environment, manager: PluginManager,
                       ) -> RunConfig:
    """``config`` as a run of ``env`` alone: its plugin, its overrides of the core rollout
    options and its plugin options over the plugin's table (checked, a ConfigError naming
    the environment); ``config`` itself for a run of one plain environment."""
    if not config.rollouts and not config.mixed:
        return config
    changes: dict[str, Any] = {"rollout_plugin": env.name, "rollouts": (), **env.overrides}
    if env.options:
        cls = manager.get("rollout", env.name)
        plugin = manager.owner("rollout", env.name).name
        table, base = table_of(cls, plugin), config.options_for(cls, plugin)
        values = build_options(type(base), table, env.options,
                               source=f"[[rollout]] {env.label!r} options", base=base)
        changes["plugin_options"] = {**config.plugin_options, table: values}
    return config.replace(**changes)


class EnvironmentPools:
    """The rollout backends of a run's environments, by label, used as one pool by the loop
    and its checkpoints (``state_dicts``/``load_state_dicts``: one backend's list as before, a
    ``{label: list}`` for several)."""

    def __init__(self, pools: Mapping[str, RolloutBackend]) -> None:
        self.pools = dict(pools)
        self.mixed = len(self.pools) > 1
        self._threads = ThreadPoolExecutor(max_workers=len(self.pools))

    def collect(self, shares: Mapping[str, Share],
                step: int = 0) -> tuple[list[Sample], dict[str, float]]:
        """Each environment's groups (its pool's ``collect``, all at once) and the workers'
        metrics (``env/<label>/…`` when there are several); ``step``: the run's step."""
        results = self._each("collect", shares, step)
        samples: list[Sample] = []
        metrics: dict[str, float] = {}
        for label, (got, worker_metrics) in results.items():
            samples += self._marked(label, got)
            metrics.update(self._labelled(label, worker_metrics))
        return samples, metrics

    def evaluate(self, label: str, tasks: list[int], seeds: list[int],
                 ) -> tuple[list[Sample], list[bool], dict[str, float]]:
        """One environment's evaluation (:meth:`RolloutPool.evaluate`), its samples marked."""
        samples, solved, metrics = self.pools[label].evaluate(tasks, seeds)
        return self._marked(label, samples), solved, metrics

    def _each(self, method: str, shares: Mapping[str, Share], *extra: Any) -> dict[str, Any]:
        futures = {label: self._threads.submit(getattr(self.pools[label], method), *share,
                                               *extra)
                   for label, share in shares.items() if share[0]}
        return {label: future.result() for label, future in futures.items()}

    def _marked(self, label: str, samples: list[Sample]) -> list[Sample]:
        for sample in samples:
            sample.metadata[ENV_KEY] = label
            if self.mixed and not sample.task_id.startswith(f"{label}/"):
                sample.task_id = f"{label}/{sample.task_id}"
        return samples

    def _labelled(self, label: str, metrics: Mapping[str, float]) -> dict[str, float]:
        if not self.mixed:
            return dict(metrics)
        return {(f"env/{label}/{key[4:]}" if key.startswith("env/") else f"{key}/{label}"):
                value for key, value in metrics.items()}

    def state_dicts(self) -> Any:
        states = {label: pool.state_dicts() for label, pool in self.pools.items()}
        return states if self.mixed else next(iter(states.values()))

    def load_state_dicts(self, states: Any) -> None:
        if not self.mixed:
            next(iter(self.pools.values())).load_state_dicts(states)
            return
        if not isinstance(states, Mapping) or set(states) != set(self.pools):
            found = sorted(states) if isinstance(states, Mapping) else "one environment"
            raise ConfigError(f"the checkpoint holds the rollout state of {found}, this run "
                              f"has the environments {sorted(self.pools)}")
        for label, pool in self.pools.items():
            pool.load_state_dicts(states[label])

    def close(self, graceful: bool = True) -> None:
        """:meth:`RolloutPool.close` of every pool (``graceful``: plugins closed first)."""
        try:
            for pool in self.pools.values():
                pool.close(graceful)
        finally:
            self._threads.shutdown(wait=False)
