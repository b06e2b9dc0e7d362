"""Code-golf problems: loading and checking the data files, the train/eval split.

A task file is JSON::

    {"tasks": [{"id": "reverse-line", "title": "Reverse a line", "category": "strings",
                "statement": "Print the input line reversed.",
                "tests": [{"stdin": "abc\\n", "stdout": "cba\\n"}, ...],
                "reference": "print(input()[::-1])", "reference_len": 20}]}

The first test is shown in the prompt; the others are hidden and decide the score. ``load_tasks``
checks every field and names the file, the task and the field of anything wrong.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from rollyard import ConfigError, Task

from rollyard_codegolf.prompting import build_prompt

Split = Literal["train", "eval"]
#: Share of tasks (by a hash of their id) held out for evaluation.
EVAL_PERCENT = 20
MIN_TESTS = 3
CATEGORIES = ("fixed", "arithmetic", "strings", "sequences", "parsing")
_REQUIRED = {"id": str, "title": str, "category": str, "statement": str, "tests": list,
             "reference": str, "reference_len": int}
_OPTIONAL = {"difficulty": int}


def program_length(code: str) -> int:
    """The golf length of a program: UTF-8 bytes once surrounding whitespace is removed."""
    return len(code.strip().encode("utf-8"))


@dataclass(frozen=True)
class CodegolfTask:
    """One problem. ``tests`` are (stdin, expected stdout) pairs; the first one is shown."""

    id: str
    title: str
    category: str
    statement: str
    tests: tuple[tuple[str, str], ...]
    reference: str
    reference_len: int
    difficulty: int = 1

    @property
    def shown(self) -> tuple[str, str]:
        return self.tests[0]

    @property
    def hidden(self) -> tuple[tuple[str, str], ...]:
        return self.tests[1:]

    def to_task(self) -> Task:
        """The rollyard Task: the chat prompt plus everything scoring needs in ``data``."""
        return Task(id=self.id, prompt=build_prompt(self),
                    data={"codegolf": self.as_dict()})

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "category": self.category,
                "statement": self.statement, "difficulty": self.difficulty,
                "tests": [{"stdin": i, "stdout": o} for i, o in self.tests],
                "reference": self.reference, "reference_len": self.reference_len}

    @classmethod
    def from_task(cls, task: Task) -> CodegolfTask:
        """The problem behind a Task made by :meth:`to_task`."""
        raw = task.data.get("codegolf") if isinstance(task.data, dict) else None
        if not isinstance(raw, dict):
            raise ValueError(f"task {task.id!r} is not a codegolf task (no data['codegolf'])")
        return parse_task(raw, where=f"task {task.id!r}")


def parse_task(raw: Any, where: str) -> CodegolfTask:
    """Check one task record and build it; ConfigError names ``where`` and the field."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a task must be an object, got {type(raw).__name__}")
    where = f"{where} (id {raw.get('id')!r})" if "id" in raw else where
    for name, kind in _REQUIRED.items():
        if name not in raw:
            raise ConfigError(f"{where}: missing field {name!r}")
        if not isinstance(raw[name], kind) or isinstance(raw[name], bool):
            raise ConfigError(f"{where}: field {name!r} must be {kind.__name__}, "
                              f"got {type(raw[name]).__name__}")
    for name, kind in _OPTIONAL.items():
        if name in raw and (not isinstance(raw[name], kind) or isinstance(raw[name], bool)):
            raise ConfigError(f"{where}: field {name!r} must be {kind.__name__}")
    unknown = set(raw) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
    if not raw["id"].strip() or any(c.isspace() for c in raw["id"]):
        raise ConfigError(f"{where}: field 'id' must be non-empty without spaces")
    if raw["category"] not in CATEGORIES:
        raise ConfigError(f"{where}: field 'category' is {raw['category']!r}; choose one of "
                          f"{list(CATEGORIES)}")
    if len(raw["tests"]) < MIN_TESTS:
        raise ConfigError(f"{where}: field 'tests' has {len(raw['tests'])} cases; at least "
                          f"{MIN_TESTS} are needed (one shown, the rest hidden)")
    tests = []
    for i, case in enumerate(raw["tests"]):
        if (not isinstance(case, dict) or set(case) != {"stdin", "stdout"}
                or not all(isinstance(v, str) for v in case.values())):
            raise ConfigError(f"{where}: tests[{i}] must be an object with string fields "
                              "'stdin' and 'stdout' only")
        tests.append((case["stdin"], case["stdout"]))
    if program_length(raw["reference"]) != raw["reference_len"]:
        raise ConfigError(f"{where}: field 'reference_len' is {raw['reference_len']} but the "
                          f"reference is {program_length(raw['reference'])} bytes long")
    return CodegolfTask(id=raw["id"], title=raw["title"], category=raw["category"],
                        statement=raw["statement"], tests=tuple(tests),
                        reference=raw["reference"], reference_len=raw["reference_len"],
                        difficulty=raw.get("difficulty", 1))


def _read(path: Path) -> list[CodegolfTask]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read codegolf task file {str(path)!r}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"codegolf task file {str(path)!r} is not valid JSON: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("tasks"), list):
        raise ConfigError(f"codegolf task file {str(path)!r}: expected an object with a "
                          "'tasks' list")
    return [parse_task(raw, f"{path}: tasks[{i}]") for i, raw in enumerate(document["tasks"])]


def default_task_files() -> list[Path]:
    """The task files shipped with the package."""
    folder = resources.files("rollyard_codegolf") / "data"
    return sorted(Path(str(f)) for f in folder.iterdir() if f.name.endswith(".json"))


def load_tasks(path: str | None = None) -> list[CodegolfTask]:
    """Load tasks from a JSON file, every ``*.json`` in a folder, or (None) the shipped set.

    Raises ConfigError naming the file, task and field of the first problem; ids must be
    unique across all files. Tasks come back sorted by id.
    """
    if path is None:
        files = default_task_files()
    else:
        target = Path(path)
        if not target.exists():
            raise ConfigError(f"--codegolf-tasks {path!r}: no such file or folder")
        files = sorted(target.glob("*.json")) if target.is_dir() else [target]
        if not files:
            raise ConfigError(f"--codegolf-tasks {path!r}: the folder has no *.json files")
    tasks: dict[str, CodegolfTask] = {}
    origin: dict[str, Path] = {}
    for file in files:
        for task in _read(file):
            if task.id in tasks:
                raise ConfigError(f"codegolf task id {task.id!r} is defined twice: in "
                                  f"{str(origin[task.id])!r} and {str(file)!r}")
            tasks[task.id], origin[task.id] = task, file
    if not tasks:
        raise ConfigError(f"no codegolf tasks found in {[str(f) for f in files]}")
    return [tasks[k] for k in sorted(tasks)]


def split_of(task_id: str) -> Split:
    """The split a task id belongs to: a stable hash of the id, EVAL_PERCENT% to eval."""
    bucket = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:4], "big") % 100
    return "eval" if bucket < EVAL_PERCENT else "train"


def split_tasks(tasks: list[CodegolfTask], split: Split) -> list[CodegolfTask]:
    """The tasks of ``split`` (``train`` or ``eval``), in their given order."""
    if split not in ("train", "eval"):
        raise ValueError(f"split {split!r}: choose 'train' or 'eval'")
    return [t for t in tasks if split_of(t.id) == split]
