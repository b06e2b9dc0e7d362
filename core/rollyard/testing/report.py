"""The result of a conformance check: one line per check, pass, fail or skip, with why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Outcome = Literal["pass", "fail", "skip"]


@dataclass
class CheckResult:
    """One check: what was checked (``rollout 'toy': tasks``), its outcome, the reason and,
    for a failure, what to change."""

    check: str
    outcome: Outcome
    message: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        fix = {"fix": self.fix} if self.fix else {}
        return {"check": self.check, "outcome": self.outcome, "message": self.message, **fix}


@dataclass
class ConformanceReport:
    """Every check run on one plugin. ``ok`` when none failed (skips are not passes)."""

    plugin: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and any(r.outcome == "pass" for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome == "fail"]

    def add(self, check: str, outcome: Outcome, message: str, fix: str = "") -> None:
        self.results.append(CheckResult(check, outcome, message, fix))

    def extend(self, other: ConformanceReport) -> None:
        self.results.extend(other.results)

    def format(self) -> str:
        """Human-readable: a header, one line per check, then the counts."""
        lines = [f"rollyard conformance of plugin {self.plugin!r}:"]
        for r in self.results:
            lines.append(f"  {r.outcome.upper():4}  {r.check}: {r.message}")
            if r.fix:
                lines.append(f"        fix: {r.fix}")
        counts = {o: sum(r.outcome == o for r in self.results) for o in ("pass", "fail", "skip")}
        verdict = "OK" if self.ok else "FAILED"
        lines.append(f"{verdict}: {counts['pass']} passed, {counts['fail']} failed, "
                     f"{counts['skip']} skipped")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "ok": self.ok,
                "results": [r.as_dict() for r in self.results]}
