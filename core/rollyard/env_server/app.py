"""The env server's aiohttp application: one rollout plugin, its groups run as asyncio tasks.

Routes (all but ``GET /health`` need the bearer token, checked by middleware before routing):
``POST /v1/session`` builds the rollout worker from the trainer's spec (its engine URLs
included), ``GET /v1/tasks`` counts a split, ``POST /v1/group`` runs one group (idempotent by
its id: a repeated id waits on the same task), ``POST /v1/cancel`` cancels groups by id,
``POST /v1/evaluate``, ``GET /v1/state`` and ``POST /v1/state``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from rollyard.bearer import bearer_middleware
from rollyard.env_server.wire import MAX_BODY, open_state, sample_to_data, seal_state
from rollyard.errors import RollyardError, describe_error
from rollyard.run.faults import fault_point
from rollyard.run.rollout_workers import RolloutWorker

#: Builds the worker of a session from the trainer's spec (the server's plugin in it).
WorkerFactory = Callable[[dict[str, Any]], RolloutWorker]


class EnvServer:
    """The state behind the routes: the session's worker and its groups by id."""

    def __init__(self, make_worker: WorkerFactory, token: str | None, plugin: str) -> None:
        self.make_worker, self.token, self.plugin = make_worker, token, plugin
        self.worker: RolloutWorker | None = None
        self.session = ""
        self.groups: dict[str, asyncio.Task] = {}
        #: ids of groups a cancel reached (what tests and the trainer's log look at)
        self.cancelled: list[str] = []

    def app(self) -> web.Application:
        app = web.Application(middlewares=[bearer_middleware(self.token)],
                              client_max_size=MAX_BODY)
        app.add_routes([
            web.get("/health", self.health), web.get("/v1/hello", self.health),
            web.post("/v1/session", self.open_session),
            web.get("/v1/tasks", self.tasks), web.post("/v1/group", self.group),
            web.post("/v1/cancel", self.cancel), web.post("/v1/evaluate", self.evaluate),
            web.get("/v1/state", self.state), web.post("/v1/state", self.load_state)])
        app.on_cleanup.append(self._cleanup)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "rollout_plugin": self.plugin,
                                  "session": self.session, "running": len(self.groups)})

    def _worker(self) -> RolloutWorker:
        if self.worker is None:
            raise web.HTTPConflict(text="no session: POST /v1/session first")
        return self.worker

    async def open_session(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("session") != self.session or self.worker is None:
            await self._drop_worker()
            try:
                self.worker = await asyncio.to_thread(self.make_worker, body["spec"])
            except RollyardError as exc:
                return web.json_response({"error": describe_error(exc)}, status=400)
            self.session = str(body.get("session", ""))
        return web.json_response({"rollout_plugin": self.plugin})

    async def tasks(self, request: web.Request) -> web.Response:
        split = request.query.get("split", "train")
        return web.json_response({"count": self._worker().num_tasks(split)})

    async def group(self, request: web.Request) -> web.Response:
        body = await request.json()
        worker, group_id = self._worker(), str(body["id"])
        task = self.groups.get(group_id)
        if task is None:
            fault_point("group", int(body.get("step", 0)))  # tests: a server dying mid-step
            task = asyncio.ensure_future(worker.collect([int(body["task"])], [body.get("seed")],
                                                        int(body.get("step", 0))))
            self.groups[group_id] = task
        try:
            samples, metrics = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                return web.json_response({"cancelled": True})
            raise  # this request's client went away; the group runs on for a retry
        finally:
            if task.done():
                self.groups.pop(group_id, None)
        return web.json_response({"samples": [sample_to_data(s) for s in samples],
                                  "metrics": metrics})

    async def cancel(self, request: web.Request) -> web.Response:
        ids = [str(i) for i in (await request.json()).get("ids", [])]
        found = [i for i in ids if i in self.groups]
        for group_id in found:
            self.groups.pop(group_id).cancel()
        self.cancelled += found
        return web.json_response({"cancelled": found})

    async def evaluate(self, request: web.Request) -> web.Response:
        body = await request.json()
        samples, solved, metrics = await self._worker().evaluate(
            [int(i) for i in body["tasks"]], list(body["seeds"]))
        return web.json_response({"samples": [sample_to_data(s) for s in samples],
                                  "solved": solved, "metrics": metrics})

    async def state(self, request: web.Request) -> web.Response:
        state = self._worker().state_dict()
        return web.json_response({"state": seal_state(state, self.token or "")})

    async def load_state(self, request: web.Request) -> web.Response:
        body = await request.json()
        try:
            self._worker().load_state_dict(open_state(body["state"], self.token or ""))
        except RollyardError as exc:
            return web.json_response({"error": describe_error(exc)}, status=400)
        return web.json_response({"ok": True})

    async def _drop_worker(self) -> None:
        for task in self.groups.values():
            task.cancel()
        self.groups.clear()
        if self.worker is not None:
            await self.worker.close()
            self.worker = None

    async def _cleanup(self, app: web.Application) -> None:
        await self._drop_worker()


def worker_factory(plugin_config: dict[str, Any], model_dir: str | None = None) -> WorkerFactory:
    """Workers of the server's rollout plugin: the trainer's spec with the server's
    ``rollout_plugin`` and plugin option tables (``plugin_config``) over it, and the
    server's own copy of the model folder (``model_dir``) if it has one."""

    def make(spec: dict[str, Any]) -> RolloutWorker:
        # the worker decodes the config once (RolloutSpec.from_data), with typed fields
        return RolloutWorker({**spec, "config": {**spec["config"], **plugin_config},
                              "model_dir": model_dir or spec["model_dir"], "python": None}, 0)

    return make
