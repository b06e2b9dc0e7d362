"""The remote :class:`~rollyard.run.rollout_backend.RolloutBackend`: rollouts on
``rollyard env-server`` processes over HTTP (``--rollout-backend remote``, docs/remote.md).

Each group is one ``POST /v1/group`` with an id of its own (``s<step>-<n>``): the groups of a
step are spread over the live servers, at most ``--env-concurrency`` on each. A server that
refuses a connection, drops one or takes longer than ``--env-timeout`` is out for the rest
of the step; its groups go to another server (or wait for it to come back). A group's first
answer is the one kept, so nothing counts twice; when the step ends, what still runs anywhere
is cancelled (``POST /v1/cancel``).
"""

from __future__ import annotations

import asyncio
import random
import ssl
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from rollyard.bearer import auth_header, read_token
from rollyard.env_server.wire import sample_from_data
from rollyard.errors import ConfigError
from rollyard.run.collect import placeholder
from rollyard.run.rollout_workers import RolloutSpec
from rollyard.types import Sample, SampleStatus, Task

T = TypeVar("T")
#: How long a preflight request may take before its server counts as unreachable.
PREFLIGHT_TIMEOUT_S = 10.0
#: How often groups with no live server look whether one came back.
REPROBE_S = 0.5


class ServerLost(Exception):
    """A server did not answer a group (connection refused or dropped, or timed out)."""


@dataclass
class Server:
    url: str
    gate: asyncio.Semaphore
    alive: bool = True
    #: group ids running there now
    running: set[str] = field(default_factory=set)


class StartLimiter:
    """At most ``rate`` group starts per second, each start delayed by up to half an
    interval of jitter (so many trainers do not hit a sandbox provider in lockstep)."""

    def __init__(self, rate: float, rng: random.Random) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.rng, self.next_at = rng, 0.0
        self.lock = asyncio.Lock()

    async def wait(self) -> None:
        if not self.interval:
            return
        async with self.lock:
            now = time.monotonic()
            at = max(now, self.next_at) + self.rng.uniform(0.0, self.interval / 2)
            self.next_at = at + self.interval
        await asyncio.sleep(max(0.0, at - now))


def server_urls(text: str | None) -> list[str]:
    urls = [u.strip().rstrip("/") for u in (text or "").split(",") if u.strip()]
    if not urls:
        raise ConfigError("--rollout-backend remote needs --env-server URL[,URL…]")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--env-server {url!r}: expected http://HOST:PORT or https://…")
    return urls


def check_servers(urls: list[str], token: str | None, plugin: str,
                  ssl_context: ssl.SSLContext | None = None) -> None:
    """The preflight, before anything starts: every server answers, takes the token and
    serves ``plugin``; a ConfigError in one line otherwise."""
    async def check() -> None:
        async with aiohttp.ClientSession(headers=auth_header(token)) as http:
            for url in urls:
                try:
                    async with http.get(f"{url}/v1/hello", ssl=ssl_context or True,
                                        timeout=aiohttp.ClientTimeout(
                                            total=PREFLIGHT_TIMEOUT_S)) as response:
                        if response.status == 401:
                            raise ConfigError(f"--env-server {url}: 401, the token of "
                                              "--env-token-file is not the server's")
                        served = (await response.json())["rollout_plugin"]
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    raise ConfigError(f"--env-server {url}: unreachable ({type(exc).__name__}"
                                      f": {exc}); is `rollyard env-server` running there?"
                                      ) from None
                if served != plugin:
                    raise ConfigError(f"--env-server {url} serves rollout {served!r}, this "
                                      f"run's --rollout-plugin is {plugin!r}")
    asyncio.run(check())


