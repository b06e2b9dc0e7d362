"""``make test``'s ``-n 2 --dist loadfile``, robust to a worker process that dies.

A worker that aborts (a native finalizer of a third-party library, once in a few full runs
here, at a different test each time) meets two faults of pytest-xdist 3.8's file
scheduling: the replacement worker can be handed a single test and then waits forever for a
second one or a shutdown (pytest-xdist issues 1323 and 1327), and the test that was running
is reported failed although the abort may belong to an object an earlier test left behind.

:class:`CrashRetryingFileScheduling` keeps every worker holding at least three tests or its
shutdown, and runs the test a worker died in once more on a fresh worker: its first crash is
reported as ``rerun`` (the line ``worker 'gwN' crashed while running ...`` stays in the
report), a second crash fails it.
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

#: A worker holding fewer tests than this is given another file: xdist's remote loop runs a
#: test only once it holds the next one too, or its shutdown.
MIN_PENDING = 3


class CrashRetryingFileScheduling(LoadFileScheduling):
    """``--dist loadfile`` with the two crash faults fixed (module docstring)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        #: How many workers each test took down.
        self.crashes: dict[str, int] = {}

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) < MIN_PENDING:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()

    def remove_node(self, node: Any) -> str | None:
        workload = self.assigned_work.pop(node)
        pending = [nodeid for unit in workload.values()
                   for nodeid, completed in unit.items() if not completed]
        if not pending:
            return None
        crashitem = pending[0]  # a worker runs its tests in order
        self.crashes[crashitem] = self.crashes.get(crashitem, 0) + 1
        if not self.retries(crashitem):
            workload[self._split_scope(crashitem)][crashitem] = True  # run it no more
        self.workqueue.update((scope, unit) for scope, unit in workload.items()
                              if not all(unit.values()))
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def retries(self, crashitem: str) -> bool:
        """Whether the test ``crashitem`` goes back to a worker (after its first crash)."""
        return self.crashes.get(crashitem) == 1


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") == "loadfile":
        return CrashRetryingFileScheduling(config, log)
    return None


def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    if isinstance(sched, CrashRetryingFileScheduling) and sched.retries(crashitem):
        report.outcome = "rerun"  # type: ignore[assignment]
        terminal = sched.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(f"{report.longrepr}: running it once more")


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if report.outcome == "rerun":
        return "rerun", "R", "RERUN"
    return None
