"""The run's configuration: one typed :class:`RunConfig`, built once from defaults, run.toml and
command-line flags (flags win), saved as ``config.json`` and loadable again.

A run.toml holds core options as top-level keys (``rollout_plugin = "toy"``, ``steps = 10``)
and a table per plugin for that plugin's options (``[codegolf] tasks = "my.json"``).
config.json has the same shape, with every value resolved.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from rollyard.environments import Environment, environments_from_tables, parse_mix
from rollyard.errors import ConfigError
from rollyard.models.origin import PRETRAINED_DEFAULTS, model_defaults_of
from rollyard.options import (
    OptionSpec,
    ReadOnlyDict,
    at_least,
    between,
    coerce_values,
    construct_options,
    non_negative,
    option,
    option_specs,
    options_data,
    positive,
)
from rollyard.plugin_options import OptionTables, options_for


def reward_weight(text: str) -> None:
    """Check a ``--reward`` value: ``NAME`` or ``NAME=WEIGHT``."""
    parse_reward(text)


def parse_reward(text: str) -> tuple[str, float]:
    name, sep, weight = text.partition("=")
    if not name:
        raise ValueError("expected NAME or NAME=WEIGHT")
    try:
        return name, float(weight) if sep else 1.0
    except ValueError:
        raise ValueError(f"weight {weight!r} is not a number") from None


def resource_amount(text: str) -> None:
    """Check a ``--rollout-resources`` value: ``NAME=AMOUNT``."""
    parse_resource(text)


def parse_resource(text: str) -> tuple[str, float]:
    name, sep, amount = text.partition("=")
    if not name or not sep:
        raise ValueError("expected NAME=AMOUNT (a custom Ray resource and how much of it)")
    try:
        value = float(amount)
    except ValueError:
        raise ValueError(f"amount {amount!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"amount {amount!r} must be positive")
    return name, value


def rollout_mix(text: str) -> None:
    """Check a ``--rollout-plugin`` value: ``NAME`` or ``NAME:WEIGHT,…``."""
    try:
        parse_mix(text, "")
    except ConfigError as exc:  # the flag and the value are named by the caller
        raise ValueError(str(exc).split(": ", 1)[-1]) from None


RUN, ROLLOUT, INFERENCE, TRAINING = "run", "rollout", "inference", "training"
EVALUATION = "evaluation"

#: groups per optimizer update when --minibatches is left to its default
GROUPS_PER_MINIBATCH = 4


@dataclass(frozen=True)
class RunConfig:
    """Every option of ``rollyard train``. Plugin options are in :attr:`plugin_options`, one
    decoded instance per table: a plugin's ``Options``, or the generated
    :class:`~rollyard.options.LegacyOptions` of an ``add_options`` plugin."""

    name: str | None = option(None, group=RUN, help="run name (default: <rollout>-<timestamp>)")
    runs_dir: str = option("runs", group=RUN, help="folder holding run folders")
    steps: int = option(150, group=RUN, check=positive, help="training steps")
    seed: int = option(0, group=RUN, help="seed of task order, plugins, sampling, the trainer "
                                          "and the tiny model")
    failure_threshold: float = option(
        0.5, group=RUN, check=between(0.0, 1.0),
        help="stop when more than this share of a step's samples failed or aborted")
    progress: bool = option(True, group=RUN, help="show a progress bar (--no-progress: plain "
                                                  "output)")
    save_interval: int = option(0, group=RUN, check=non_negative, metavar="N",
                                help="save a checkpoint every N steps (0: only at the end, and "
                                     "when a signal or --max-seconds stops the run)")
    max_seconds: float = option(0.0, group=RUN, check=non_negative, metavar="S",
                                help="stop after the step that passes S seconds of training in "
                                     "this process, save and exit 0 (0: no limit)")
    stop_timeout: float = option(
        120.0, group=RUN, check=positive, metavar="S",
        help="after SIGINT or SIGTERM, wait at most S seconds for the step in progress; past "
             "them the step is abandoned and the last finished step is what is saved")
    log_samples_every: int = option(1, group=RUN, check=non_negative, metavar="N",
                                    help="write the samples of every Nth step to samples.jsonl "
                                         "(0: none)")
    async_rollout: bool = option(
        False, group=RUN, aliases=("--async",),
        help="overlap rollouts and training: the rollout of the next step runs while a step "
             "trains, on the weights the engines serve (at most --max-staleness updates "
             "behind)")
    max_staleness: int = option(
        1, group=RUN, check=non_negative, metavar="K",
        help="with --async: rollouts run at most K steps ahead of training, and samples "
             "generated more than K weight updates before the policy they train are dropped")
    partial_rollouts: bool = option(
        False, group=RUN,
        help="with --async: a weight push aborts the engines' running requests, which go on "
             "from the tokens they had on the new weights (instead of the push waiting for "
             "them to finish on the old ones)")

    rollout_plugin: str = option(
        "toy", group=ROLLOUT, metavar="NAME[:W],…", check=rollout_mix,
        help="the environment to train on (see `rollyard plugins`), or several with weights: "
             "toy:1,codegolf:3 splits each step's groups 1:3 (docs/mixing.md)")
    reward: tuple[str, ...] = option(
        (), group=ROLLOUT, metavar="NAME[=W]", check=reward_weight,
        help="rewards to apply (repeatable); default: the rollout's own")
    groups_per_step: int = option(64, group=ROLLOUT, check=positive, help="tasks per step")
    group_size: int = option(8, group=ROLLOUT, check=positive,
                             help="samples per task (GRPO group)")
    max_concurrent_groups: int = option(8, group=ROLLOUT, check=positive,
                                        help="groups in flight per rollout worker")
    rollout_workers: int = option(1, group=ROLLOUT, check=positive,
                                  help="Ray actors running the rollout plugin")
    rollout_resources: tuple[str, ...] = option(
        (), group=ROLLOUT, metavar="NAME=N", check=resource_amount,
        help="a custom Ray resource each rollout worker needs (repeatable): the workers run "
             "on the nodes of the cluster that have it (ray start --resources)")
    rollout_env: Literal["auto", "isolated", "shared"] = option(
        "auto", group=ROLLOUT,
        help="where the rollout workers run: a venv of the rollout plugin's own, built with uv "
             "from its declared requirements (isolated), the core's environment (shared), or "
             "what the rollout class declares (auto: isolated if Rollout.isolated); "
             "docs/isolation.md")
    # the remote rollout backend (docs/remote.md), declared together
    rollout_backend: Literal["ray", "remote"] = option(
        "ray", group=ROLLOUT,
        help="where the rollout plugin runs: Ray actors of this run (ray), or `rollyard "
             "env-server` processes reached over HTTP (remote: --env-server); docs/remote.md")
    env_server: str | None = option(None, group=ROLLOUT, metavar="URL[,URL…]",
                                    help="with --rollout-backend remote: the env servers")
    env_token_file: str | None = option(None, group=ROLLOUT, metavar="FILE",
                                        help="file holding the env servers' bearer token")
    env_ca_file: str | None = option(
        None, group=ROLLOUT, metavar="PEM",
        help="CA certificate(s) to trust for https:// env servers (a self-signed server's "
             "own certificate works; default: the system's trust store)")
    env_concurrency: int = option(8, group=ROLLOUT, check=positive,
                                  help="groups in flight per env server, at most")
    env_timeout: float = option(600.0, group=ROLLOUT, check=positive, metavar="S",
                                help="seconds one group's request may take before its env "
                                     "server counts as hung and the group goes elsewhere")
    env_max_starts_per_s: float = option(
        0.0, group=ROLLOUT, check=non_negative, metavar="R",
        help="start at most R groups per second on the env servers, with jitter (0: no "
             "limit)")
    max_new_tokens: int = option(24, group=ROLLOUT, check=positive,
                                 help="most tokens generated per turn")
    temperature: float = option(1.0, group=ROLLOUT, check=positive, help="sampling temperature")
    top_p: float = option(1.0, group=ROLLOUT, check=between(1e-9, 1.0),
                          help="nucleus sampling mass (1: off)")
    top_k: int = option(-1, group=ROLLOUT, check=at_least(-1), help="top-k sampling (-1: off)")
    rollout_timeout: float = option(300.0, group=ROLLOUT, check=positive,
                                    help="seconds one group may take before its samples are "
                                         "aborted")

    eval_interval: int = option(0, group=EVALUATION, check=non_negative, metavar="N",
                                help="evaluate on the rollout's eval split before training "
                                     "(step 0), every N steps and "
                                     "after the last step (0: never)")
    eval_tasks: int = option(0, group=EVALUATION, check=non_negative, metavar="K",
                             help="evaluate on the first K tasks of the eval split (0: all)")
    eval_samples: int = option(1, group=EVALUATION, check=positive, metavar="K",
                               help="samples per eval task; eval/pass@K counts a task solved "
                                    "when any of them solves it")
    eval_temperature: float = option(0.0, group=EVALUATION, check=non_negative,
                                     help="sampling temperature of evaluation (0: greedy)")

    model: str | None = option(None, group=INFERENCE, metavar="DIR",
                               help="Hugging Face model folder (default: a tiny model built "
                                    "with `rollyard init-model`)")
    model_defaults: Literal["auto", "scratch", "pretrained"] = option(
        "auto", group=INFERENCE,
        help="which defaults the options you leave unset get: the from-scratch ones (tuned "
             "on a tiny random model: --lr 3e-3, ...) or the pretrained ones (--lr 1e-6, "
             "--groups-per-step 8, --micro-batch-tokens 2048); auto: from-scratch for a "
             "folder `rollyard init-model` built (or no --model), pretrained for any other; "
             "config.json records the choice (docs/training.md)")
    engine: str = option("embedded", group=INFERENCE, metavar="NAME",
                         help="inference engine the run starts")
    engine_url: tuple[str, ...] = option((), group=INFERENCE, metavar="URL",
                                         help="use running engines instead of starting any "
                                              "(repeatable)")
    num_engines: int = option(1, group=INFERENCE, check=positive, help="engines to start")
    transport: str = option("sglang", group=INFERENCE, metavar="NAME",
                            help="client that talks to the engines")
    weight_sync: Literal["disk", "distributed"] = option(
        "distributed", group=INFERENCE,
        help="how new weights reach the engines after each update: a broadcast from the "
             "trainer's rank 0 over a process group with every engine (distributed: gloo on "
             "CPU, NCCL on GPU) or a Hugging Face folder each engine loads (disk)")

    train_tp: int = option(1, group=TRAINING, check=positive, help="tensor-parallel size")
    train_dp: int = option(1, group=TRAINING, check=positive, help="data-parallel size")
    train_ep: int = option(1, group=TRAINING, check=positive,
                           help="expert-parallel size of a mixture of experts: its experts "
                                "spread over this many of the --train-dp ranks")
    train_moe_aux_loss_coeff: float = option(
        0.0, group=TRAINING, check=non_negative,
        help="weight of a mixture of experts' router load-balancing loss (0: off)")
    train_dtype: Literal["fp32", "bf16"] = option(
        "fp32", group=TRAINING,
        help="precision of the trainer's parameters and activations; bf16 keeps fp32 master "
             "weights in megatron-core's mixed-precision optimizer and reduces gradients in "
             "fp32 (docs/training.md: precision)")
    num_cpus: int | None = option(None, group=TRAINING, check=positive,
                                  help="CPUs for the local Ray cluster (default: all)")
    ray_address: str | None = option(None, group=TRAINING,
                                     help="join an existing Ray cluster")
    algorithm: str = option("dapo", group=TRAINING, metavar="NAME",
                            help="advantage estimate and policy loss (see `rollyard plugins "
                                 "--hook register_algorithms`); its options are --NAME-*")
    lr: float = option(3e-3, group=TRAINING, check=positive, help="learning rate")
    lr_warmup_steps: int = option(0, group=TRAINING, check=non_negative, metavar="N",
                                  help="raise the learning rate linearly from 0 over the first "
                                       "N steps")
    lr_decay_style: Literal["constant", "linear", "cosine"] = option(
        "constant", group=TRAINING,
        help="after the warm-up, keep --lr or decay it to --min-lr over --lr-decay-steps")
    lr_decay_steps: int | None = option(None, group=TRAINING, check=positive, metavar="N",
                                        help="steps from the start to the end of the decay "
                                             "(default: --steps)")
    min_lr: float = option(0.0, group=TRAINING, check=non_negative,
                           help="learning rate at the end of the decay")
    tis_cap: float | None = option(None, group=TRAINING, check=positive, metavar="C",
                                   help="truncated importance sampling against the engine's "
                                        "logprobs, weights capped at C (default: off)")
    max_resample_factor: float = option(
        4.0, group=ROLLOUT, check=at_least(1.0),
        help="when groups with equal rewards are filtered, draw more groups, up to this many "
             "times --groups-per-step in all, until the step has --groups-per-step groups "
             "with a learning signal")
    replay_best: bool = option(
        True, group=ROLLOUT,
        help="keep each training task's highest-reward sample and add it to a later group of "
             "that task whose samples all scored below it (self-imitation), so a group that "
             "settled on a worse answer still carries a learning signal")
    kl_coef: float = option(0.0, group=TRAINING, check=non_negative,
                            help="weight of the KL penalty to the initial policy")
    entropy_coef: float = option(0.0, group=TRAINING, help="weight of the entropy bonus")
    micro_batch_size: int = option(128, group=TRAINING, check=positive,
                                   help="samples per forward pass, at most")
    micro_batch_tokens: int = option(8192, group=TRAINING, check=positive, metavar="N",
                                     help="padded tokens per forward pass (samples × the "
                                          "longest), at most; a longer sample has a pass of "
                                          "its own. Lower it for a large vocabulary or model")
    share_prompts: bool = option(
        True, group=TRAINING, help="compute a prompt once for the samples that share it (one "
                                   "input row: the prompt, then each response, which sees only "
                                   "the prompt and itself); the loss is the same")
    minibatches: int | None = option(
        None, group=TRAINING, check=positive,
        help="optimizer updates per step: the step's samples are split into this many "
             f"mini-batches, one update each (default: one per {GROUPS_PER_MINIBATCH} groups "
             "of --groups-per-step)")
    keep_zero_variance_groups: bool = option(
        False, group=TRAINING, help="train on groups whose rewards are all equal")

    plugin_options: Mapping[str, Any] = dataclasses.field(default_factory=dict,
                                                          metadata={"option": False})
    #: The ``[[rollout]]`` tables of a run.toml (empty: ``rollout_plugin`` says it all).
    rollouts: tuple[Environment, ...] = dataclasses.field(default=(),
                                                          metadata={"option": False})

    def __post_init__(self) -> None:
        for spec in core_specs():
            object.__setattr__(self, spec.name, spec.coerce(getattr(self, spec.name),
                                                            spec.flag))
        if self.minibatches is None:
            # resolved here, so config.json records the updates per step the run made
            object.__setattr__(self, "minibatches",
                               max(1, self.groups_per_step // GROUPS_PER_MINIBATCH))
        if self.lr_decay_style != "constant" and self.lr_decay_steps is None:
            # resolved here, so config.json keeps the horizon when a resume changes --steps
            object.__setattr__(self, "lr_decay_steps", self.steps)
        if self.lr_decay_steps is not None and self.lr_decay_steps <= self.lr_warmup_steps:
            raise ConfigError(f"--lr-decay-steps {self.lr_decay_steps} must be more than "
                              f"--lr-warmup-steps {self.lr_warmup_steps}: the decay starts "
                              "where the warm-up ends")
        if self.async_rollout and self.max_staleness == 0:
            raise ConfigError("--max-staleness 0 with --async: a staleness bound of 0 is sync "
                              "mode; leave out --async, or set --max-staleness 1 or more")
        if self.partial_rollouts and not self.async_rollout:
            raise ConfigError("--partial-rollouts without --async: a synchronous run never "
                              "updates the weights while it generates; add --async")

    # ------------------------------------------------------------------ derived

    @property
    def environments(self) -> tuple[Environment, ...]:
        """The run's environments: its ``[[rollout]]`` tables, else ``--rollout-plugin``'s."""
        return self.rollouts or parse_mix(self.rollout_plugin)

    @property
    def mixed(self) -> bool:
        """Whether the run trains on more than one environment."""
        return len(self.environments) > 1

    @property
    def reward_weights(self) -> dict[str, float] | None:
        """``{reward: weight}`` from ``--reward``; None when the rollout's defaults apply."""
        return dict(parse_reward(text) for text in self.reward) if self.reward else None

    def wanted_plugins(self) -> list[tuple[str, str]]:
        """(kind, name) of every plugin this run selects."""
        wanted = [("rollout", env.name) for env in self.environments]
        wanted += [("transport", self.transport), ("algorithm", self.algorithm)]
        if not self.engine_url:
            wanted.append(("engine", self.engine))
        rewards = [*(self.reward_weights or {})]
        for env in self.environments:
            rewards += [parse_reward(text)[0] for text in env.overrides.get("reward", ())]
        return wanted + [("reward", name) for name in dict.fromkeys(rewards)]

    def options_for(self, cls: type, plugin: str) -> Any:
        """The options a registered class of ``plugin`` (entry-point name) receives."""
        return options_for(cls, plugin, self.plugin_options)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ data

    def to_data(self) -> dict[str, Any]:
        """Core options at top level, one table per plugin; plain JSON/TOML data."""
        data: dict[str, Any] = {spec.name: spec.to_data(getattr(self, spec.name))
                                for spec in core_specs()}
        for table, values in sorted(self.plugin_options.items()):
            data[table] = options_data(values)
        if self.rollouts:  # the tables say which plugins; rollout_plugin is their label
            data["rollout"] = [env.to_data() for env in self.rollouts]
        return data

    def save(self, path: str | Path) -> None:
        """Write ``config.json`` atomically."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_data(), indent=2, default=str) + "\n")
        os.replace(tmp, path)

    @classmethod
    def from_data(cls, data: Mapping[str, Any], tables: OptionTables,
                  source: str = "config") -> RunConfig:
        """A config from run.toml / config.json data over the defaults. Unknown keys and bad
        values are ConfigErrors naming ``source`` and the key."""
        return build_run_config(tables, layers=[(source, data)])

    @classmethod
    def load(cls, path: str | Path, tables: OptionTables) -> RunConfig:
        """Read a saved ``config.json``."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{str(path)!r} does not exist") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{str(path)!r} is not valid JSON: {exc}") from None
        return cls.from_data(data, tables, str(path))


