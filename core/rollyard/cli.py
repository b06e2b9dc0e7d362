"""The ``rollyard`` command line. Heavy modules are imported only by the commands that run."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rollyard.config import defaults_from_toml, load_toml, repeated_on_command_line
from rollyard.errors import RollyardError
from rollyard.interfaces import Command
from rollyard.plugins import PluginManager
from rollyard.train_options import add_core_train_options, wanted_plugins

#: Commands of the core itself, as "module:Class" so they are imported only when used.
CORE_COMMANDS = {"init-model": "rollyard.models.command:InitModelCommand",
                 "new-plugin": "rollyard.scaffold:NewPluginCommand",
                 "check-plugin": "rollyard.testing.command:CheckPluginCommand"}


def _core_command(path: str) -> Command:
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


def _command_parsers(subparsers: argparse._SubParsersAction, manager: PluginManager) -> None:
    commands = {name: _core_command(path) for name, path in CORE_COMMANDS.items()}
    for name in manager.names("command"):
        commands.setdefault(name, manager.get("command", name)())
    for name, command in sorted(commands.items()):
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)


def build_parser(manager: PluginManager) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollyard", description="Plugin-based rollouts for RL of language models.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")

    plugins = subparsers.add_parser("plugins", help="list installed plugins",
                                    description="List installed plugins and what they register.")
    plugins.add_argument("--json", action="store_true", help="print JSON")
    plugins.add_argument("--hook", metavar="NAME", help="only plugins implementing hook NAME")
    plugins.set_defaults(handler=lambda args: cmd_plugins(args, manager))

    train = subparsers.add_parser(
        "train", help="run reinforcement learning (the embedded CPU default with no options)",
        description="Run an RL job. Options are grouped by owner; plugin options carry the "
                    "plugin's name.")
    add_core_train_options(train)
    manager.hooks.add_options(train)
    train.set_defaults(handler=lambda args: cmd_train(args, manager))

    _command_parsers(subparsers, manager)
    return parser


def cmd_plugins(args: argparse.Namespace, manager: PluginManager) -> int:
    records = [r for r in manager.records.values()
               if args.hook is None or args.hook in r.hooks]
    if args.json:
        print(json.dumps([r.as_dict() for r in records], indent=2))
        return 0
    table = Table(title="rollyard plugins")
    for column in ("name", "distribution", "version", "registers", "hooks", "errors"):
        table.add_column(column, overflow="fold")
    for r in records:
        registers = "\n".join(f"{kind}: {', '.join(names)}" for kind, names in r.registers.items())
        table.add_row(r.name, r.distribution, r.version, registers, ", ".join(r.hooks),
                      "\n".join(r.errors) or "-", style="red" if r.errors else None)
    Console().print(table)
    return 0


def cmd_train(args: argparse.Namespace, manager: PluginManager) -> int:
    from rollyard.run.driver import run_training

    run_training(args, manager)
    return 0


def _train_argv_plugins(argv: Sequence[str]) -> list[tuple[str, str]] | None:
    """For ``rollyard train`` (without --help), the plugins the run selects."""
    if not argv or argv[0] != "train" or "-h" in argv or "--help" in argv:
        return None
    pre = argparse.ArgumentParser(add_help=False)
    add_core_train_options(pre)
    known, _ = pre.parse_known_args(argv[1:])
    if known.config:
        pre.set_defaults(**defaults_from_toml(
            {k: v for k, v in load_toml(known.config).items() if not isinstance(v, dict)},
            pre, known.config))
        known, _ = pre.parse_known_args(argv[1:])
    return wanted_plugins(known)


def _short_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    warnings.formatwarning = _short_warning
    try:
        manager = PluginManager()
        wanted = _train_argv_plugins(argv)
        if wanted is None:
            manager.load_all()
        else:
            manager.load_for_run(wanted)
        parser = build_parser(manager)
        args = parser.parse_args(argv)
        if getattr(args, "config", None):
            train_parser = parser._subparsers._group_actions[0].choices["train"]
            given = repeated_on_command_line(train_parser, args)
            train_parser.set_defaults(**defaults_from_toml(load_toml(args.config), train_parser,
                                                           args.config))
            args = parser.parse_args(argv)
            vars(args).update(given)
        if not hasattr(args, "handler"):
            parser.print_help()
            return 2
        return int(args.handler(args) or 0)
    except RollyardError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return 1
    except KeyboardInterrupt:
        return 130



if __name__ == "__main__":
    sys.exit(main())
