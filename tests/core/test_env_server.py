"""The env server and the remote backend in this process: real aiohttp servers (on their own
event loop thread) running the toy rollout against the embedded engine; no Ray."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from rollyard.config import RunConfig
from rollyard.env_server.app import EnvServer, worker_factory
from rollyard.errors import ConfigError
from rollyard.plugins import PluginManager
from rollyard.run.remote_backend import RemoteBackend, check_servers
from rollyard.run.rollout_workers import RolloutSpec

TOKEN = "s3cret-token"


class Served:
    """An aiohttp application on 127.0.0.1 in a thread of its own, until ``stop``."""

    def __init__(self, app: web.Application, context: ssl.SSLContext | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        async def start() -> int:
            self.runner = web.AppRunner(app, shutdown_timeout=1.0)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=context)
            await site.start()
            return site._server.sockets[0].getsockname()[1]

        port = asyncio.run_coroutine_threadsafe(start(), self.loop).result()
        self.url = f"{'https' if context else 'http'}://127.0.0.1:{port}"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


def toy_server(token: str | None = TOKEN) -> tuple[EnvServer, Served]:
    server = EnvServer(worker_factory({"rollout_plugin": "toy"}), token, "toy")
    return server, Served(server.app())


@pytest.fixture(scope="module")
def spec(tiny_model_dir: Path, embedded_engine: Any) -> RolloutSpec:
    manager = PluginManager()
    manager.load_for_run([("rollout", "toy")])
    config = RunConfig.from_data({"group_size": 2, "max_new_tokens": 4},
                                 manager.option_tables())
    toy = manager.get("rollout", "toy")
    weights = toy.reward_weights(config.options_for(toy, manager.owner("rollout", "toy").name))
    return RolloutSpec(config=config, reward_weights=dict(weights),
                       model_dir=str(tiny_model_dir), engine_urls=[embedded_engine.url])


@pytest.fixture(scope="module")
def two_servers() -> Iterator[list[tuple[EnvServer, Served]]]:
    servers = [toy_server(), toy_server()]
    yield servers
    for _, served in servers:
        served.stop()


def backend(spec: RolloutSpec, urls: list[str], token: str = TOKEN, timeout: float = 60.0,
            **kwargs: Any) -> RemoteBackend:
    return RemoteBackend(spec, urls, token, concurrency=4, timeout_s=timeout, **kwargs)


async def _status(url: str, method: str, headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.request(method, url, headers=headers or {}, json={}) as response:
            return response.status


def test_every_route_but_health_needs_the_token(two_servers) -> None:
    url = two_servers[0][1].url
    assert asyncio.run(_status(f"{url}/health", "GET")) == 200
    for method, path in [("GET", "/v1/hello"), ("POST", "/v1/group"), ("POST", "/v1/session"),
                         ("GET", "/v1/state"), ("POST", "/nowhere")]:
        assert asyncio.run(_status(url + path, method)) == 401, path
        assert asyncio.run(_status(url + path, method,
                                   {"Authorization": "Bearer wrong"})) == 401, path
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert asyncio.run(_status(f"{url}/v1/hello", "GET", good)) == 200
    assert asyncio.run(_status(f"{url}/nowhere", "GET", good)) == 404


def test_preflight_refuses_a_wrong_token_and_an_unreachable_server(two_servers) -> None:
    url = two_servers[0][1].url
    check_servers([url], TOKEN, "toy")
    with pytest.raises(ConfigError, match="401, the token of --env-token-file"):
        check_servers([url], "wrong", "toy")
    with pytest.raises(ConfigError, match="unreachable"):
        check_servers(["http://127.0.0.1:9"], TOKEN, "toy")
    with pytest.raises(ConfigError, match="serves rollout 'toy'"):
        check_servers([url], TOKEN, "codegolf")


def test_groups_spread_over_two_servers_and_state_goes_over_the_wire(spec, two_servers
                                                                     ) -> None:
    remote = backend(spec, [served.url for _, served in two_servers])
    try:
        assert remote.num_tasks("train") > 8
        samples, _ = remote.collect(list(range(8)), list(range(8)), step=1)
        assert len(samples) == 16 and all(s.usable for s in samples)
        assert len({s.group_id for s in samples}) == 8 and remote.retries == 0
        states = remote.state_dicts()
        assert len(states) == 2 and all(isinstance(s, str) for s in states)
        remote.load_state_dicts(states)
        with pytest.raises(ConfigError, match="not sealed by an env server"):
            remote.load_state_dicts(["00:" + states[1].partition(":")[2], states[1]])
    finally:
        remote.close()


def test_a_hung_server_groups_go_to_the_other(spec, two_servers) -> None:
    """A server that takes sessions but never answers a group: after --env-timeout its
    groups run on the live one, each exactly once."""
    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"rollout_plugin": "toy"})

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(600)
        raise AssertionError

    app = web.Application()
    app.add_routes([web.post("/v1/session", hello), web.post("/v1/group", hang),
                    web.post("/v1/cancel", hello)])
    hung = Served(app)
    remote = backend(spec, [hung.url, two_servers[0][1].url], timeout=2.0)
    try:
        samples, _ = remote.collect(list(range(4)), [1, 2, 3, 4], step=1)
        assert len(samples) == 8 and all(s.usable for s in samples)
        assert len({s.group_id for s in samples}) == 4 and remote.retries >= 1
    finally:
        remote.close()
        hung.stop()


def test_closing_cancels_the_groups_running_on_the_server(spec, monkeypatch) -> None:
    server, served = toy_server()
    monkeypatch.setenv("ROLLYARD_FAULT", "stall:rollout@7")  # the groups of step 7 stall
    remote = backend(spec, [served.url])
    try:
        collecting = threading.Thread(target=remote.collect, args=([0, 1], [0, 1], 7))
        collecting.start()
        deadline = time.monotonic() + 30
        while len(server.groups) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(server.groups) == 2
        remote.close(graceful=False)
        collecting.join(30)
        assert not collecting.is_alive()
        assert sorted(server.cancelled) == ["s7-1", "s7-2"] and not server.groups
    finally:
        served.stop()


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls_with_a_self_signed_certificate(spec, tmp_path) -> None:
    from rollyard.env_server.command import tls_context

    cert, key = _self_signed(tmp_path)
    server = EnvServer(worker_factory({"rollout_plugin": "toy"}), TOKEN, "toy")
    served = Served(server.app(), tls_context(str(cert), str(key)))
    trusted = ssl.create_default_context(cafile=str(cert))
    try:
        assert served.url.startswith("https://")
        with pytest.raises(ConfigError, match=r"unreachable.*CERTIFICATE_VERIFY_FAILED"):
            check_servers([served.url], TOKEN, "toy")  # not trusted by default
        check_servers([served.url], TOKEN, "toy", ssl_context=trusted)
        remote = backend(spec, [served.url], ssl_context=trusted)
        try:
            samples, _ = remote.collect([0], [0], step=1)
            assert len(samples) == 2 and all(s.usable for s in samples)
        finally:
            remote.close()
    finally:
        served.stop()


def test_the_start_limiter_spaces_starts_with_jitter() -> None:
    """--env-max-starts-per-s 20: ten starts asked at once take nine intervals (50 ms) at
    least, each late by at most half an interval of jitter, and not in lockstep."""
    import itertools
    import random

    from rollyard.run.remote_backend import StartLimiter

    async def starts(rate: float, seed: int) -> list[float]:
        limiter = StartLimiter(rate, random.Random(seed))
        began: list[float] = []

        async def start() -> None:
            await limiter.wait()
            began.append(time.monotonic())
        t0 = time.monotonic()
        await asyncio.gather(*(start() for _ in range(10)))
        return [t - t0 for t in sorted(began)]

    times = asyncio.run(starts(20.0, 0))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert times[-1] >= 9 * 0.05 - 0.005  # a sleep ends late, never early
    assert times[-1] <= 9 * 0.05 + 10 * 0.025 + 1.0  # the jitter is bounded
    assert max(gaps) - min(gaps) > 0.002  # jittered, not evenly spaced
    assert asyncio.run(starts(0.0, 0))[-1] < 0.05  # 0: no limit


@pytest.mark.parametrize("flags, error", [
    (["--host", "0.0.0.0"], r"--host 0\.0\.0\.0: a non-loopback address needs --token-file"),
    (["--tls-cert", "cert.pem"], r"--tls-cert and --tls-key go together"),
])
def test_the_server_refuses_to_start_unsafe_in_one_line(tmp_path, flags, error) -> None:
    import re
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "rollyard.cli", "env-server",
                           "--rollout-plugin", "toy", "--port", "0", *flags],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    assert re.search(error, lines[0]), lines[0]


def test_a_body_over_the_limit_is_refused_with_413() -> None:
    from rollyard.env_server.wire import MAX_BODY

    server, served = toy_server()
    try:
        async def post(size: int) -> int:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{served.url}/v1/cancel", data=b" " * size,
                                     headers={"Authorization": f"Bearer {TOKEN}",
                                              "Content-Type": "application/json"}) as response:
                    return response.status
        assert asyncio.run(post(MAX_BODY + 1)) == 413
        assert not server.cancelled
    finally:
        served.stop()
