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

from rollyard.testing.conformance import check_plugin, check_rollout
from rollyard.testing.fakes import Reply, ScriptedTransport, tiny_tokenizer
from rollyard.testing.report import CheckResult, ConformanceReport

__all__ = ["CheckResult", "ConformanceReport", "Reply", "ScriptedTransport", "check_plugin",
           "check_rollout", "tiny_tokenizer"]
