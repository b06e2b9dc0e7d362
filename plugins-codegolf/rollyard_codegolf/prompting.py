"""The chat prompt that poses a code-golf problem."""

from __future__ import annotations

from typing import Protocol

from rollyard import Message


class Problem(Protocol):
    """What a prompt shows of a problem (a :class:`rollyard_codegolf.tasks.CodegolfTask`)."""

    @property
    def title(self) -> str: ...

    @property
    def statement(self) -> str: ...

    @property
    def shown(self) -> tuple[str, str]:
        """The example test case: (stdin, expected stdout)."""
        ...

SYSTEM = ("You are a code golfer. Answer with the shortest Python 3 program that solves the "
          "problem: it reads standard input and writes standard output. Put the program in one "
          "```python fenced block.")


def _show(text: str) -> str:
    return text.rstrip("\n") if text.strip() else "(empty)"


def build_prompt(task: Problem) -> list[Message]:
    """System and user messages: the statement and the first test case as an example."""
    stdin, stdout = task.shown
    user = (f"{task.title}\n\n{task.statement}\n\n"
            f"Example input:\n```\n{_show(stdin)}\n```\n"
            f"Example output:\n```\n{_show(stdout)}\n```\n"
            "Hidden tests check other inputs. Reply with the shortest program.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
