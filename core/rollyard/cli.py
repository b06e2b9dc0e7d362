"""The ``rollyard`` command line. Heavy modules are imported only by the commands that run."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
import warnings
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from rich.console import Console
from rich.markup import escape

from rollyard.env_server.command import add_server_arguments
from rollyard.errors import MissingTrainStack, RollyardError, describe_error
from rollyard.interfaces import Command
from rollyard.listing import plugins_table
from rollyard.plugins import PluginManager
from rollyard.train_flags import TrainFlags, train_argv_plugins
from rollyard.train_stack import require_train_stack

#: Commands of the core itself, as "module:Class" so they are imported only when used.
CORE_COMMANDS = {"init-model": "rollyard.models.command:InitModelCommand",
                 "models": "rollyard.models.command:ModelsCommand",
                 "new-plugin": "rollyard.scaffold:NewPluginCommand",
                 "check-plugin": "rollyard.testing.command:CheckPluginCommand",
                 "env": "rollyard.isolation.command:EnvCommand"}


def _core_command(path: str) -> Command:
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


def _command_parsers(subparsers: Any, manager: PluginManager) -> None:
    commands = {name: _core_command(path) for name, path in CORE_COMMANDS.items()}
    for name in manager.names("command"):
        commands.setdefault(name, manager.get("command", name)())
    for name, command in sorted(commands.items()):
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(handler=lambda args, run=command.run: run(_command_args(args)))


def _command_args(args: argparse.Namespace) -> SimpleNamespace:
    """A plugin command's parsed arguments, without the CLI's own bookkeeping."""
    values = {k: v for k, v in vars(args).items() if k not in ("handler", "argv", "command")}
    return SimpleNamespace(**values)


def build_parser(manager: PluginManager) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollyard", description="Plugin-based rollouts for RL of language models.")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print its full traceback too (also accepted after "
                             "the command)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")

    plugins = subparsers.add_parser("plugins", help="list installed plugins",
                                    description="List installed plugins and what they register.")
    plugins.add_argument("--json", action="store_true", help="print JSON")
    plugins.add_argument("--hook", metavar="NAME", help="only plugins implementing hook NAME")
    plugins.set_defaults(handler=lambda args: cmd_plugins(args, manager))

    train = subparsers.add_parser(
        "train", help="run reinforcement learning (the embedded CPU default with no options)",
        description="Run an RL job. Options are grouped by owner; plugin options carry the "
                    "plugin's name. Flags win over --config.",
        allow_abbrev=False)
    train_flags = TrainFlags(train, manager)
    train.set_defaults(handler=lambda args: cmd_train(train_flags, args, manager))

    evaluate = subparsers.add_parser(
        "eval", help="evaluate a Hugging Face model folder on a rollout's eval split",
        description="Evaluate --model on the --rollout-plugin's eval split, as --eval-interval "
                    "does during training (the --eval-* options), with the inference engines "
                    "only: no Ray, no trainer. Takes the options of `rollyard train`; those "
                    "of training have no effect.",
        allow_abbrev=False)
    evaluate.add_argument("--json", action="store_true",
                          help="print the metrics as one JSON object")
    eval_flags = TrainFlags(evaluate, manager, resumable=False)
    evaluate.set_defaults(handler=lambda args: cmd_eval(eval_flags, args, manager))

    server = subparsers.add_parser(
        "env-server", help="serve a rollout plugin over authenticated HTTP (docs/remote.md)",
        description="Serve --rollout-plugin (its tasks, episodes and rewards) to trainers run "
                    "with --rollout-backend remote. Takes the rollout plugin's options.",
        allow_abbrev=False)
    server_flags = TrainFlags(server, manager, resumable=False)
    add_server_arguments(server)
    server.set_defaults(handler=lambda args: cmd_env_server(server_flags, args, manager))

    _command_parsers(subparsers, manager)
    return parser


def cmd_plugins(args: argparse.Namespace, manager: PluginManager) -> int:
    records = [r for r in manager.records.values()
               if args.hook is None or args.hook in r.hooks]
    if args.json:
        print(json.dumps([r.as_dict() for r in records], indent=2))
        return 0
    Console().print(plugins_table(records))
    return 0


def cmd_train(flags: TrainFlags, args: argparse.Namespace, manager: PluginManager) -> int:
    require_train_stack("train")
    from rollyard.run.driver import run_training
    from rollyard.run.signals import RunStopped

    try:
        run_training(flags.config(vars(args), args.argv), manager, flags.default_options(),
                     resume=args.resume)
    except RunStopped as stopped:  # SIGINT/SIGTERM: saved, everything stopped; say where
        Console(stderr=True).print(escape(str(stopped)), highlight=False)
        return stopped.exit_code
    return 0


def cmd_eval(flags: TrainFlags, args: argparse.Namespace, manager: PluginManager) -> int:
    require_train_stack("eval")
    from rich.table import Table

    from rollyard.run.eval_command import evaluate_model

    metrics = evaluate_model(flags.config(vars(args), args.argv), manager)
    if args.json:
        print(json.dumps(metrics))
        return 0
    table = Table("metric", "value", title="rollyard eval")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.4g}")
    Console().print(table)
    return 0


def cmd_env_server(flags: TrainFlags, args: argparse.Namespace, manager: PluginManager) -> int:
    from rollyard.env_server.command import serve

    return serve(flags.config(vars(args), args.argv), manager, _command_args(args))


def _short_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


def _is_from_ray(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] == "ray"


def report_error(exc: BaseException, debug: bool) -> None:
    """Say what went wrong in one ``error:`` line on stderr (where the traceback is, when the
    error carries that as a note); with ``debug`` the full traceback comes first."""
    if debug:
        traceback.print_exception(exc)
    line = describe_error(exc)
    notes = [note for note in getattr(exc, "__notes__", ()) if note]
    if notes:
        line += f" ({'; '.join(notes)})"
    Console(stderr=True).print(f"[bold red]error:[/] {escape(line)}", highlight=False,
                               soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug anywhere (rollyard train ... --debug): the CLI's own, not a command's option
    debug = "--debug" in argv
    argv = [arg for arg in argv if arg != "--debug"]
    warnings.formatwarning = _short_warning
    try:
        manager = PluginManager()
        wanted = train_argv_plugins(argv)
        if wanted is None:
            manager.load_all()
        else:
            manager.load_for_run(wanted)
        parser = build_parser(manager)
        args = parser.parse_args(argv)
        args.argv = argv
        if not hasattr(args, "handler"):
            parser.print_help()
            return 2
        return int(args.handler(args) or 0)
    except MissingTrainStack as exc:  # one line, the install command included
        print(exc, file=sys.stderr)
        return 1
    except RollyardError as exc:
        report_error(exc, debug)
        return 1
    except Exception as exc:
        # what a Ray actor raised reaches the user as its own line, not Ray's wrapper; any
        # other exception is a bug of rollyard's, shown with its traceback
        if not _is_from_ray(exc):
            raise
        report_error(exc, debug)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