class RemoteBackend:
    """One environment's rollouts on env servers; the methods of RolloutBackend."""

    def __init__(self, spec: RolloutSpec, urls: list[str], token: str | None,
                 concurrency: int, timeout_s: float, max_starts_per_s: float = 0.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.spec, self.token, self.timeout_s = spec, token, timeout_s
        self.group_size = spec.config.group_size
        self.session = uuid.uuid4().hex
        self.ssl = ssl_context if ssl_context is not None else True
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="remote-backend")
        self._thread.start()
        self._serial = 0
        #: the groups of the collect in progress, which a close must end
        self._jobs: set[asyncio.Future] = set()
        self.closing = False
        #: groups retried on another server, and what the servers' cancels reached
        self.retries = 0
        self.cancelled: list[str] = []

        async def setup() -> None:
            self.http = aiohttp.ClientSession(headers=auth_header(token))
            self.servers = [Server(url, asyncio.Semaphore(concurrency)) for url in urls]
            self.limiter = StartLimiter(max_starts_per_s, random.Random(self.session))

        self._run(setup())
        try:
            self._run(self._open_all())
        except BaseException:
            self.close(graceful=False)
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def _call(self, server: Server, method: str, path: str, timeout: float,
                    **kwargs: Any) -> Any:
        try:
            async with self.http.request(method, server.url + path, ssl=self.ssl,
                                         timeout=aiohttp.ClientTimeout(total=timeout),
                                         **kwargs) as response:
                if response.status == 401:
                    raise ConfigError(f"env server {server.url}: 401, the token of "
                                      "--env-token-file is not the server's")
                data = await response.json(content_type=None)
                if response.status >= 400:
                    raise ConfigError(f"env server {server.url}{path}: {response.status} "
                                      f"{data.get('error', data)}")
                return data
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ServerLost(f"env server {server.url}: {type(exc).__name__}: {exc}") from exc

    async def _open(self, server: Server) -> None:
        spec = {**self.spec.to_data(), "python": None}  # the server has its own Python
        answer = await self._call(server, "POST", "/v1/session", self.timeout_s,
                                  json={"session": self.session, "spec": spec})
        wanted = self.spec.config.rollout_plugin
        if answer["rollout_plugin"] != wanted:
            raise ConfigError(f"env server {server.url} serves rollout "
                              f"{answer['rollout_plugin']!r}, this run's is {wanted!r}")

    async def _open_all(self) -> None:
        """The preflight: every server reachable, the token right, a session on each."""
        async def one(server: Server) -> None:
            try:
                await asyncio.wait_for(self._open(server), PREFLIGHT_TIMEOUT_S + self.timeout_s)
            except (ServerLost, TimeoutError) as exc:
                raise ConfigError(f"--env-server: {exc} (is `rollyard env-server` running "
                                  "there?)") from None
        await asyncio.gather(*(one(s) for s in self.servers))

    async def _revive(self) -> None:
        """Servers found dead get a new session if they answer again."""
        for server in self.servers:
            if not server.alive:
                try:
                    await self._open(server)
                    server.alive = True
                except (ServerLost, ConfigError):
                    pass

    def num_tasks(self, split: str) -> int:
        server = self.servers[0]
        return int(self._run(self._call(server, "GET", "/v1/tasks", PREFLIGHT_TIMEOUT_S,
                                        params={"split": split}))["count"])

    def collect(self, tasks: list[int], seeds: list[int | None] | None = None,
                step: int = 0) -> tuple[list[Sample], dict[str, float]]:
        """One group per task on the servers (:mod:`this module <rollyard.run.remote_backend>`
        says how a lost server's groups are retried); the mean of the groups' metrics."""
        return self._run(self._collect(tasks, seeds or [None] * len(tasks), step))

    async def _collect(self, tasks: list[int], seeds: list[int | None],
                       step: int) -> tuple[list[Sample], dict[str, float]]:
        await self._revive()
        ids = []
        for _ in tasks:
            self._serial += 1
            ids.append(f"s{step}-{self._serial}")
        jobs = [asyncio.ensure_future(self._group(gid, task, seed, step))
                for gid, task, seed in zip(ids, tasks, seeds)]
        self._jobs.update(jobs)
        try:
            results = await asyncio.gather(*jobs)
        finally:
            self._jobs.difference_update(jobs)
            running = {s.url: set(s.running) for s in self.servers}
            for job in jobs:
                job.cancel()
            await self._cancel_running(running)
        samples: list[Sample] = []
        metrics: dict[str, list[float]] = {}
        for got, group_metrics in results:
            samples += got
            for key, value in group_metrics.items():
                metrics.setdefault(key, []).append(value)
        return samples, {k: sum(v) / len(v) for k, v in metrics.items()}

    async def _group(self, group_id: str, task: int, seed: int | None,
                     step: int) -> tuple[list[Sample], dict[str, float]]:
        body = {"id": group_id, "task": task, "seed": seed, "step": step}
        deadline = time.monotonic() + 2 * self.timeout_s + PREFLIGHT_TIMEOUT_S
        tried: list[str] = []
        while not self.closing and time.monotonic() < deadline:
            live = [s for s in self.servers if s.alive]
            if not live:
                await asyncio.sleep(REPROBE_S)
                await self._revive()
                continue
            server = min(live, key=lambda s: (len(s.running), s.url in tried))
            if tried:
                self.retries += 1
            tried.append(server.url)
            async with server.gate:
                await self.limiter.wait()
                server.running.add(group_id)
                try:
                    answer = await self._call(server, "POST", "/v1/group", self.timeout_s,
                                              json=body)
                except ServerLost:
                    server.alive = False
                    continue
                finally:
                    server.running.discard(group_id)
            if answer.get("cancelled"):
                break
            return [sample_from_data(s) for s in answer["samples"]], answer["metrics"]
        reason = f"group {group_id} lost: no env server answered (tried {', '.join(tried)})"
        return [placeholder(Task(id=f"train[{task}]", prompt=""), SampleStatus.FAILED, reason,
                            group_id) for _ in range(self.group_size)], {}

    async def _cancel_running(self, running: dict[str, set[str]] | None = None) -> None:
        """Cancel, on every server, what this backend asked of it and no longer waits for
        (``running``: ids by server URL; default: what runs now), as a step ends or the run
        stops."""
        running = running or {s.url: set(s.running) for s in self.servers}

        async def one(server: Server) -> None:
            ids = sorted(running.get(server.url, ()))
            if not ids:
                return
            try:
                answer = await self._call(server, "POST", "/v1/cancel", PREFLIGHT_TIMEOUT_S,
                                          json={"ids": ids})
                self.cancelled += answer["cancelled"]
            except (ServerLost, ConfigError):
                pass
        await asyncio.gather(*(one(s) for s in self.servers))

    def evaluate(self, tasks: list[int], seeds: list[int | None],
                 ) -> tuple[list[Sample], list[bool], dict[str, float]]:
        """The evaluation on the first live server (one rollout instance keeps it
        deterministic)."""
        server = next((s for s in self.servers if s.alive), self.servers[0])
        answer = self._run(self._call(server, "POST", "/v1/evaluate", self.timeout_s,
                                      json={"tasks": tasks, "seeds": seeds}))
        return ([sample_from_data(s) for s in answer["samples"]], answer["solved"],
                answer["metrics"])

    def state_dicts(self) -> list[Any]:
        """Each server's rollout state (sealed by it), in ``--env-server`` order; None for a
        server that is down (it starts afresh on a resume)."""
        async def one(server: Server) -> Any:
            try:
                return (await self._call(server, "GET", "/v1/state", self.timeout_s))["state"]
            except ServerLost:
                server.alive = False
                return None

        async def all_states() -> list[Any]:
            await self._revive()
            return [await one(s) if s.alive else None for s in self.servers]
        return self._run(all_states())

    def load_state_dicts(self, states: list[Any]) -> None:
        if len(states) != len(self.servers):
            raise ConfigError(f"the checkpoint holds the rollout state of {len(states)} env "
                              f"servers, this run has {len(self.servers)} (--env-server)")

        async def load() -> None:
            for server, state in zip(self.servers, states):
                if state is None:
                    continue
                await self._call(server, "POST", "/v1/state", self.timeout_s,
                                 json={"state": state})
        self._run(load())

    def close(self, graceful: bool = True) -> None:
        """Cancel what still runs on the servers, end a collect in progress (its groups come
        back failed) and close the connections."""
        async def shut() -> None:
            await self._cancel_running()
            self.closing = True
            if self._jobs:  # the cancelled groups' answers, then whatever is still waiting
                _, waiting = await asyncio.wait(set(self._jobs), timeout=PREFLIGHT_TIMEOUT_S)
                for job in waiting:
                    job.cancel()
            await self.http.close()
        try:
            if hasattr(self, "http"):
                asyncio.run_coroutine_threadsafe(shut(), self.loop).result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)


def trusted_context(ca_file: str | None) -> ssl.SSLContext | None:
    """The TLS context of ``--env-ca-file``; None: the system's trust store."""
    if ca_file is None:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--env-ca-file {ca_file!r}: {exc}") from None


def remote_backend(config: Any, spec: RolloutSpec) -> RemoteBackend:
    """The RemoteBackend of a run's ``--env-server`` options (``config``: its RunConfig)."""
    return RemoteBackend(spec, server_urls(config.env_server),
                         read_token(config.env_token_file, "--env-token-file"),
                         config.env_concurrency, config.env_timeout,
                         config.env_max_starts_per_s, trusted_context(config.env_ca_file))


def preflight(config: Any) -> None:
    """:func:`check_servers` of a run's ``--env-server`` options, when it uses them."""
    if config.rollout_backend == "remote":
        check_servers(server_urls(config.env_server),
                      read_token(config.env_token_file, "--env-token-file"),
                      config.rollout_plugin, trusted_context(config.env_ca_file))
