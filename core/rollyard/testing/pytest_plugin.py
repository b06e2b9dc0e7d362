"""pytest fixtures for plugin authors, loaded automatically once rollyard is installed (entry
point ``pytest11``). In a plugin's own tests::

    from rollyard_myenv import plugin

    def test_conformance(rollyard_conformance):
        rollyard_conformance(plugin, name="myenv")

    async def episode(scripted_transport, rollyard_tokenizer):
        transport = scripted_transport(["12"], tokenizer=rollyard_tokenizer)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from rollyard.plugins import PluginManager
from rollyard.testing.conformance import check_plugin
from rollyard.testing.fakes import Reply, ScriptedTransport, tiny_tokenizer
from rollyard.testing.report import ConformanceReport


@pytest.fixture
def rollyard_manager() -> Iterator[PluginManager]:
    """A plugin manager that ignores installed entry points and ROLLYARD_* variables until
    asked; register plugin objects with ``rollyard_manager.register(module, name="myenv")``.
    Everything registered is unregistered when the test ends."""
    manager = PluginManager(environ={})
    try:
        yield manager
    finally:
        for name in list(manager.records):
            manager.unregister(name)


@pytest.fixture(scope="session")
def rollyard_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tokenizer of rollyard's tiny models (ChatML chat template), built once per
    session in a temporary folder it is loaded from; imports transformers when first used
    (the light core's byte-level tokenizer without it)."""
    return tiny_tokenizer(tmp_path_factory.mktemp("rollyard-tokenizer"))


@pytest.fixture
def scripted_transport() -> Callable[..., ScriptedTransport]:
    """Make a scripted engine: ``scripted_transport(["12", EngineAborted("x")],
    tokenizer=rollyard_tokenizer, per_session=True)``; see
    :class:`rollyard.testing.ScriptedTransport` (keyword arguments go to it)."""

    def make(replies: Sequence[Reply] = (), **kwargs: Any) -> ScriptedTransport:
        return ScriptedTransport(replies, **kwargs)

    return make


@pytest.fixture
def rollyard_conformance(rollyard_tokenizer: Any) -> Callable[..., ConformanceReport]:
    """Run :func:`rollyard.testing.check_plugin` on a plugin (entry-point name, or module with
    ``name=``) and fail the test with the report unless every check passed."""

    def check(plugin: str | object, **kwargs: Any) -> ConformanceReport:
        kwargs.setdefault("tokenizer", rollyard_tokenizer)
        report = check_plugin(plugin, **kwargs)
        if not report.ok:
            pytest.fail(report.format(), pytrace=False)
        return report

    return check
