"""Drive a pre-0.4 verifiers environment (``load_environment``, verifiers 0.1.9–0.3.x).

Such an environment is a module whose ``load_environment(**kwargs)`` returns a
``vf.Environment`` (``SingleTurnEnv``, ``MultiTurnEnv``, ``ToolEnv`` …) holding a dataset and a
rubric. It runs through its own API: ``env.rollout(input, client, model, sampling_args)`` per
episode, then ``env.rubric.score_group`` over the group (group reward functions included). The
client is the one that verifiers version speaks (:meth:`LegacyEnvironment.client`). Every call
of a rollout carries the rollout's ``X-Session-ID`` header (its ``trajectory_id``, through
verifiers' ``extra_headers_from_state`` from 0.1.12; before, an id of our own in the sampling
arguments' ``extra_headers``), so that the bridge records its calls
(see :mod:`rollyard_verifiers.recorded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import importlib.util
import inspect
import signal
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from packaging.version import Version
from rollyard import ConfigError, RolloutError

from rollyard_verifiers.bridge import SESSION_HEADER
from rollyard_verifiers.resolve import Generation, find_environment, module_name

#: verifiers releases from which the renderer client (and the pinned renderers) drive it.
RENDERER_CLIENT_SINCE = Version("0.2")
#: The state key whose value names a rollout's session when the client takes it from state.
SESSION_STATE_KEY = "trajectory_id"
API_KEY_VARIABLE = "ROLLYARD_BRIDGE_KEY"
#: The renderers tool parser for model replies (``<tool_call>{"name", "arguments"}</tool_call>``).
TOOL_PARSER = "qwen3"


def is_legacy(env_id: str) -> bool:
    """Whether ``env_id`` names a pre-0.4 (``load_environment``) environment, read from its
    files without importing it (:mod:`rollyard_verifiers.resolve`); an id that names no module
    is left to verifiers' own loader (False)."""
    try:
        return find_environment(env_id).generation is Generation.LEGACY
    except ConfigError:
        return False


def has_legacy_api() -> bool:
    """Whether the installed verifiers still has the pre-0.4 API (top-level in 0.1.x–0.2.x,
    ``verifiers.legacy`` with top-level aliases in 0.3.x, gone in 0.4)."""
    import verifiers

    try:
        return verifiers.Environment is not None and verifiers.Rubric is not None
    except (AttributeError, ImportError):
        return False


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Keep the process's signal handlers while an environment is built: a pre-0.4
    ``Environment`` installs SIGINT/SIGTERM handlers for verifiers' own CLI, which fails off the
    main thread (a Ray actor builds its rollout there) and would take shutdown away from the
    worker's host anyway."""
    install = signal.signal
    signal.signal = lambda signum, handler: signal.getsignal(signum)  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = install


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