#: Core options that ``rollyard train --resume`` may change: how long the run goes on, where it
#: runs, what it prints and records, and how it evaluates (evaluation never touches what
#: training draws); none changes what a step computes unless something fails or times out.
#: Every other option, plugin options included (observers' aside), must keep its saved value.
RESUME_SAFE = frozenset({"steps", "save_interval", "max_seconds", "stop_timeout", "progress",
                         "failure_threshold", "rollout_timeout", "num_cpus", "ray_address",
                         "engine_url", "weight_sync", "log_samples_every", "eval_interval",
                         "eval_tasks", "eval_samples", "eval_temperature", "rollout_env",
                         "rollout_resources", "env_server", "env_token_file",
                         "env_ca_file", "env_concurrency", "env_timeout", "env_max_starts_per_s"})


def core_specs() -> list[OptionSpec]:
    """The core options of ``rollyard train``, in declaration order."""
    return option_specs(RunConfig, "")


class _FrozenTable(ReadOnlyDict):
    """A table of a :class:`ConfigView`: a dict that cannot change."""

    read_only = "the run config is read-only"

    def __init__(self, items: Mapping[str, Any]) -> None:
        dict.__init__(self, items)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class _FrozenList(list):
    """A list value of a :class:`ConfigView`: a list that cannot change."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("the run config is read-only")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = clear = extend = insert = _refuse  # type: ignore[assignment]
    pop = remove = reverse = sort = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def _frozen(value: Any) -> Any:
    """Plain data that cannot change: tables and lists read-only, equal to the originals."""
    if isinstance(value, Mapping):
        return _FrozenTable({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return _FrozenList(_frozen(item) for item in value)
    return value


class ConfigView(_FrozenTable):
    """A read-only, typed view of a run's config, for plugins and observers.

    Attributes are the RunConfig's, typed (``config.seed``, ``config.reward`` a tuple,
    ``config.plugin_options["toy"]`` the toy rollout's ``Options`` instance). Mapping access
    is the config's plain data, as in config.json (``config["seed"]``, ``config["toy"]`` a
    table), for plugins written when the config was that dict; it is also a ``dict``, so
    ``json.dumps(config)`` works. Nothing can be set, on the view or in its tables.
    """

    def __init__(self, config: RunConfig) -> None:
        super().__init__({key: _frozen(value) for key, value in config.to_data().items()})
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self._config, name)
        return MappingProxyType(value) if name == "plugin_options" else value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the run config is read-only (setting {name!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ConfigView, (self._config,))

    def __repr__(self) -> str:
        return f"ConfigView({dict(self)!r})"


# --------------------------------------------------------------------------- building


Layer = tuple[str, Mapping[str, Any]]


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None


def build_run_config(tables: OptionTables, layers: list[Layer],
                     flags: Mapping[str, Any] | None = None) -> RunConfig:
    """Defaults, then each ``(source, data)`` layer (run.toml, config.json), then ``flags``:
    parsed command-line values keyed by their argparse ``dest`` (the flag for typed options,
    ``{"--steps": 3}``; ``"plugin:name"`` for ``add_options`` ones)."""
    specs = {spec.name: spec for spec in core_specs()}
    core: dict[str, Any] = {}
    classes = tables.classes()
    values: dict[str, dict[str, Any]] = {prefix: {} for prefix in classes}
    rollouts: tuple[Environment, ...] = ()
    for source, data in layers:
        for key, value in data.items():
            if key == "rollout" and not isinstance(value, Mapping):
                rollouts = tuple(_checked_overrides(env, specs, source)
                                 for env in environments_from_tables(value, source))
                if data.get("rollout_plugin", _label(rollouts)) != _label(rollouts):
                    raise ConfigError(f"{source}: give either rollout_plugin or [[rollout]] "
                                      "tables, not both")
                core.pop("rollout_plugin", None)
                continue
            if isinstance(value, Mapping):
                if key not in classes:
                    raise ConfigError(f"{source}: unknown table [{key}] (no installed plugin "
                                      "declares options under that name; known: "
                                      f"{', '.join(sorted(classes))})")
                values[key].update(coerce_values(classes[key], key, value, source))
                continue
            spec = specs.get(key.replace("-", "_"))
            if spec is None:
                raise ConfigError(f"{source}: unknown option {key!r} (no flag "
                                  f"--{key.replace('_', '-')})")
            if spec.name == "rollout_plugin" and isinstance(data.get("rollout"), list):
                continue  # the label of the layer's [[rollout]] tables (config.json)
            core[spec.name] = spec.coerce(value, f"{source}: {key!r}")
            if spec.name == "rollout_plugin":
                rollouts = ()
    by_flag = {spec.flag: spec.name for spec in specs.values()}
    by_dest = tables.flag_dests()
    for flag, value in (flags or {}).items():
        if flag in by_flag:
            core[by_flag[flag]] = value
            if by_flag[flag] == "rollout_plugin":
                rollouts = ()  # --rollout-plugin wins over a run.toml's [[rollout]] tables
        elif flag in by_dest:  # parsed by argparse; typed repeated flags become tuples
            prefix, spec = by_dest[flag]
            values[prefix][spec.name] = (spec.coerce(value, flag) if isinstance(spec, OptionSpec)
                                         else value)
    _apply_model_defaults(core)
    plugin_options = {prefix: construct_options(classes[prefix], prefix, values[prefix])
                      for prefix in classes}
    if rollouts:
        core["rollout_plugin"] = _label(rollouts)
    return RunConfig(**core, plugin_options=plugin_options, rollouts=rollouts)


def _label(rollouts: tuple[Environment, ...]) -> str:
    """``rollout_plugin`` of a run of ``[[rollout]]`` tables: the plugin of one, else the
    labels and weights (what the console and observers show)."""
    if len(rollouts) == 1:
        return rollouts[0].name
    return ",".join(f"{env.label}:{env.weight:g}" for env in rollouts)


def _checked_overrides(env: Environment, specs: Mapping[str, OptionSpec],
                       source: str) -> Environment:
    """``env`` with its core option overrides coerced and checked as the options are."""
    return dataclasses.replace(env, overrides={
        key: specs[key].coerce(value, f"{source}: [[rollout]] {env.label!r} {key!r}")
        for key, value in env.overrides.items()})


def _apply_model_defaults(core: dict[str, Any]) -> None:
    """Resolve ``model_defaults: auto`` by the model folder (:mod:`rollyard.models.origin`)
    and, for a pretrained model, fill in the pretrained default of each option not set."""
    chosen = core.get("model_defaults", "auto")
    if chosen == "auto":
        chosen = model_defaults_of(core.get("model"))
    core["model_defaults"] = chosen
    if chosen == "pretrained":
        for name, value in PRETRAINED_DEFAULTS.items():
            core.setdefault(name, value)
