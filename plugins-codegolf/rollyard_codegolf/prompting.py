"""The chat prompt that poses a code-golf problem."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollyard import Message

if TYPE_CHECKING:
    from rollyard_codegolf.tasks import CodegolfTask

SYSTEM = ("You are a code golfer. Answer with the shortest Python 3 program that solves the "
          "problem: it reads standard input and writes standard output. Put the program in one "
          "```python fenced block.")


def _show(text: str) -> str:
    return text.rstrip("\n") if text.strip() else "(empty)"


def build_prompt(task: CodegolfTask) -> list[Message]:
    """System and user messages: the statement and the first test case as an example."""
    stdin, stdout = task.shown
    user = (f"{task.title}\n\n{task.statement}\n\n"
            f"Example input:\n```\n{_show(stdin)}\n```\n"
            f"Example output:\n```\n{_show(stdout)}\n```\n"
            "Hidden tests check other inputs. Reply with the shortest program.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
