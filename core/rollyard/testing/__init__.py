"""The plugin author's kit: a conformance check, a scripted engine and pytest fixtures.

Check an installed plugin from the command line with ``rollyard check-plugin NAME``, or from
Python::

    from rollyard.testing import check_plugin

    report = check_plugin("arith")          # an entry-point name, or a module with name=...
    assert report.ok, report.format()

Installing rollyard also installs a pytest plugin (``rollyard.testing.pytest_plugin``) with the
fixtures ``rollyard_manager``, ``rollyard_tokenizer``, ``scripted_transport`` and
``rollyard_conformance``. Nothing here imports torch, Ray or transformers until it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollyard.testing.conformance import check_plugin, check_rollout
    from rollyard.testing.fakes import Reply, ScriptedTransport, tiny_tokenizer
    from rollyard.testing.report import CheckResult, ConformanceReport

#: Public name -> module. Loaded on first use, so that ``rollyard``'s CLI, which imports
#: ``rollyard.testing.command`` to list its commands, does not pay for the checker.
_EXPORTS = {"check_plugin": "conformance", "check_rollout": "conformance", "Reply": "fakes",
            "ScriptedTransport": "fakes", "tiny_tokenizer": "fakes",
            "CheckResult": "report", "ConformanceReport": "report"}

__all__ = ["CheckResult", "ConformanceReport", "Reply", "ScriptedTransport", "check_plugin",
           "check_rollout", "tiny_tokenizer"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rollyard.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rollyard.testing.{_EXPORTS[name]}"), name)
