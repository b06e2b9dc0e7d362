"""Feedback mode (``--codegolf-attempts K``): the first test case a program fails goes back to
the model as a user message, and it may answer with a corrected program, up to K attempts.
The rewards score the final program on the hidden tests as usual."""

from __future__ import annotations

from dataclasses import dataclass

from rollyard_codegolf.sandbox import Sandbox
from rollyard_codegolf.scoring import failure_reason
from rollyard_codegolf.tasks import CodegolfTask

#: Characters of the program's output or error shown back to the model at most.
SHOWN_CHARS = 300


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
        return (f"Your program failed this test ({self.reason}).\nInput:\n```\n{self.stdin}```\n"
                f"Expected output:\n```\n{self.expected}```\n"
                f"Your program's output:\n```\n{self.got}\n```\n"
                "Reply with a corrected program in one ```python fenced block.")


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
            shown = result.stdout if reason == "wrong_answer" else result.stderr or result.stdout
            return FailedCase(stdin, expected, reason, shown.strip()[-SHOWN_CHARS:])
    return None
