"""The inference engines a run owns: launched at start, restarted if they die, stopped at end."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager

from rollyard.interfaces import Engine, EngineHandle, Transport

log = logging.getLogger("rollyard.engines")


class EngineFleet(AbstractContextManager):
    """``count`` engines of one kind serving ``model_dir``; or none, for given URLs."""

    def __init__(self, engine: Engine | None, model_dir: str, count: int,
                 external_urls: list[str] | None = None) -> None:
        self.engine = engine
        self.model_dir = model_dir
        self.count = count
        self.external_urls = list(external_urls or [])
        self.handles: list[EngineHandle] = []

    @property
    def urls(self) -> list[str]:
        return self.external_urls or [h.url for h in self.handles]

    def start(self) -> list[str]:
        if not self.external_urls:
            assert self.engine is not None
            for _ in range(self.count):
                self.handles.append(self.engine.launch(self.model_dir, 0))
        return self.urls

    async def restart_dead(self, transport: Transport, weights_dir: str | None,
                           weight_version: int) -> list[str]:
        """Relaunch every unhealthy engine we own on its port and load the current weights.
        Returns the URLs that were restarted."""
        if self.engine is None:
            return []
        health = await transport.health()
        restarted = []
        for i, handle in enumerate(self.handles):
            if health.get(handle.url, False):
                continue
            log.warning("engine %s is not healthy; restarting it", handle.url)
            handle.stop()
            port = int(handle.url.rsplit(":", 1)[1])
            self.handles[i] = self.engine.launch(self.model_dir, port)
            restarted.append(handle.url)
        if restarted and weights_dir is not None:
            await transport.update_weights(weights_dir, weight_version)
        return restarted

    def stop(self) -> None:
        for handle in self.handles:
            try:
                handle.stop()
            except Exception as exc:  # stopping must go on for the others
                log.warning("stopping engine %s failed: %s", handle.url, exc)
        self.handles.clear()

    def __exit__(self, *exc: object) -> None:
        self.stop()
