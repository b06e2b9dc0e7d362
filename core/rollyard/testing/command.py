"""``rollyard check-plugin NAME``: the conformance check from the command line."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

from rollyard.interfaces import Command


class CheckPluginCommand(Command):
    """Load an installed plugin as a run would and check it against the contract."""

    name = "check-plugin"
    help = "check an installed plugin against rollyard's contract (exit 1 if a check fails)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--episodes", type=int, default=3, metavar="N",
                            help="episodes per run_group call")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("plugin", metavar="NAME", help="entry-point name of the plugin")
        parser.add_argument("plugin_argv", metavar="OPTION", nargs=argparse.REMAINDER,
                            help="the plugin's own options, as for rollyard train "
                                 "(--NAME-num-tasks 20)")

    def run(self, args: SimpleNamespace) -> int:
        from rollyard.testing.conformance import check_plugin

        report = check_plugin(args.plugin, argv=args.plugin_argv, group_size=args.episodes)
        print(json.dumps(report.as_dict(), indent=2) if args.json else report.format())
        return 0 if report.ok else 1
