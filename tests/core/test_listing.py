"""``rollyard plugins`` as a table: readable in an 80-column terminal, nothing left out."""

from __future__ import annotations

import io
import warnings

from rich.cells import cell_len
from rich.console import Console
from rollyard.listing import plugins_table
from rollyard.plugins import PluginManager, PluginRecord, PluginWarning

WIDTH = 80


def render(records: list[PluginRecord], width: int = WIDTH) -> list[str]:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(plugins_table(records))
    return console.export_text().splitlines()


def installed_records() -> list[PluginRecord]:
    manager = PluginManager(environ={})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)  # a broken plugin is listed, not fatal
        manager.load_all()
    return list(manager.records.values())


def test_the_installed_plugins_fit_80_columns() -> None:
    records = installed_records()
    lines = render(records)
    too_wide = [line for line in lines if cell_len(line) > WIDTH]
    assert not too_wide, "\n".join(too_wide)
    text = "\n".join(lines)
    for record in records:
        assert record.name in text
    assert "rollout: toy" in text and "transport: sglang" in text


def test_registration_hooks_are_shown_as_what_they_registered() -> None:
    record = PluginRecord("toy", "rollyard", "0.1.0", "rollyard_plugins.toy",
                          hooks=["add_options", "register_rollouts", "register_rewards"],
                          registers={"rollout": ["toy"]})
    [row] = [line for line in render([record]) if line.strip().startswith("toy")]
    assert row.split() == ["toy", "rollout:", "toy", "add_options,", "register_rewards"]


def test_long_names_and_load_errors_wrap_instead_of_widening() -> None:
    error = ("importing 'acme_rollyard_environments.very_long_module_name.plugin' raised "
             "ModuleNotFoundError: No module named 'acme_internal_dependency_that_is_missing'")
    broken = PluginRecord("acme-environment-with-a-very-long-name", "acme-rollyard-environments",
                          "2024.12.31.post7", "acme.plugin", errors=[error])
    busy = PluginRecord("many", "rollyard-many", "1.0", "many.plugin",
                        hooks=["add_options", "on_run_start", "on_samples", "on_step_end",
                               "on_run_end", "register_rewards"],
                        registers={"reward": [f"many.reward-number-{i}" for i in range(8)]})
    lines = render([broken, busy])
    assert max(cell_len(line) for line in lines) <= WIDTH
    squeezed = "".join("".join(lines).split())  # wrapping only moves text between lines
    assert "erroracme-environment-with-a-very-long-name:" + "".join(error.split()) in squeezed
    assert all(f"many.reward-number-{i}" in squeezed for i in range(8))
    assert "acme-rollyard-environments2024.12.31.post7" in squeezed
