"""The ``verifiers`` rollout: any verifiers environment, its episodes served by rollyard engines.

The environment owns its tasks and scores its own traces (``default_rewards`` is empty).
Model calls leave verifiers through its client, reach the bridge's loopback server and go to
the engines through the run's transport. An id names either a 0.4 taskset (every trace
becomes one Sample per branch) or a pre-0.4 ``load_environment`` module, driven through its
own API by :mod:`rollyard_verifiers.legacy` (every rollout becomes one Sample per segment of
the calls the bridge recorded).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from rollyard import (
    IsolatedEnvironment,
    Rollout,
    RolloutContext,
    RolloutError,
    Sample,
    SampleStatus,
    Task,
)
from rollyard.model_facts import model_max_tokens

from rollyard_verifiers.bridge import Bridge, BridgeServer
from rollyard_verifiers.environment import (
    check_async_scoring,
    deep_merge,
    env_config,
    load_environment,
)
from rollyard_verifiers.legacy import LegacyEnvironment, is_legacy
from rollyard_verifiers.options import VerifiersOptions, json_object
from rollyard_verifiers.samples import EnvironmentMetrics, legacy_samples, trace_samples
from rollyard_verifiers.selection import environment_request
from rollyard_verifiers.serving import SharedContext


class VerifiersRollout(Rollout):
    """Runs the verifiers environment named by ``--verifiers-env``."""

    name: ClassVar[str] = "verifiers"
    Options = VerifiersOptions
    default_rewards: ClassVar[dict[str, float]] = {}

    @classmethod
    def isolated_environment(cls, options: VerifiersOptions) -> IsolatedEnvironment | None:
        """A pre-0.4 environment (or ``--verifiers-version``): a venv with the verifiers it
        needs (rollyard_verifiers.selection). Reads the environment's files, imports nothing."""
        if not options.env:
            return None
        return environment_request(options.env, options.version)

    def __init__(self, context: RolloutContext) -> None:
        super().__init__(context)
        options: VerifiersOptions = context.options
        self.env_id: str = options.env or ""
        if not self.env_id:
            raise RolloutError("no environment given: pass --verifiers-env ID (an importable "
                               "verifiers taskset package)", plugin=self.name)
        self.concurrency = options.concurrency
        self.max_tasks: int | None = options.max_tasks
        model_dir = context.model_dir  # None in a context built without a model
        self.renderer_dir = (str(Path(model_dir).resolve()) if model_dir
                             else _tokenizer_dir(context.tokenizer))
        self.bridge = Bridge(context.transport, model=Path(self.renderer_dir).name,
                             max_model_len=(context.context_length if model_dir
                                            else _context_length(self.renderer_dir)),
                             tokenizer=context.tokenizer)
        self._semaphore: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._bridge_port = 0
        self._metrics = EnvironmentMetrics()
        self._tasks: dict[str, Any] = {}
        if is_legacy(self.env_id):
            self._init_legacy(options)
            return
        self._legacy: dict[str, LegacyEnvironment] | None = None
        try:
            train = env_config(self.env_id, json_object(options.env_config),
                               options.max_turns)
        except (ImportError, TypeError, ValueError) as exc:
            raise RolloutError(f"verifiers environment {self.env_id!r}: {type(exc).__name__}: "
                               f"{exc}", plugin=self.name) from exc
        eval_ = deep_merge(train, json_object(options.eval_config))
        # Splits with the same config share one environment (and one serving context).
        self._configs = {json.dumps(c, sort_keys=True): c for c in (train, eval_)}
        self._split_keys = {"train": json.dumps(train, sort_keys=True),
                            "eval": json.dumps(eval_, sort_keys=True)}
        self._envs: dict[str, Any] = {}
        self._shared = {key: SharedContext(self._opener(key)) for key in self._configs}

    def _init_legacy(self, options: VerifiersOptions) -> None:
        """A pre-0.4 environment: ``--verifiers-env-config`` holds ``load_environment``'s
        keyword arguments (``--verifiers-eval-config`` merged on top for ``eval``); splits with
        the same arguments share one environment."""
        train = json_object(options.env_config)
        eval_ = deep_merge(train, json_object(options.eval_config))
        loaded = LegacyEnvironment(self.env_id, train)
        self._legacy = {"train": loaded, "eval": loaded if eval_ == train else
                        LegacyEnvironment(self.env_id, eval_)}
        if options.max_turns is not None:
            for env in self._legacy.values():
                if hasattr(env.env, "max_turns"):
                    env.env.max_turns = options.max_turns
        self._split_keys = {"train": "train", "eval": "eval"}
        self._shared = {"legacy": SharedContext(self._legacy_opener)}

    # ------------------------------------------------------------------ tasks

    def tasks(self, split: str) -> Sequence[Task]:
        """The environment's own tasks (``data`` holds the verifiers task data plus ``split``
        and ``verifiers_key``); ``eval`` applies ``--verifiers-eval-config``."""
        if self._legacy is not None:
            return self._legacy_tasks(split)
        env = self._env(split)
        view = env.taskset if self.max_tasks is None else env.taskset.take(self.max_tasks)
        if getattr(env.taskset, "INFINITE", False) and self.max_tasks is None:
            raise RolloutError(f"taskset {self.env_id!r} is infinite; bound it with "
                               "--verifiers-max-tasks", plugin=self.name)
        tasks: list[Task] = []
        seen: set[str] = set()
        for vf_task in view:
            if not tasks:
                try:
                    check_async_scoring(vf_task, self.env_id)
                except TypeError as exc:
                    raise RolloutError(str(exc), plugin=self.name) from exc
            data = vf_task.data
            task_id = str(data.id if data.id is not None else data.idx)
            if f"{split}/{task_id}" in seen:
                raise RolloutError(f"taskset {self.env_id!r} yields two tasks with id "
                                   f"{task_id!r}", plugin=self.name, task_id=task_id)
            seen.add(f"{split}/{task_id}")
            self._tasks[f"{split}/{task_id}"] = vf_task
            own = data.model_dump(mode="json", exclude_defaults=True)  # answer, tests …
            tasks.append(Task(id=task_id, prompt=_prompt(data),
                              data={**own, "split": split, "verifiers_key": vf_task.key}))
        return tasks

    def _legacy_tasks(self, split: str) -> list[Task]:
        """The rows of a pre-0.4 environment's dataset: id from an ``id`` column, else the
        row index; ``data`` holds the row's other columns plus ``split``."""
        self._key(split)
        rows = self._legacy[split].rows(split)
        tasks: list[Task] = []
        seen: set[str] = set()
        for index, row in enumerate(rows[:self.max_tasks]):
            task_id = str(row["id"] if row.get("id") is not None else index)
            if task_id in seen:
                raise RolloutError(f"environment {self.env_id!r} yields two tasks with id "
                                   f"{task_id!r}", plugin=self.name, task_id=task_id)
            seen.add(task_id)
            self._tasks[f"{split}/{task_id}"] = row
            data = {k: v for k, v in row.items() if k != "prompt"}
            tasks.append(Task(id=task_id, prompt=_legacy_prompt(row.get("prompt")),
                              data={**data, "split": split}))
        return tasks

    def _key(self, split: str) -> str:
        if split not in self._split_keys:
            raise RolloutError(f"unknown split {split!r}; expected one of "
                               f"{sorted(self._split_keys)}", plugin=self.name)
        return self._split_keys[split]

    def _env(self, split: str) -> Any:
        key = self._key(split)
        if key not in self._envs:
            try:
                self._envs[key] = load_environment(self._configs[key])
            except Exception as exc:
                raise RolloutError(f"loading verifiers environment {self.env_id!r} failed: "
                                   f"{type(exc).__name__}: {exc}", plugin=self.name) from exc
        return self._envs[key]

    # ------------------------------------------------------------------ episodes

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        """``n`` episodes of ``task`` under the concurrency bound, one Sample per branch."""
        split = task.data.get("split", "train") if isinstance(task.data, dict) else "train"
        found = self._tasks.get(f"{split}/{task.id}")
        if found is None:
            self.tasks(split)
            found = self._tasks.get(f"{split}/{task.id}")
        if found is None:
            raise RolloutError("task is not one of the environment's tasks",
                               plugin=self.name, task_id=task.id)
        if self._legacy is not None:
            return await self._legacy_group(split, found, task.id, n)
        env = self._env(split)
        group_id = f"{task.id}/{uuid.uuid4().hex[:8]}"
        async with self._shared[self._key(split)].use() as model_context:
            slots = env.slots(found, n)
            episodes = await asyncio.gather(
                *(env.run_slot(slot, model_context, semaphore=self._bound()) for slot in slots),
                return_exceptions=True)
            samples: list[Sample] = []
            for episode in episodes:
                samples.extend(self._episode_samples(episode, task.id, group_id))
        return samples

    async def _legacy_group(self, split: str, row: dict[str, Any], task_id: str,
                            n: int) -> list[Sample]:
        group_id = f"{task_id}/{uuid.uuid4().hex[:8]}"
        async with self._shared["legacy"].use() as client:
            results = await self._legacy[split].run_group(
                row, n, client, self.bridge.model, self._sampling_args(), self._bound())
        samples: list[Sample] = []
        for session_id, result in results:
            session = self.bridge.pop_session(session_id)
            if isinstance(result, BaseException):
                samples.append(_failed(task_id, group_id, f"rollout raised "
                                                          f"{type(result).__name__}: {result}"))
                continue
            try:
                produced = legacy_samples(result, session, task_id, group_id)
            except ValueError as exc:
                produced = [_failed(task_id, group_id, str(exc))]
            self._metrics.add(len(session.calls), produced)
            samples.extend(produced)
        return samples

    def _sampling_args(self) -> dict[str, Any]:
        sampling = self.context.sampling
        if sampling is None:
            return {}
        knobs: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p,
                                 "max_tokens": sampling.max_new_tokens}
        if sampling.top_k not in (-1, 0):
            knobs["top_k"] = sampling.top_k
        return knobs

    @contextlib.asynccontextmanager
    async def _legacy_opener(self) -> AsyncIterator[Any]:
        async with BridgeServer(self.bridge, port=self._bridge_port) as server:
            self._bridge_port = server.port
            client = self._legacy["train"].client(server.base_url, self.renderer_dir)
            try:
                yield client
            finally:
                await client.close()

    def _episode_samples(self, episode: Any, task_id: str, group_id: str) -> list[Sample]:
        if isinstance(episode, BaseException):
            return [_failed(task_id, group_id, f"episode raised {type(episode).__name__}: "
                                               f"{episode}")]
        if not episode.traces:
            reason = "; ".join(f"{e.type}: {e.message}" for e in episode.errors)
            return [_failed(task_id, group_id, reason or "episode produced no trace")]
        samples = []
        for trace in episode.traces:
            session = self.bridge.pop_session(trace.id)
            if not getattr(trace.agent, "trainable", True):  # e.g. user_sim's modeled user
                continue
            try:
                produced = trace_samples(trace, session, task_id, group_id)
            except ValueError as exc:  # an inconsistent trace fails its sample, not the group
                produced = [_failed(task_id, group_id, f"trace {trace.id}: {exc}")]
            self._metrics.add(trace.num_turns, produced)
            samples.extend(produced)
        return samples

    def _bound(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore[0] is not loop:
            self._semaphore = (loop, asyncio.Semaphore(self.concurrency))
        return self._semaphore[1]

    def _opener(self, key: str) -> Any:
        @contextlib.asynccontextmanager
        async def open_context() -> AsyncIterator[Any]:
            env = self._envs[key]
            # The same port every time: renderers caches the engine's context length per
            # base URL behind a lock bound to the first event loop that waited on it.
            async with BridgeServer(self.bridge, port=self._bridge_port) as server, \
                    env.serving():
                self._bridge_port = server.port
                yield self._model_context(server.base_url)
        return open_context

    def _model_context(self, base_url: str) -> Any:
        import verifiers.v1 as vf
        from renderers import DefaultRendererConfig

        knobs = self._sampling_args()
        client = vf.TrainClientConfig(base_url=base_url, api_key_var="ROLLYARD_BRIDGE_KEY",
                                      renderer=DefaultRendererConfig(),
                                      renderer_model_name=self.renderer_dir)
        return vf.ModelContext(model=self.bridge.model, client=client,
                               sampling=vf.SamplingConfig(**knobs))

    def metrics(self) -> dict[str, float]:
        """``verifiers/reward_mean``, ``error_rate``, ``truncated_rate``, ``num_turns_mean``
        over the traces finished since the last call."""
        metrics, self._metrics = self._metrics.summary(), EnvironmentMetrics()
        return metrics


def _failed(task_id: str, group_id: str, reason: str) -> Sample:
    return Sample.lost(task_id, group_id, SampleStatus.FAILED, reason, completion="")


def _prompt(data: Any) -> list[dict[str, Any]] | str:
    """The task's prompt as rollyard shows it: plain text, or chat messages as dicts."""
    prompt = data.prompt if data.prompt is not None else ""
    if not isinstance(prompt, str):
        prompt = [m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
                  for m in prompt]
    if data.system_prompt:
        user = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return [{"role": "system", "content": data.system_prompt}, *user]
    return prompt


def _legacy_prompt(prompt: Any) -> list[dict[str, Any]] | str:
    """A dataset row's prompt as chat messages, without the columns a dataset fills with None."""
    if isinstance(prompt, str) or prompt is None:
        return prompt or ""
    return [{k: v for k, v in dict(m).items() if v is not None} for m in prompt]


def _tokenizer_dir(tokenizer: Any) -> str:
    path = getattr(tokenizer, "name_or_path", "") or ""
    if not Path(path).is_dir():
        raise RolloutError(f"the run's tokenizer was not loaded from a local folder "
                           f"(name_or_path={path!r}); verifiers renders prompts with it and "
                           "must load it offline", plugin=VerifiersRollout.name)
    return str(Path(path).resolve())


def _context_length(model_dir: str) -> int | None:
    """The context length of the model in ``model_dir``, when it has a config.json."""
    return model_max_tokens(model_dir) if (Path(model_dir) / "config.json").is_file() else None
