"""The flags of ``rollyard train``, derived from the typed declarations of the core's options
(:class:`rollyard.config.RunConfig`) and of every loaded plugin's, and the RunConfig they give."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from rollyard.config import Layer, RunConfig, build_run_config, core_specs, load_toml
from rollyard.options import add_spec_arguments, construct_options
from rollyard.plugin_options import OptionTables
from rollyard.plugins import PluginManager


class TrainFlags:
    """The ``train`` parser's flags: the core's and every loaded plugin's, derived from their
    typed declarations (legacy ``add_options`` plugins add theirs through the hook)."""

    def __init__(self, parser: argparse.ArgumentParser, manager: PluginManager,
                 resumable: bool = True) -> None:
        self.parser = parser
        parser.add_argument("--config", metavar="TOML", default=None,
                            help="read options from a run.toml; flags win (default: none)")
        if resumable:
            parser.add_argument(
                "--resume", metavar="RUN_DIR", default=None,
                help="continue the run in RUN_DIR from its newest checkpoint, with its "
                     "config.json; flags may change only how long it goes on, where it runs "
                     "and what it prints (default: a new run)")
        self.actions = []
        groups: dict[str, list] = {}
        for spec in core_specs():
            groups.setdefault(spec.group or "run", []).append(spec)
        for title, specs in groups.items():
            self.actions += add_spec_arguments(parser.add_argument_group(title), specs)
        self.tables = manager.option_tables(parser)
        for table in self.tables.typed.values():
            self.actions += add_spec_arguments(
                parser.add_argument_group(f"{table.prefix} (plugin options)"), table.specs)
        self.actions += [o.action for t in self.tables.legacy.values() for o in t.options]

    def plugin_flags(self) -> list[str]:
        """The flags the loaded plugins declare."""
        typed = [spec.flag for table in self.tables.typed.values() for spec in table.specs]
        legacy = [flag for table in self.tables.legacy.values() for o in table.options
                  for flag in o.action.option_strings]
        return typed + legacy

    def default_options(self) -> dict[str, Any]:
        """Every plugin option table's options when none is given, by table."""
        return {prefix: construct_options(cls, prefix, {})
                for prefix, cls in self.tables.classes().items()}

    def parse(self, argv: Sequence[str]) -> RunConfig:
        """Parse ``argv`` (the ``train`` arguments) into a RunConfig; usage errors exit."""
        return self.config(vars(self.parser.parse_args(list(argv))), argv)

    def config(self, parsed: Mapping[str, Any], argv: Sequence[str]) -> RunConfig:
        """The RunConfig of defaults, ``--config`` and the flags given in ``argv``, from the
        values argparse ``parsed`` out of it."""
        layers: list[Layer] = []
        if parsed.get("resume"):
            layers.append(_resume_layer(parsed["resume"]))
        if parsed.get("config"):
            layers.append((parsed["config"], load_toml(parsed["config"])))
        given = {action.dest: parsed[action.dest] for action in self.actions
                 if _given(action, argv) and action.dest in parsed}
        config = build_run_config(self.tables, layers, given)
        if parsed.get("resume"):
            from rollyard.run.resume import resumed_config

            config = resumed_config(parsed["resume"], self.tables, config)
        return config


def _resume_layer(run_dir: str) -> Layer:
    """The saved config.json of ``--resume RUN_DIR``, the first layer of a resumed run."""
    from rollyard.run.resume import CONFIG_FILE, saved_config_data

    return (f"{run_dir}/{CONFIG_FILE}", saved_config_data(run_dir))


def _given(action: argparse.Action, argv: Sequence[str]) -> bool:
    """Whether ``argv`` names the option (abbreviations are off for ``train``)."""
    return any(token == flag or token.startswith(flag + "=")
               for token in argv for flag in action.option_strings)


def train_argv_plugins(argv: Sequence[str]) -> list[tuple[str, str]] | None:
    """For ``rollyard train`` (without --help), the plugins the run selects."""
    if not argv or argv[0] != "train" or "-h" in argv or "--help" in argv:
        return None
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config", default=None)
    pre.add_argument("--resume", default=None)
    actions = add_spec_arguments(pre, core_specs())
    known = vars(pre.parse_known_args(argv[1:])[0])
    layers: list[Layer] = []
    if known["resume"]:
        source, data = _resume_layer(known["resume"])
        layers.append((source, {k: v for k, v in data.items() if not isinstance(v, dict)}))
    if known["config"]:
        top = {k: v for k, v in load_toml(known["config"]).items() if not isinstance(v, dict)}
        layers.append((known["config"], top))
    given = {a.dest: known[a.dest] for a in actions if _given(a, argv) and a.dest in known}
    return build_run_config(OptionTables(), layers, given).wanted_plugins()
