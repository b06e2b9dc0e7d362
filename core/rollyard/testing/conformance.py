"""The conformance check: does a plugin keep the contract the core relies on?

It loads the plugin the way a run does (entry point, or an in-process module), checks what it
registers and the options it declares, builds each rollout from a RolloutContext, checks its
task splits, runs groups against a scripted engine, validates every sample at the core's own
boundary (:func:`rollyard.run.collect.checked`), checks them against what the scripted
engine produced (loss mask on its tokens only, its logprobs, sessions that continue their
history), scores them with the rollout's default rewards and checks that engine aborts and
transport errors become aborted/failed samples.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import math
import random
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from rollyard.config import ConfigView, RunConfig
from rollyard.configurable import options_prefix
from rollyard.errors import (
    EngineAborted,
    PluginError,
    RollyardError,
    SampleError,
    TransportError,
)
from rollyard.interfaces import RewardContext, Rollout, RolloutContext
from rollyard.options import LegacyOptions, build_options
from rollyard.plugins import PluginManager, PluginWarning
from rollyard.rewards import RewardSet
from rollyard.run.collect import checked
from rollyard.run.rollout_workers import run_sampling
from rollyard.testing.fakes import SCRIPTED_URL, Reply, ScriptedTransport, tiny_tokenizer
from rollyard.testing.report import ConformanceReport
from rollyard.testing.traces import sample_problem, session_problems
from rollyard.train_flags import TrainFlags
from rollyard.types import Sample, SampleStatus, Task

SPLITS = ("train", "eval")
USABLE = (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)

#: What to change when a check fails, by the kind of failure (docs/writing-plugins.md).
FIXES = {
    "not installed": "install the plugin (pip install -e PATH) or correct the name; "
                     "`rollyard plugins` lists the installed entry points",
    "load error": "fix the error above in the plugin's entry-point module or hook; "
                  "`rollyard plugins` shows it too",
    "no hook": "decorate the hook functions with @rollyard.hookimpl and name them after a "
               "hookspec (register_rollouts, register_rewards, ...)",
    "options": "declare options as a frozen dataclass `Options` on the class, each field an "
               "option(default, help=...) (docs/writing-plugins.md)",
    "option defaults": "give every option a default that passes its own check",
    "reward build": "make the reward's constructor work from a RewardContext (tokenizer, "
                    "options) alone, with the default options",
    "default rewards": "set default_rewards to {reward name: weight}, naming rewards that "
                       "this plugin or an installed one registers (`rollyard plugins --hook "
                       "register_rewards`); {} when the rollout scores its own samples",
    "reward set": "let the rewards' evaluators start without a run, or install what they "
                  "need",
    "construct": "make the constructor work from the RolloutContext alone with the default "
                 "options: read options from context.options, send no engine requests (the "
                 "engines start after it), load data it cannot find with a clear error",
    "tasks raised": "make tasks('train') and tasks('eval') return lists of rollyard.Task",
    "tasks": "return, for each split, a non-empty list of rollyard.Task with non-empty string "
             "ids unique within the split and text or chat-message prompts",
    "deterministic": "derive the tasks from context.config.seed and the options only (no "
                     "clock, uuid, or unseeded random)",
    "held out": "give the eval tasks ids (and problems) of their own, or drop "
                "eval_held_out = True if the eval split is not held out",
    "run_group": "return failed or aborted samples (Sample.lost, rollyard.episodes) instead "
                 "of raising; catch rollyard.TransportError around engine calls",
    "timeout": "make run_group finish in time: in a run it is stopped after "
               "--rollout-timeout seconds",
    "samples": "build samples with rollyard.episodes (sample_single_turn, Conversation), "
               "which keep the invariants; Sample.validate() names the broken field",
    "engine tokens": "take response tokens and logprobs from the transport's results and "
                     "set loss_mask 1 on them only (0 on tokens the environment inserted); "
                     "never re-tokenise text",
    "score": "make the rewards return a finite float (or {name: float}) for these samples",
    "metrics": "return {name: finite float} from metrics()",
}


def check_plugin(plugin: str | object, *, name: str | None = None,
                 argv: Sequence[str] = (), options: Mapping[str, Any] | None = None,
                 tokenizer: Any = None, config: Mapping[str, Any] | None = None,
                 replies: Sequence[Reply] = (), group_size: int = 3,
                 timeout_s: float = 60.0) -> ConformanceReport:
    """Check a plugin: an installed entry-point name (``"toy"``) or a plugin module/object
    registered in-process under ``name`` (the name that prefixes its options).

    ``argv`` sets the plugin's options as on the command line (``["--toy-num-tasks", "20"]``);
    ``options`` then override values by their name without the prefix (``{"num_tasks": 20}``);
    ``tokenizer`` defaults to the tiny model's; ``replies`` script the engine (see
    :class:`ScriptedTransport`). Never raises for a plugin's fault: the report says what broke.
    """
    if isinstance(plugin, str):
        label = plugin
        manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": plugin})
        if not manager.entry_points():
            installed = sorted(ep.name for ep in PluginManager(environ={}).entry_points())
            report = ConformanceReport(label)
            report.add("registration", "fail", f"no entry point named {plugin!r} in group "
                       f"'rollyard' is installed; installed: {', '.join(installed) or 'none'}",
                       fix=FIXES["not installed"])
            return report
        load = manager.load_all
    else:
        if not name:
            raise ValueError("check_plugin(<module>) needs name=: the plugin's name, which "
                             "prefixes its options (the entry-point name it will have)")
        label, manager = name, PluginManager(environ={})

        def load() -> None:
            manager.register(plugin, name=label)

    report = ConformanceReport(label)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)  # the report carries the errors
        load()
    record = manager.records[label]
    where = f"plugin {label!r}"
    if record.errors:
        for error in record.errors:
            report.add("registration", "fail", f"{where}: {error}", fix=FIXES["load error"])
    elif not record.hooks:
        report.add("registration", "fail", f"{where} implements no rollyard hook",
                   fix=FIXES["no hook"])
    else:
        registers = "; ".join(f"{kind}: {', '.join(names)}"
                              for kind, names in record.registers.items()) or "nothing"
        report.add("registration", "pass", f"{where} (distribution {record.distribution!r}) "
                   f"implements {', '.join(record.hooks)}; registers {registers}")
    run_config = _check_options(report, manager, label, list(argv))
    if run_config is None:
        return report
    rollouts = record.registers.get("rollout", [])
    for rollout_name in rollouts:
        rollout_cls = manager.get("rollout", rollout_name)
        report.extend(check_rollout(
            rollout_cls,
            options=_with(rollout_cls, run_config.options_for(rollout_cls, label), options),
            tokenizer=tokenizer, config=config, replies=replies, plugin=label,
            group_size=group_size, timeout_s=timeout_s, manager=manager))
    if not rollouts:
        report.add("rollouts", "skip", f"{where} registers no rollout")
    scored = {r for n in rollouts for r in manager.get("rollout", n).default_rewards}
    for reward_name in record.registers.get("reward", []):
        if reward_name not in scored:
            reward_cls = manager.get("reward", reward_name)
            reward_options = _with(reward_cls, run_config.options_for(reward_cls, label),
                                   options)
            _check_reward_builds(report, where, manager, reward_name, reward_options, tokenizer)
    return report


def check_rollout(rollout_cls: type[Rollout], *, options: Any = None,
                  tokenizer: Any = None, config: Mapping[str, Any] | None = None,
                  replies: Sequence[Reply] = (), plugin: str | None = None,
                  group_size: int = 3, timeout_s: float = 60.0,
                  manager: PluginManager | None = None) -> ConformanceReport:
    """Check one rollout class: construction, task splits, groups against a scripted engine,
    sample validity, default rewards, and aborts/transport errors becoming samples.

    ``options`` are what the rollout finds in ``context.options`` (an instance of its
    ``Options`` class, default when None, or a dict of values that is decoded into one; for
    ``add_options`` plugins their generated options instance, or a dict); ``config``
    overrides core options of the run config (``{"seed": 3}``). Default rewards are looked up
    in ``manager`` first, then among the installed plugins.
    """
    label = plugin or rollout_cls.name or rollout_cls.__qualname__
    if options is None and getattr(rollout_cls, "Options", None) is not None:
        options = rollout_cls.Options()
    checker = _RolloutChecker(rollout_cls, label, options if options is not None else {},
                              tiny_tokenizer() if tokenizer is None else tokenizer,
                              RunConfig().replace(**dict(config or {})), list(replies),
                              group_size, timeout_s)
    checker.run(manager)
    return checker.report


def _with(cls: type, options: Any, overrides: Mapping[str, Any] | None) -> Any:
    """The options of ``cls`` with ``overrides`` (by option name) applied and checked by the
    decoder of its options (typed, or the generated class of ``add_options`` ones); a plain
    dict (a test's) is merged."""
    if not overrides:
        return options
    if isinstance(options, Mapping) and not isinstance(options, LegacyOptions):
        return {**options, **overrides}
    return build_options(type(options), options_prefix(cls), overrides, base=options)


def _check_options(report: ConformanceReport, manager: PluginManager, label: str,
                   argv: list[str]) -> RunConfig | None:
    """Build the ``train`` flags with the plugin's options beside the core's; parse ``argv``
    into the run config a run would get."""
    parser = argparse.ArgumentParser(prog="rollyard train", add_help=False, allow_abbrev=False)
    where = f"plugin {label!r}"
    try:
        flags = TrainFlags(parser, manager)
    except PluginError as exc:
        report.add("options", "fail", f"{where}: {exc}", fix=FIXES["options"])
        return None
    except Exception as exc:
        report.add("options", "fail", f"{where}: declaring options raised "
                   f"{type(exc).__name__}: {exc}", fix=FIXES["options"])
        return None
    try:
        run_config = flags.parse(argv)
    except SystemExit:
        report.add("options", "fail", f"{where}: `rollyard train {' '.join(argv)}` does not "
                   "parse (see the usage error above); without arguments, every plugin option "
                   "needs a default", fix=FIXES["option defaults"])
        return None
    except RollyardError as exc:
        report.add("options", "fail", f"{where}: {exc}", fix=FIXES["option defaults"])
        return None
    declared = flags.plugin_flags()
    report.add("options", "pass", f"{where} declares {', '.join(declared)}" if declared
               else f"{where} declares no options")
    return run_config


def _check_reward_builds(report: ConformanceReport, where: str, manager: PluginManager,
                         name: str, options: Any, tokenizer: Any) -> None:
    check = f"reward {name!r}"
    try:
        manager.get("reward", name)(RewardContext(tokenizer, options))
    except Exception as exc:
        report.add(check, "fail", f"{where}: building reward {name!r} raised "
                   f"{type(exc).__name__}: {exc}", fix=FIXES["reward build"])
        return
    report.add(check, "pass", f"{where}: builds (no rollout of this plugin uses it by default, "
               "so it was not scored)")


class _RolloutChecker:
    """Runs the rollout checks in order; later checks need what earlier ones produced."""

    def __init__(self, rollout_cls: type[Rollout], plugin: str, options: Any,
                 tokenizer: Any, config: RunConfig, replies: list[Reply],
                 group_size: int, timeout_s: float) -> None:
        self.cls, self.options, self.config = rollout_cls, options, config
        self.tokenizer = tokenizer
        self.replies, self.n, self.timeout_s = replies, group_size, timeout_s
        self.name = getattr(rollout_cls, "name", "") or rollout_cls.__qualname__
        self.plugin = plugin
        self.where = f"plugin {plugin!r}, rollout {self.name!r}"
        self.report = ConformanceReport(plugin)

    def add(self, check: str, passed: bool | None, message: str, fix: str = "") -> None:
        outcome = "skip" if passed is None else "pass" if passed else "fail"
        self.report.add(f"rollout {self.name!r}: {check}", outcome, message, fix=fix)

    # ------------------------------------------------------------------ building

    def run(self, manager: PluginManager | None) -> None:
        rewards = self.reward_set(manager)
        first = self.build()
        second = first and self.build()
        if not first or not second:
            return
        (rollout, transport), (again, _) = first, second
        self.add("construct", True, f"{self.where} builds from a RolloutContext")
        splits = {split: self.split(rollout, split) for split in SPLITS}
        if any(tasks is None for tasks in splits.values()):
            return
        self.deterministic(splits, again)
        self.disjoint(splits)
        asyncio.run(self.exercise(rollout, transport, rewards, splits))
        self.metrics(rollout, rewards)
        if rewards is not None:
            asyncio.run(rewards.close())

    def reward_set(self, manager: PluginManager | None) -> RewardSet | None:
        weights = getattr(self.cls, "default_rewards", {})
        check = "default rewards"
        if not isinstance(weights, Mapping) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v) for k, v in weights.items()):
            self.add(check, False, f"{self.where}: default_rewards is {weights!r}; expected "
                     "{reward name: finite weight}", FIXES["default rewards"])
            return None
        rewards, missing = {}, []
        for name in weights:
            found = _find_reward(name, manager)
            if found is None:
                missing.append(name)
                continue
            cls, owner, owner_options = found
            shares = owner == self.plugin and getattr(cls, "Options", None) is getattr(
                self.cls, "Options", None)
            options = self.options if shares else owner_options
            try:
                rewards[name] = cls(RewardContext(self.tokenizer, options))
            except Exception as exc:
                self.add(check, False, f"{self.where}: building reward {name!r} raised "
                         f"{type(exc).__name__}: {exc}", FIXES["reward build"])
                return None
        if missing:
            self.add(check, False, f"{self.where}: default reward(s) {missing} are not "
                     "registered by this plugin or any installed one", FIXES["default rewards"])
            return None
        try:
            return RewardSet(rewards, weights)
        except Exception as exc:  # an evaluator that cannot start (no sandbox, no judge)
            self.add(check, False, f"{self.where}: building the reward set {sorted(rewards)} "
                     f"raised {type(exc).__name__}: {exc}", FIXES["reward set"])
            return None

    def build(self) -> tuple[Rollout, ScriptedTransport] | None:
        # logprobs that vary along a reply, so a sample that does not copy them shows
        transport = ScriptedTransport(self.replies, tokenizer=self.tokenizer,
                                      logprob=lambda i: -0.5 - 0.125 * (i % 4))
        context = RolloutContext(  # a plain dict of options is copied, decoded ones kept
            config=ConfigView(self.config), tokenizer=self.tokenizer, transport=transport,
            options=self.options, rng=random.Random(self.config.seed),
            sampling=run_sampling(self.config))
        try:
            return self.cls(context), transport
        except Exception as exc:
            self.add("construct", False, f"{self.where}: building it with options "
                     f"{self.options} raised {type(exc).__name__}: {exc}", FIXES["construct"])
            return None

    # ------------------------------------------------------------------ tasks

    def split(self, rollout: Rollout, split: str) -> list[Task] | None:
        check = f"tasks({split!r})"
        try:
            tasks = list(rollout.tasks(split))
        except Exception as exc:
            self.add(check, False, f"{self.where}: tasks({split!r}) raised "
                     f"{type(exc).__name__}: {exc}", FIXES["tasks raised"])
            return None
        problems = _task_problems(tasks)
        if not tasks:
            problems.insert(0, f"the {split!r} split is empty; both 'train' and 'eval' need "
                               "at least one task")
        if problems:
            self.add(check, False, f"{self.where}: tasks({split!r}): " + "; ".join(problems),
                     FIXES["tasks"])
            return None
        self.add(check, True, f"{len(tasks)} tasks with unique ids")
        return tasks

    def deterministic(self, splits: dict[str, list[Task]], again: Rollout) -> None:
        for split, tasks in splits.items():
            try:
                difference = _first_difference(tasks, list(again.tasks(split)))
            except Exception as exc:
                difference = f"the second call raised {type(exc).__name__}: {exc}"
            if difference:
                self.add("tasks are deterministic", False, f"{self.where}: tasks({split!r}) "
                         f"differ between two constructions with the same seed: {difference}",
                         FIXES["deterministic"])
                return
        self.add("tasks are deterministic", True, "two constructions with the same seed give "
                 "the same tasks")

    def disjoint(self, splits: dict[str, list[Task]]) -> None:
        """Ids are unique within a split; the same id in both splits is allowed (an eval split
        that is the training set, scored separately) unless the rollout declares
        ``eval_held_out = True``."""
        check = "task ids across splits"
        shared = sorted({t.id for t in splits["train"]} & {t.id for t in splits["eval"]})
        both = f"{len(shared)} task id(s) are in both 'train' and 'eval', e.g. {shared[:3]}"
        if not shared:
            self.add(check, True, "no task id is in both 'train' and 'eval'")
        elif getattr(self.cls, "eval_held_out", False):
            self.add(check, False, f"{self.where}: {both}, but it declares eval_held_out = "
                     "True", FIXES["held out"])
        else:
            self.add(check, True, f"{both}: allowed, the rollout does not declare "
                     "eval_held_out = True")

    # ------------------------------------------------------------------ episodes

    async def exercise(self, rollout: Rollout, transport: ScriptedTransport,
                       rewards: RewardSet | None, splits: dict[str, list[Task]]) -> None:
        ok = True
        for split in SPLITS:
            task = splits[split][0]
            before = len(transport.calls)
            samples = await self.group(rollout, task, f"run_group ({split})")
            if samples is None:
                ok = False
                continue
            ok = self.samples(task, samples, f"samples ({split})") and ok
            ok = ok and self.engine_tokens(task, samples, transport.calls[before:],
                                           f"engine tokens ({split})")
            if rewards is not None and ok:
                await self.score(rewards, task, [s for s in samples if s.status in USABLE],
                                 f"default rewards ({split})")
        if not ok:
            return
        calls = len(transport.requests)
        task = splits["train"][0]
        for check, error in (("engine abort", EngineAborted("scripted engine abort",
                                                            url=SCRIPTED_URL)),
                             ("transport error", TransportError("scripted connection refused",
                                                                url=SCRIPTED_URL))):
            transport.replies = [error]
            if not calls:
                self.add(check, None, f"{self.where}: run_group never called the transport")
                continue
            samples = await self.group(rollout, task, check)
            if samples is not None and self.samples(task, samples, check, expect_usable=False):
                self.add(check, True, f"{len(samples)} samples, statuses "
                         f"{sorted({s.status.value for s in samples})}")
        transport.replies = list(self.replies)

    async def group(self, rollout: Rollout, task: Task, check: str) -> list[Any] | None:
        """``run_group(task, n)``, or None after reporting why it gave nothing."""
        try:
            return await asyncio.wait_for(rollout.run_group(task, self.n), self.timeout_s)
        except TimeoutError:
            problem = f"did not return within {self.timeout_s}s"
        except Exception as exc:
            problem = f"raised {type(exc).__name__}: {exc}"
        hint = (" instead of returning aborted/failed samples" if check in
                ("engine abort", "transport error") else "")
        self.add(check, False, f"{self.where}, task {task.id!r}: run_group(task, {self.n}) "
                 f"{problem}{hint}", FIXES["timeout" if problem.startswith("did not") else
                                         "run_group"])
        return None

    def samples(self, task: Task, returned: Any, check: str,
                expect_usable: bool = True) -> bool:
        """Validate like the core does, plus what training needs; report and return ok."""
        problems = []
        if isinstance(returned, list) and len(returned) < self.n:
            problems.append(f"returned {len(returned)} samples for {self.n} episodes; every "
                            "episode needs at least one sample (a failed one if it was lost)")
        originals = list(returned) if isinstance(returned, list) else []
        # as the plugin reported them: the core fails a usable sample that has a failure
        reported = {id(s): s.status for s in originals if isinstance(s, Sample)}
        for sample in checked(returned, task, self.name):
            if not any(sample is original for original in originals):
                problems.append(sample.failure or "?")
        for i, s in enumerate(x for x in originals if isinstance(x, Sample)):
            if s.task_id != task.id:
                problems.append(f"sample {i}: field 'task_id' is {s.task_id!r}")
            if not s.group_id:
                problems.append(f"sample {i}: field 'group_id' is empty; GRPO groups by it")
            if not expect_usable and reported[id(s)] in USABLE:
                problems.append(f"sample {i}: field 'status' is "
                                f"{SampleStatus(reported[id(s)]).value!r} though "
                                "every generation failed; expected 'aborted' or 'failed'")
        statuses = [s.status for s in originals if isinstance(s, Sample)]
        if expect_usable and not problems and not any(s in USABLE for s in statuses):
            reasons = {s.failure or "?" for s in originals if isinstance(s, Sample)}
            problems.append(f"no sample is completed or truncated; failures: {sorted(reasons)}")
        if problems:
            self.add(check, False, f"{self.where}, task {task.id!r}: " + "; ".join(problems),
                     FIXES["samples"])
            return False
        if expect_usable:
            self.add(check, True, f"{len(originals)} valid samples for task {task.id!r}")
        return True

    def engine_tokens(self, task: Task, samples: list[Sample], calls: list[Any],
                      check: str) -> bool:
        """Every usable sample against what the scripted engine produced for it (mask,
        logprobs, prompt_len) and every session's requests against the replies before them;
        report and return ok."""
        problems = session_problems(calls)
        usable = [s for s in samples if s.status in USABLE]
        problems += [p for i, s in enumerate(usable)
                     if (p := sample_problem(i, s, calls)) is not None]
        if problems:
            self.add(check, False, f"{self.where}, task {task.id!r}: " + "; ".join(problems[:3]),
                     FIXES["engine tokens"])
            return False
        turns = len(calls) / max(1, len(samples))
        self.add(check, True, f"loss mask 1 exactly on the engine's tokens, with its logprobs, "
                 f"in {len(usable)} samples ({turns:.1f} engine calls per episode)")
        return True

    async def score(self, rewards: RewardSet, task: Task, samples: list[Sample],
                    check: str) -> None:
        if not rewards:
            self.add(check, True, "none: the rollout scores its own samples")
            return
        await rewards.score_group(samples, task)
        problems = [s.failure or "?" for s in samples if s.status is SampleStatus.FAILED]
        for s in samples:
            try:
                s.validate()
            except SampleError as exc:
                problems.append(str(exc))
        if problems:
            self.add(check, False, f"{self.where}, task {task.id!r}: {sorted(set(problems))}",
                     FIXES["score"])
        else:
            self.add(check, True, f"{sorted(rewards.rewards)} scored task {task.id!r}: "
                     f"rewards {[round(s.reward, 4) for s in samples]}")

    def metrics(self, rollout: Rollout, rewards: RewardSet | None) -> None:
        try:
            values = rollout.metrics()
            if isinstance(values, Mapping) and rewards is not None:
                values = {**values, **rewards.metrics()}
        except Exception as exc:
            self.add("metrics", False, f"{self.where}: metrics() raised "
                     f"{type(exc).__name__}: {exc}", FIXES["metrics"])
            return
        bad = {k: v for k, v in (values.items() if isinstance(values, Mapping) else [])
               if not isinstance(k, str) or isinstance(v, bool)
               or not isinstance(v, (int, float)) or not math.isfinite(v)}
        if not isinstance(values, Mapping) or bad:
            self.add("metrics", False, f"{self.where}: metrics() must return "
                     f"{{name: finite float}}; got {bad or values!r:.120}", FIXES["metrics"])
        else:
            self.add("metrics", True, f"{sorted(values) or 'no metrics'}")


