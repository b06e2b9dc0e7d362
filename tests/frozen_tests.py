"""A test frozen in native code ends its process, with every thread's stack, instead of the run.

pytest-timeout's ``signal`` method raises in the main thread, which works only while the
interpreter runs: a thread stuck in C (a finalizer waiting on a lock during garbage
collection, with the GIL held) never sees the alarm, and the run waits forever. Here a C
watchdog (:func:`faulthandler.dump_traceback_later`, which needs no GIL) gives each test its
pytest-timeout plus :data:`FREEZE_GRACE_S`, then writes all threads' stacks to the real
stderr and exits the process. Under xdist that is a crashed worker, which
:mod:`xdist_crashes` replaces, running the frozen test once more.
"""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Generator

import pytest

#: Seconds past a test's pytest-timeout before it is presumed frozen (ini ``freeze_grace``).
FREEZE_GRACE_S = 60.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("freeze_grace", "seconds past a test's timeout before its process is "
                  "presumed frozen: its stacks are dumped and it exits",
                  default=str(FREEZE_GRACE_S))


def timeout_of(item: pytest.Item) -> float:
    """The test's pytest-timeout: its ``timeout`` mark, ``--timeout`` or the ``timeout`` ini
    (0: none, as when pytest-timeout is not installed)."""
    mark = item.get_closest_marker("timeout")
    if mark is not None and (mark.args or "timeout" in mark.kwargs):
        return float(mark.args[0] if mark.args else mark.kwargs["timeout"] or 0)
    try:
        value = item.config.getoption("timeout") or item.config.getini("timeout")
    except ValueError:
        value = 0
    return float(value or 0)


def _stderr_fd(config: pytest.Config) -> int:
    """The stderr pytest's own faulthandler writes to: not redirected by output capture."""
    from _pytest.faulthandler import fault_handler_stderr_fd_key

    return config.stash.get(fault_handler_stderr_fd_key, None) or sys.__stderr__.fileno()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    limit = timeout_of(item)
    if limit <= 0:
        return (yield)
    grace = float(item.config.getini("freeze_grace"))
    faulthandler.dump_traceback_later(limit + grace, exit=True, file=_stderr_fd(item.config))
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()

