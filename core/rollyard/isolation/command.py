"""``rollyard env build NAME`` and ``rollyard env list``: isolated rollout environments ahead of
a run."""

from __future__ import annotations

import argparse
import json
import sys
from types import SimpleNamespace

from rollyard.interfaces import Command


class EnvCommand(Command):
    """Build the venv of a rollout plugin ahead of time, or list the built ones."""

    name = "env"
    help = "isolated rollout environments: build one ahead of a run, or list the built ones"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        build = actions.add_parser("build", help="build (or find) the venv of rollout NAME "
                                                 "and print its path")
        build.add_argument("rollout", metavar="NAME", help="the rollout plugin's name")
        listing = actions.add_parser("list", help="list the built venvs")
        listing.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: SimpleNamespace) -> int:
        from rollyard.isolation.envs import built_envs, ensure_env, env_spec, envs_dir

        if args.action == "build":
            from rollyard.plugins import PluginManager

            manager = PluginManager()
            manager.load_for_run([("rollout", args.rollout)])
            manager.get("rollout", args.rollout)  # unknown names: the usual clear error
            distribution = manager.owner("rollout", args.rollout).distribution
            path = ensure_env(env_spec(distribution), lambda line: print(line, file=sys.stderr))
            print(path)
            return 0
        envs = built_envs()
        if args.json:
            print(json.dumps(envs, indent=2))
        elif not envs:
            print(f"no isolated environments in {envs_dir()}")
        for env in [] if args.json else envs:
            wanted = ", ".join(env["requirements"]) or "-"
            print(f"{env['label']}  {env['path']}  (requires: {wanted}; built in "
                  f"{env['build_seconds']} s)")
        return 0