def _find_reward(name: str, manager: PluginManager | None) -> tuple[type, str, Any] | None:
    """A reward class, the plugin that registered it and that plugin's default options."""
    if manager is None or name not in manager.registry["reward"]:
        manager = PluginManager(environ={})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PluginWarning)
            manager.load_for_run([("reward", name)])
        if name not in manager.registry["reward"]:
            return None
    owner = manager.owner("reward", name).name
    parser = argparse.ArgumentParser(add_help=False)
    defaults = TrainFlags(parser, manager).parse([])
    cls = manager.get("reward", name)
    return cls, owner, defaults.options_for(cls, owner)


def _task_problems(tasks: list[Any]) -> list[str]:
    problems = []
    for i, task in enumerate(tasks):
        if not isinstance(task, Task):
            problems.append(f"entry {i} is a {type(task).__name__}, not a rollyard.Task")
        elif not isinstance(task.id, str) or not task.id:
            problems.append(f"entry {i}: field 'id' is {task.id!r}; ids are non-empty strings")
        elif not _prompt_ok(task.prompt):
            problems.append(f"task {task.id!r}: field 'prompt' is {task.prompt!r:.60}; expected "
                            "text or chat messages with 'role' and 'content'")
    counts = collections.Counter(t.id for t in tasks if isinstance(t, Task))
    problems += [f"task id {tid!r} appears {k} times" for tid, k in counts.items() if k > 1][:3]
    return problems


def _prompt_ok(prompt: Any) -> bool:
    if isinstance(prompt, str):
        return bool(prompt)
    return isinstance(prompt, list) and bool(prompt) and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in prompt)


def _first_difference(first: list[Task], second: list[Task]) -> str:
    if len(first) != len(second):
        return f"{len(first)} tasks, then {len(second)}"
    for i, (a, b) in enumerate(zip(first, second)):
        for field_name in ("id", "prompt", "data"):
            if getattr(a, field_name) != getattr(b, field_name):
                return (f"index {i} (task {a.id!r}): field {field_name!r} is "
                        f"{getattr(a, field_name)!r:.60}, then {getattr(b, field_name)!r:.60}")
    return ""
