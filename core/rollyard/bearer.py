"""Bearer tokens over HTTP, for every server the project runs (env servers, the embedded
engine) and their clients: the token read from a file, the request header, and an aiohttp
middleware that answers 401 before any routing when the token is missing or wrong."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from rollyard.errors import ConfigError


def read_token(path: str | None, flag: str) -> str | None:
    """The token in the file ``path`` (``flag`` names it in errors); None: no file."""
    if path is None:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{flag} {path!r}: {exc.strerror or exc}") from None
    if not token:
        raise ConfigError(f"{flag} {path!r} is empty")
    return token


def auth_header(token: str | None) -> dict[str, str]:
    """``Authorization: Bearer <token>``, or nothing without a token."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def bearer_middleware(token: str | None, open_paths: Iterable[str] = ("/health",)) -> Any:
    """aiohttp middleware: 401 for a request whose bearer token is not ``token`` (compared
    in constant time), except ``GET`` of ``open_paths``; lets everything through when
    ``token`` is None."""
    from aiohttp import web

    expected = f"Bearer {token}".encode() if token else None
    public = frozenset(open_paths)

    @web.middleware
    async def check(request: web.Request, handler: Callable[..., Awaitable[Any]]) -> Any:
        if expected is not None and not (request.method == "GET" and request.path in public):
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return web.json_response({"error": "missing or wrong bearer token"},
                                         status=401)
        return await handler(request)

    return check
