"""Regenerate the docs' generated regions from the code (``make docs``).

A region is the text between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``
in a file under docs/. Its content comes from the code and is never edited by hand:

* ``fields:TYPE`` — the field table of a public type (``Task``, ``Sample``, ``RolloutContext``
  …): each dataclass field with its type as annotated, its default and the ``#:`` comment
  above it (or ``field(metadata={"doc": ...})``);
* ``options:train`` — the core options of ``rollyard train`` (:func:`rollyard.config.core_specs`),
  one table per ``--help`` group;
* ``options:PREFIX`` — the typed options of an installed plugin, the table ``[PREFIX]`` of
  run.toml (``options:toy``, ``options:codegolf``);
* ``command:NAME`` — the typed ``Options`` of a plugin's ``rollyard NAME`` command (flags
  without a prefix: ``command:report``).

Every public type, the core options and every typed option table of a plugin in this repository
must have a region somewhere in docs/; a region whose name nothing produces is an error.

    python scripts/gen_docs.py            # rewrite stale regions
    python scripts/gen_docs.py --check    # exit 1 and print a diff when a region is stale
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import enum
import inspect
import re
import sys
import textwrap
import tomllib
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REGION = re.compile(r"(<!-- generated: (?P<name>[\w:.-]+) -->\n)(?P<body>.*?)"
                    r"(<!-- end generated: (?P=name) -->)", re.S)
OPEN = re.compile(r"<!-- generated: ([\w:.-]+) -->")
#: The public types whose field tables the docs show.
FIELD_TYPES = ("Task", "SamplingParams", "GenerateRequest", "GenerateResult", "Sample",
               "RolloutContext", "RewardContext")
CORE_OPTIONS = "options:train"
#: A help text that ends by naming its default: "… (default: the rollout's own)".
DEFAULT_CLAUSE = re.compile(r"\s*(?:\(default: (?P<paren>[^()]*)\)|;\s*default: (?P<tail>.*))$")


class DocsError(Exception):
    """Something the docs need cannot be generated; the message says what to do."""


# --------------------------------------------------------------------------- cells


def cell(text: str) -> str:
    """Prose safe inside a Markdown table cell: one line, pipes escaped, and ``<`` / ``>``
    outside code spans as entities (``<rollout>`` is not an HTML tag)."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "`".join(parts)


def code(text: str) -> str:
    return "`" + " ".join(text.split()).replace("|", "\\|") + "`"


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def value(data: Any) -> str:
    """A literal value as the docs show it."""
    if isinstance(data, bool):
        return code(str(data).lower())
    if isinstance(data, enum.Enum):
        return code(f"{type(data).__name__}.{data.name}")
    if isinstance(data, tuple):
        return ", ".join(value(item) for item in data) if data else "–"
    if data is None:
        return "–"
    if isinstance(data, str):
        return code(data) if data else '`""`'
    return code(repr(data))


# --------------------------------------------------------------------------- field tables


def field_sources(cls: type) -> dict[str, tuple[str, str]]:
    """``{field: (the "#:" comment lines right above it, its default_factory as written)}``
    for each annotated attribute of ``cls``, read from its source."""
    lines, _ = inspect.getsourcelines(cls)
    source = textwrap.dedent("".join(lines))
    lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = []
        index = node.lineno - 2
        while index >= 0 and lines[index].strip().startswith("#:"):
            above.insert(0, lines[index].strip().removeprefix("#:").strip())
            index -= 1
        factory = ""
        if isinstance(node.value, ast.Call):
            for keyword in node.value.keywords:
                if keyword.arg == "default_factory":
                    made = keyword.value
                    factory = ast.unparse(made.body if isinstance(made, ast.Lambda)
                                          else ast.Call(made, [], []))
        found[node.target.id] = (" ".join(above), factory)
    return found


def rst_to_markdown(text: str) -> str:
    """``literal`` (reStructuredText) as `literal`, and :class:`x` roles as `x`."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def field_default(f: dataclasses.Field, factory_source: str) -> str:
    if f.default is not dataclasses.MISSING:
        return value(f.default)
    if f.default_factory is not dataclasses.MISSING:
        if f.default_factory in (list, dict, tuple, set):
            return code(repr(f.default_factory()))
        return code(factory_source or f"{f.default_factory.__name__}()")
    return "required"


def annotation(f: dataclasses.Field) -> str:
    """The field's type as written in the code (``from __future__ import annotations`` keeps
    it as text), else a readable spelling of the type object."""
    if isinstance(f.type, str):
        return f.type
    return getattr(f.type, "__name__", None) or repr(f.type).replace("typing.", "")


def fields_table(cls: type, missing: list[str]) -> str:
    sources = field_sources(cls)
    rows = []
    for f in dataclasses.fields(cls):
        comment, factory = sources.get(f.name, ("", ""))
        doc = f.metadata.get("doc") or comment
        if not doc:
            missing.append(f"{cls.__module__}.{cls.__qualname__}.{f.name}")
        rows.append([code(f.name), code(annotation(f)), field_default(f, factory),
                     cell(rst_to_markdown(doc))])
    return table(["field", "type", "default", "meaning"], rows)


# --------------------------------------------------------------------------- option tables


def flags(spec: Any) -> str:
    """The option's flags; a switch that is on by default shows how to turn it off."""
    names = [spec.flag]
    if spec.kind is bool and not spec.repeated and spec.default:
        names.append(spec.flag.replace("--", "--no-", 1))
    return ", ".join(code(name) for name in [*names, *spec.aliases])


def default_and_help(spec: Any) -> tuple[str, str]:
    """The default cell and the help text; a help that ends by naming its default
    ("(default: all)") gives that clause to the default cell when the value itself says
    nothing (None, an empty list)."""
    text = spec.help or spec.name.replace("_", " ")
    clause = DEFAULT_CLAUSE.search(text)
    if clause:
        text = text[:clause.start()]
    if clause and spec.default in (None, ()):
        shown = rst_to_markdown(clause.group("paren") or clause.group("tail"))
        return cell(shown), cell(rst_to_markdown(text))
    return value(spec.default), cell(rst_to_markdown(text))


def core_options_text() -> str:
    from rollyard.config import core_specs

    groups: dict[str, list[Any]] = {}
    for spec in core_specs():
        groups.setdefault(spec.group or "other", []).append(spec)
    parts = []
    for group, specs in groups.items():
        rows = [[flags(s), *default_and_help(s)] for s in specs]
        parts.append(f"### {group}\n\n" + table(["option", "default", "meaning"], rows))
    return "\n".join(parts)


def plugin_options_text(specs: list[Any]) -> str:
    rows = []
    for spec in specs:
        default, help_text = default_and_help(spec)
        rows.append([flags(spec), code(spec.type_name), default, help_text])
    return table(["option", "type", "default", "meaning"], rows)


# --------------------------------------------------------------------------- what the code says


def repository_distributions() -> set[str]:
    """The distributions this repository builds (the core, plugins-*/)."""
    names = set()
    for path in [ROOT / "pyproject.toml", *sorted(ROOT.glob("plugins-*/pyproject.toml"))]:
        names.add(tomllib.loads(path.read_text())["project"]["name"])
    return names


def plugin_tables() -> dict[str, tuple[list[Any], bool]]:
    """``{region: (specs, from this repository)}`` of every installed plugin's typed options
    (``options:PREFIX``) and typed command options (``command:NAME``); a plugin of this
    repository that fails to load is an error."""
    from rollyard.options import option_specs
    from rollyard.plugins import PluginManager

    manager = PluginManager(environ={})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager.load_all()
    ours = repository_distributions()
    broken = [error for record in manager.records.values()
              if record.distribution in ours for error in record.errors]
    if broken:
        raise DocsError("plugins of this repository failed to load:\n  " + "\n  ".join(broken))
    tables = manager.option_tables()
    found = {f"options:{prefix}": (table.specs,
                                   manager.records[table.plugin].distribution in ours)
             for prefix, table in tables.typed.items()}
    for name in manager.names("command"):
        command = manager.get("command", name)
        if getattr(command, "Options", None) is not None:
            found[f"command:{name}"] = (option_specs(command.Options, ""),
                                        manager.owner("command", name).distribution in ours)
    return found


def producers() -> tuple[dict[str, Callable[[], str]], set[str], list[str]]:
    """Every region the code can produce, the names that must appear in the docs, and the
    fields that have no description."""
    import rollyard

    missing: list[str] = []
    made: dict[str, Callable[[], str]] = {}
    for name in FIELD_TYPES:
        text = fields_table(getattr(rollyard, name), missing)
        made[f"fields:{name}"] = lambda text=text: text
    made[CORE_OPTIONS] = core_options_text
    required = set(made)
    for region, (specs, ours) in plugin_tables().items():
        made[region] = lambda specs=specs: plugin_options_text(specs)
        if ours:
            required.add(region)
    return made, required, missing


# --------------------------------------------------------------------------- regions


def doc_files(docs: Path) -> list[Path]:
    return sorted(docs.rglob("*.md"))


def regenerate(text: str, made: dict[str, Callable[[], str]], where: str,
               seen: dict[str, str]) -> str:
    opened = OPEN.findall(text)
    closed = [m.group("name") for m in REGION.finditer(text)]
    if sorted(opened) != sorted(closed):
        unclosed = sorted(set(opened) - set(closed)) or opened
        raise DocsError(f"{where}: region(s) {unclosed} have no matching "
                        "'<!-- end generated: NAME -->'")

    def fill(match: re.Match[str]) -> str:
        name = match.group("name")
        if name in seen:
            raise DocsError(f"{where}: region {name!r} is already in {seen[name]}")
        seen[name] = where
        if name not in made:
            raise DocsError(f"{where}: nothing produces region {name!r} (known: "
                            f"{', '.join(sorted(made))})")
        return match.group(1) + made[name]() + match.group(4)

    return REGION.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 and print a diff if a region is stale")
    parser.add_argument("--docs", type=Path, default=DOCS, metavar="DIR",
                        help="the docs folder (default: docs/ of this repository)")
    args = parser.parse_args(argv)
    try:
        made, required, missing = producers()
        seen: dict[str, str] = {}
        stale = {}
        for path in doc_files(args.docs):
            where = str(path.relative_to(args.docs.parent))
            text = path.read_text()
            new = regenerate(text, made, where, seen)
            if new != text:
                stale[path] = (text, new)
    except DocsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name in missing:
        print(f"warning: {name} has no description (add a '#:' comment above the field)",
              file=sys.stderr)
    status = 0
    if args.check:
        for path, (old, new) in stale.items():
            where = str(path.relative_to(args.docs.parent))
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True),
                f"{where} (in the repository)", f"{where} (generated from the code)"))
        if stale:
            print(f"\n{len(stale)} doc(s) are stale: run `make docs` "
                  "(python scripts/gen_docs.py) and commit the result", file=sys.stderr)
            status = 1
    else:
        for path, (_, new) in stale.items():
            path.write_text(new)
            print(f"updated {path.relative_to(args.docs.parent)}")
    absent = sorted(required - set(seen))
    if absent:
        print(f"error: no region in {args.docs.name}/ for {', '.join(absent)}: add "
              "'<!-- generated: NAME -->' and '<!-- end generated: NAME -->' where that type or "
              "plugin is documented", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
