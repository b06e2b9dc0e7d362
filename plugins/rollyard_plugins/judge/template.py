"""What the judge is asked, and how its score is read from the reply."""

from __future__ import annotations

import math
import pathlib
import re
import string

from rollyard.errors import ConfigError
from rollyard.types import Task

#: The fields a template may use.
FIELDS = frozenset({"prompt", "response", "reference"})

DEFAULT_TEMPLATE = """\
You are grading a reply to a task.

Task:
{prompt}

Reference answer (may be empty):
{reference}

Reply to grade:
{response}

Judge how well the reply solves the task. Explain briefly, then end with one line of the form
SCORE: <a number between 0 and 1>"""

#: ``SCORE: x`` on a line of its own (case-insensitive, optional markdown emphasis around it).
_SCORE_LINE = re.compile(r"^\W*score\W*:\s*\**\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*\**\s*$",
                         re.IGNORECASE)


class JudgeTemplate:
    """A judge prompt: Python format fields ``{prompt}``, ``{response}``, ``{reference}``."""

    def __init__(self, text: str, where: str = "the built-in template") -> None:
        try:
            used = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
        except ValueError as exc:
            raise ConfigError(f"judge template {where}: {exc} (write a literal brace as "
                              f"{{{{ or }}}})") from exc
        unknown = sorted(used - FIELDS)
        if unknown:
            raise ConfigError(f"judge template {where} uses unknown field(s) {unknown}; the "
                              f"fields are {sorted(FIELDS)}")
        if "response" not in used:
            raise ConfigError(f"judge template {where} never shows the {{response}} to grade")
        self.text = text

    @classmethod
    def load(cls, path: str | None) -> JudgeTemplate:
        """The template in ``path``, or the built-in one when None."""
        if path is None:
            return cls(DEFAULT_TEMPLATE)
        file = pathlib.Path(path)
        if not file.is_file():
            raise ConfigError(f"--judge-template {path}: no such file")
        return cls(file.read_text(encoding="utf-8"), where=str(file))

    def render(self, task: Task, response: str) -> str:
        return self.text.format(prompt=prompt_text(task), response=response,
                                reference=str(task.data.get("answer", "")))


def prompt_text(task: Task) -> str:
    """A task's prompt as the judge reads it: plain text, or one ``role: content`` line per
    chat message."""
    if isinstance(task.prompt, str):
        return task.prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in task.prompt)


def parse_score(reply: str) -> float | None:
    """The number on the reply's last ``SCORE: x`` line, when it is within [0, 1]."""
    for line in reversed(reply.strip().splitlines()):
        match = _SCORE_LINE.match(line.strip())
        if match:
            value = float(match.group(1))
            return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None
    return None