class LegacyEnvironment:
    """One loaded pre-0.4 environment: its tasks per split and its episodes."""

    def __init__(self, env_id: str, kwargs: Mapping[str, Any]) -> None:
        self.env_id = env_id
        if not has_legacy_api():
            import verifiers

            raise RolloutError(
                f"verifiers environment {env_id!r} is written for verifiers < 0.4 "
                f"(load_environment), but verifiers {verifiers.__version__} is installed here; "
                "run it with --rollout-env isolated", plugin="verifiers")
        name = module_name(env_id)
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise RolloutError(f"verifiers environment {env_id!r}: importing module {name!r} "
                               f"raised {type(exc).__name__}: {_one_line(exc)}",
                               plugin="verifiers") from exc
        try:
            with _signal_handlers_kept():
                self.env = module.load_environment(**kwargs)
        except Exception as exc:
            raise RolloutError(f"verifiers environment {env_id!r}: load_environment raised "
                               f"{type(exc).__name__}: {_one_line(exc)}",
                               plugin="verifiers") from exc

    def rows(self, split: str) -> list[dict[str, Any]]:
        """The dataset rows of ``split`` (``eval``: the eval dataset, or the train one when the
        environment has none), as verifiers formatted them (``prompt`` as chat messages)."""
        try:
            dataset = self.env.get_eval_dataset() if split == "eval" else self.env.get_dataset()
        except Exception as exc:
            raise RolloutError(f"verifiers environment {self.env_id!r}: building its {split} "
                               f"dataset raised {type(exc).__name__}: {_one_line(exc)}",
                               plugin="verifiers") from exc
        return [dict(row) for row in dataset]

    def client(self, base_url: str, renderer_dir: str) -> Any:
        """The client this verifiers calls the bridge at ``base_url`` through: from 0.2 its
        renderer client (prompts rendered here with the tokenizer in ``renderer_dir``, tool
        calls parsed in the Qwen/Hermes ``<tool_call>`` JSON format, :data:`TOOL_PARSER`,
        token ids to ``/inference/v1/generate``); before, an OpenAI chat client (the bridge
        renders, ``/v1/chat/completions``): verifiers' own from 0.1.11, the SDK's before."""
        import verifiers as vf

        headers = {SESSION_HEADER: SESSION_STATE_KEY} if self.session_from_state else {}
        if Version(vf.__version__) >= RENDERER_CLIENT_SINCE:
            from renderers import DefaultRendererConfig
            from verifiers.clients import resolve_client

            return resolve_client(vf.ClientConfig(
                client_type="renderer", api_base_url=base_url, api_key_var=API_KEY_VARIABLE,
                renderer_model_name=renderer_dir, max_retries=0, extra_headers_from_state=headers,
                renderer_config=DefaultRendererConfig(tool_parser=TOOL_PARSER)))
        if importlib.util.find_spec("verifiers.clients") is not None:
            from verifiers.clients import resolve_client

            extra = {"extra_headers_from_state": headers} if headers else {}
            return resolve_client(vf.ClientConfig(
                client_type="openai_chat_completions", api_base_url=base_url,
                api_key_var=API_KEY_VARIABLE, max_retries=0, **extra))
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=base_url, api_key="rollyard", max_retries=0)

    @functools.cached_property
    def session_from_state(self) -> bool:
        """Whether the client names each call's session from the rollout's state (verifiers'
        ``extra_headers_from_state``, from 0.1.12: it sends headers of its own) rather than
        from the sampling arguments' ``extra_headers``."""
        import verifiers as vf

        config = getattr(vf, "ClientConfig", None)
        return config is not None and "extra_headers_from_state" in config.model_fields

    async def run_group(self, row: Mapping[str, Any], n: int, client: Any, model: str,
                        sampling_args: Mapping[str, Any],
                        semaphore: asyncio.Semaphore) -> list[tuple[str, Any]]:
        """``n`` rollouts of ``row``, scored together by the environment's rubric: for each,
        the session id its calls carried (``X-Session-ID``) and its verifiers state, or the
        exception it raised."""
        sessions = [uuid.uuid4().hex for _ in range(n)]

        async def one(session: str) -> Any:
            args = dict(sampling_args)
            if not self.session_from_state:
                args["extra_headers"] = {SESSION_HEADER: session}
            async with semaphore:
                return await self.env.rollout(dict(row), client, model, args)

        results = await asyncio.gather(*(one(s) for s in sessions), return_exceptions=True)
        if self.session_from_state:  # a rollout that raised left its session unknown
            sessions = [r[SESSION_STATE_KEY] if not isinstance(r, BaseException) else s
                        for s, r in zip(sessions, results, strict=True)]
        states = [r for r in results if not isinstance(r, BaseException)]
        if states:
            rubric = self.env.rubric
            score = rubric.score_group if self.env.score_rollouts else rubric.dummy_score_group
            if "score_sem" in inspect.signature(score).parameters:  # 0.1.9-0.1.10
                await score(states, score_sem=contextlib.nullcontext())
            else:
                await score(states)
            cleanup = getattr(self.env.rubric, "cleanup", None)  # from 0.1.12
            for state in states if cleanup is not None else ():
                await cleanup(state)
        return list(zip(sessions, results, strict=True))
