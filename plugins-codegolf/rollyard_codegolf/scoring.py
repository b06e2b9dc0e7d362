"""Score one program on a task's tests through the sandbox."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rollyard_codegolf.sandbox import ExecResult, Sandbox
from rollyard_codegolf.tasks import CodegolfTask, program_length

#: Why a program scored less than full marks; the first failing test decides.
REASONS = ("no_code", "program_size", "syntax_error", "timeout", "cpu_limit", "memory_limit",
           "output_limit", "crashed", "runtime_error", "wrong_answer", "sandbox_error")
_LIMIT_REASONS = {"wall": "timeout", "cpu": "cpu_limit", "memory": "memory_limit",
                  "output": "output_limit", "program_size": "program_size"}
#: Limits after which the remaining tests are not run (they would hit it again).
_STOP_AFTER = {"timeout", "cpu_limit", "program_size"}


@dataclass
class ProgramScore:
    """How a program did: tests passed of those run, why it failed (None when all passed),
    total wall seconds over its tests and its golf length in bytes."""

    passed: int
    total: int
    reason: str | None
    runtime: float
    length: int
    detail: str = ""

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fraction": self.fraction}


@dataclass(frozen=True)
class ProgramResult:
    """One reply's program (None when it had none), how it scored on the hidden tests, and
    the task's reference length: everything the codegolf rewards read."""

    program: str | None
    score: ProgramScore
    reference_len: int

    def as_record(self) -> dict[str, Any]:
        """The record kept in ``sample.metadata["codegolf"]`` for the sample tables."""
        return {"program": self.program, "reference_len": self.reference_len,
                **self.score.as_dict()}


def normalise_output(text: str) -> str:
    """Output as compared: trailing whitespace removed from each line and from the end."""
    return "\n".join(line.rstrip() for line in text.rstrip().split("\n"))


def failure_reason(result: ExecResult, expected: str) -> str | None:
    """Why one run does not count as a pass, or None when it does."""
    if result.limit is not None:
        return _LIMIT_REASONS.get(result.limit, result.limit)
    if result.exit_status < 0:
        return "crashed"
    if result.exit_status != 0:
        return "syntax_error" if "SyntaxError" in result.stderr[-500:] else "runtime_error"
    if normalise_output(result.stdout) != normalise_output(expected):
        return "wrong_answer"
    return None


def score_program(code: str | None, task: CodegolfTask, sandbox: Sandbox,
                  hidden_only: bool = True) -> ProgramScore:
    """Run ``code`` on the task's hidden tests (all tests when ``hidden_only`` is false).

    ``code`` None means the reply had no program (reason ``no_code``). A test that runs out of
    wall or CPU time ends the scoring: the rest count as failed without being run.
    """
    tests = task.hidden if hidden_only else task.tests
    if code is None:
        return ProgramScore(0, len(tests), "no_code", 0.0, 0)
    length = program_length(code)
    passed, runtime, reason, detail = 0, 0.0, None, ""
    for index, (stdin, expected) in enumerate(tests):
        result = sandbox.run(code, stdin)
        runtime += result.wall_s
        why = failure_reason(result, expected)
        if why is None:
            passed += 1
            continue
        if reason is None:
            reason = why
            detail = f"test {index}: {why}; stderr: {result.stderr.strip()[-300:]}"
        if why in _STOP_AFTER:
            break
    return ProgramScore(passed, len(tests), reason, round(runtime, 4), length, detail)
