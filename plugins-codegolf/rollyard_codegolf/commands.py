"""``rollyard codegolf exec FILE`` and ``rollyard codegolf score FILE --task ID``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from rollyard import Command, ConfigError

#: Characters of stdout/stderr that ``exec`` prints (the sandbox caps them in bytes first).
PRINT_CHARS = 4000


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path!r}: {exc}") from exc


def _sandbox(args: SimpleNamespace):
    from rollyard_codegolf.sandbox import Sandbox, SandboxLimits, SandboxUnavailable

    try:
        return Sandbox(SandboxLimits(wall_s=args.timeout), args.unsafe_no_sandbox)
    except SandboxUnavailable as exc:
        raise ConfigError(str(exc)) from exc


class CodegolfCommand(Command):
    """Run or score one program through the sandbox from the command line."""

    name = "codegolf"
    help = "run or score a Python program in the code-golf sandbox"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="codegolf_command", metavar="ACTION", required=True)
        run = sub.add_parser("exec", help="run FILE in the sandbox and print the result as JSON")
        run.add_argument("file", metavar="FILE", help="Python program")
        run.add_argument("--stdin", metavar="FILE", help="file fed to the program's stdin")
        score = sub.add_parser("score", help="score FILE on a task's hidden tests (JSON)")
        score.add_argument("file", metavar="FILE", help="Python program")
        score.add_argument("--task", required=True, metavar="ID", help="task id")
        score.add_argument("--tasks", metavar="PATH", help="task file or folder (default: the "
                                                           "shipped problems)")
        score.add_argument("--all-tests", action="store_true",
                           help="also run the shown example, not only the hidden tests")
        for action in (run, score):
            action.add_argument("--timeout", type=float, default=4.0, metavar="S",
                                help="wall-clock seconds per run (default 4)")
            action.add_argument("--unsafe-no-sandbox", "--codegolf-unsafe-no-sandbox",
                                dest="unsafe_no_sandbox", action="store_true",
                                help="run without bubblewrap isolation where it cannot run")

    def run(self, args: SimpleNamespace) -> int:
        if args.codegolf_command == "exec":
            return self._exec(args)
        return self._score(args)

    def _exec(self, args: SimpleNamespace) -> int:
        code = _read(args.file, "program")
        stdin = _read(args.stdin, "stdin file") if args.stdin else ""
        result = _sandbox(args).run(code, stdin).as_dict()
        for stream in ("stdout", "stderr"):
            if len(result[stream]) > PRINT_CHARS:
                result[stream] = result[stream][:PRINT_CHARS]
                result[f"{stream}_truncated"] = True
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0

    def _score(self, args: SimpleNamespace) -> int:
        from rollyard_codegolf.scoring import score_program
        from rollyard_codegolf.tasks import load_tasks

        code = _read(args.file, "program")
        tasks = {t.id: t for t in load_tasks(args.tasks)}
        if args.task not in tasks:
            raise ConfigError(f"--task {args.task!r}: no such codegolf task; known ids include "
                              f"{', '.join(sorted(tasks)[:8])} …")
        score = score_program(code, tasks[args.task], _sandbox(args),
                              hidden_only=not args.all_tests)
        json.dump({"task": args.task, **score.as_dict()}, sys.stdout, indent=2)
        print()
        return 0
