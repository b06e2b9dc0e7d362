"""One judge request: an OpenAI chat completion, retried with backoff, at most N at once."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from rollyard_plugins.judge.options import JudgeOptions

if TYPE_CHECKING:
    import aiohttp

#: HTTP statuses worth asking again: rate limits and server faults.
RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
#: Longest pause between two attempts, in seconds.
MAX_BACKOFF_S = 8.0


class JudgeUnavailable(Exception):
    """No reply could be had from the judge (the reason is the message)."""


class JudgeClient:
    """Posts chat completions to ``{base_url}/chat/completions`` with the options' model,
    sampling, timeout and concurrency; connection errors, timeouts and HTTP 429/5xx are
    retried ``retries`` times after an exponential, jittered pause (a numeric ``Retry-After``
    is honoured). Other HTTP errors are not retried: they will not change."""

    def __init__(self, options: JudgeOptions, api_key: str | None) -> None:
        self.options = options
        self.url = str(options.base_url).rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._limit = asyncio.Semaphore(options.concurrency)
        self._session: aiohttp.ClientSession | None = None
        #: HTTP requests sent, every attempt counted.
        self.sent = 0

    async def reply(self, content: str) -> str:
        """The judge's reply to one user message; JudgeUnavailable when none came."""
        import aiohttp

        payload = {"model": self.options.model, "messages": [{"role": "user", "content": content}],
                   "max_tokens": self.options.max_tokens, "temperature": self.options.temperature}
        last, retry_after = "", None
        async with self._limit:
            for attempt in range(self.options.retries + 1):
                if attempt:
                    await asyncio.sleep(_pause(attempt, retry_after))
                self.sent += 1
                try:
                    status, body, retry_after = await self._post(payload)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    last, retry_after = (f"timed out after {self.options.timeout:g} s"
                                         if isinstance(exc, TimeoutError)
                                         else f"{type(exc).__name__}: {exc}"), None
                    continue
                if status == 200:
                    return _content(body)
                last = f"HTTP {status}: {str(body)[:200]}"
                if status not in RETRIED_STATUSES:
                    raise JudgeUnavailable(f"the judge at {self.url} answered {last}")
        raise JudgeUnavailable(f"the judge at {self.url} gave no reply after "
                               f"{self.options.retries + 1} attempt(s): {last}")

    async def _post(self, payload: dict[str, Any]) -> tuple[int, Any, float | None]:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        timeout = aiohttp.ClientTimeout(total=self.options.timeout)
        async with self._session.post(self.url, json=payload, headers=self.headers,
                                      timeout=timeout) as response:
            try:
                body: Any = await response.json(content_type=None)
            except ValueError:
                body = await response.text()
            return response.status, body, _seconds(response.headers.get("Retry-After"))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _pause(attempt: int, retry_after: float | None) -> float:
    """Seconds to wait before attempt ``attempt`` (1, 2, …): what the server asked for, else
    0.25 s doubling per attempt with ±50 % jitter, never more than MAX_BACKOFF_S."""
    if retry_after is not None:
        return min(retry_after, MAX_BACKOFF_S)
    return min(0.25 * 2 ** (attempt - 1), MAX_BACKOFF_S) * random.uniform(0.5, 1.5)


def _content(body: Any) -> str:
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise JudgeUnavailable(f"the judge's answer is not a chat completion: "
                               f"{str(body)[:200]}") from exc
    return content if isinstance(content, str) else ""


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
