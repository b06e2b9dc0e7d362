"""``rollyard verifiers install ENV``: build the venv a verifiers environment runs in, ahead of
a run (the ``prime env install`` of rollyard), and print its path."""

from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace

from rollyard import Command


class VerifiersCommand(Command):
    """Build (or find) the isolated venv of a verifiers environment."""

    name = "verifiers"
    help = "verifiers environments: build the venv one runs in ahead of a run"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        install = actions.add_parser(
            "install", help="build (or find) the venv environment ENV runs in, print its path")
        install.add_argument("env", metavar="ENV", help="verifiers environment id (as --vf-env)")
        install.add_argument("--verifiers-version", metavar="X", dest="version",
                             help="verifiers X instead of the newest release the environment "
                                  "can run on (as in rollyard train)")

    def run(self, args: SimpleNamespace) -> int:
        from rollyard.isolation.envs import ensure_env, env_spec
        from rollyard.plugins import PluginManager

        from rollyard_verifiers.selection import environment_request

        def notice(line: str) -> None:
            print(line, file=sys.stderr)

        request = environment_request(args.env, args.version)
        if request is None:
            notice(f"verifiers environment {args.env!r} is a verifiers 0.4 taskset: it runs in "
                   "the environment rollyard-verifiers is installed in; nothing to build")
            print(sys.prefix)
            return 0
        manager = PluginManager()
        manager.load_for_run([("rollout", "verifiers")])
        distribution = manager.owner("rollout", "verifiers").distribution
        notice(f"{args.env}: {', '.join(request.requirements)}")
        print(ensure_env(env_spec(distribution, request), notice))
        return 0
