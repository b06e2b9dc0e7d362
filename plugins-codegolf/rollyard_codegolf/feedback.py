"""Feedback mode (``--codegolf-attempts K``): the first test case a program fails goes back to
the model as a user message, and it may answer with a corrected program, up to K attempts.
The rewards score the final program on the hidden tests as usual."""

from __future__ import annotations

from dataclasses import dataclass

from rollyard_codegolf.sandbox import Sandbox
from rollyard_codegolf.scoring import failure_reason
from rollyard_codegolf.tasks import CodegolfTask

#: Characters of the program's output (or of its error's last line) shown to the model at
#: most: the message must fit in the model's context with room to answer.
SHOWN_CHARS = 80


@dataclass(frozen=True)
class FailedCase:
    """The first test case a program did not pass: its input, the expected output, why it
    failed and what the program printed (or its error)."""

    stdin: str
    expected: str
    reason: str
    got: str

    def message(self) -> str:
        """The user message that shows the failure to the model."""
        return (f"Failed ({self.reason}) on input:\n```\n{self.stdin}```\nexpected:\n```\n"
                f"{self.expected}```\ngot:\n```\n{self.got}\n```\nFix the program.")


def first_failure(code: str | None, task: CodegolfTask, sandbox: Sandbox) -> FailedCase | None:
    """Run ``code`` on the task's tests in order (the shown example first) until one fails;
    None when all pass. A reply without a program fails the shown example."""
    if code is None:
        stdin, expected = task.shown
        return FailedCase(stdin, expected, "no_code",
                          "(no program: put it in a ```python fenced block)")
    for stdin, expected in task.tests:
        result = sandbox.run(code, stdin)
        reason = failure_reason(result, expected)
        if reason is not None:
            if reason == "wrong_answer":
                shown = result.stdout.strip()[:SHOWN_CHARS]
            else:  # the error's last line says what went wrong
                shown = (result.stderr.strip().splitlines() or [reason])[-1][-SHOWN_CHARS:]
            return FailedCase(stdin, expected, reason, shown)
    return None
