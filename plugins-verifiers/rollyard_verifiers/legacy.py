"""Drive a pre-0.4 verifiers environment (``load_environment``, verifiers 0.1.9–0.3.x).

Such an environment is a module whose ``load_environment(**kwargs)`` returns a
``vf.Environment`` (``SingleTurnEnv``, ``MultiTurnEnv``, ``ToolEnv`` …) holding a dataset and a
rubric. It runs through its own API: ``env.rollout(input, client, model, sampling_args)`` per
episode, then ``env.rubric.score_group`` over the group (group reward functions included). The
client is verifiers' own ``RendererClient`` (``client_type="renderer"``), which renders chat
messages to token ids and posts them to the bridge's ``/inference/v1/generate``; its
``X-Session-ID`` header carries the rollout's ``trajectory_id`` so that the bridge records every
call of the rollout (see :mod:`rollyard_verifiers.recorded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import signal
from collections.abc import Iterator, Mapping
from typing import Any

from rollyard import ConfigError, RolloutError

from rollyard_verifiers.resolve import Generation, find_environment, module_name

SESSION_STATE_KEY = "trajectory_id"
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
        """verifiers' renderer client for the bridge at ``base_url``, rendering with the
        tokenizer in ``renderer_dir`` (its chat template; tool calls parsed in the Qwen/Hermes
        ``<tool_call>`` JSON format, :data:`TOOL_PARSER`); each call names its rollout in
        ``X-Session-ID``."""
        import verifiers as vf
        from renderers import DefaultRendererConfig
        from verifiers.clients import resolve_client

        config = vf.ClientConfig(client_type="renderer", api_base_url=base_url,
                                 api_key_var="ROLLYARD_BRIDGE_KEY",
                                 renderer_model_name=renderer_dir, max_retries=0,
                                 renderer_config=DefaultRendererConfig(tool_parser=TOOL_PARSER),
                                 extra_headers_from_state={"X-Session-ID": SESSION_STATE_KEY})
        return resolve_client(config)

    async def run_group(self, row: Mapping[str, Any], n: int, client: Any, model: str,
                        sampling_args: Mapping[str, Any],
                        semaphore: asyncio.Semaphore) -> list[Any]:
        """``n`` rollouts of ``row``, scored together by the environment's rubric. Returns the
        verifiers states; a rollout that raised is returned as its exception."""

        async def one() -> Any:
            async with semaphore:
                return await self.env.rollout(dict(row), client, model, dict(sampling_args))

        results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
        states = [r for r in results if not isinstance(r, BaseException)]
        if states:
            if self.env.score_rollouts:
                await self.env.rubric.score_group(states)
            else:
                await self.env.rubric.dummy_score_group(states)
            for state in states:
                await self.env.rubric.cleanup(state)
        return results
