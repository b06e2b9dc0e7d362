"""The shipped problems, the task-file schema check and the train/eval split."""

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from rollyard import ConfigError
from rollyard_codegolf.prompting import build_prompt
from rollyard_codegolf.scoring import score_program
from rollyard_codegolf.tasks import (
    CATEGORIES,
    CodegolfTask,
    load_tasks,
    program_length,
    split_tasks,
)


def test_at_least_sixty_problems_in_every_category(tasks):
    assert len(tasks) >= 60
    counts = Counter(t.category for t in tasks.values())
    assert set(counts) == set(CATEGORIES) and min(counts.values()) >= 8
    for task in tasks.values():
        assert len(task.tests) >= 3 and task.reference_len == program_length(task.reference)


@pytest.mark.slow
def test_every_reference_passes_all_its_own_cases(tasks, sandbox):
    with ThreadPoolExecutor(2) as pool:
        scores = dict(zip(tasks, pool.map(
            lambda t: score_program(t.reference, t, sandbox, hidden_only=False),
            tasks.values())))
    failing = {task_id: s.detail for task_id, s in scores.items() if not s.all_passed}
    assert failing == {}


def test_hidden_cases_differ_from_the_shown_one_except_for_fixed_output(tasks):
    for task in tasks.values():
        if task.category != "fixed":
            assert any(out != task.shown[1] for _, out in task.hidden), task.id


def test_split_is_deterministic_disjoint_and_complete(tasks):
    problems = list(tasks.values())
    train, evaluation = split_tasks(problems, "train"), split_tasks(problems, "eval")
    assert {t.id for t in train}.isdisjoint({t.id for t in evaluation})
    assert len(train) + len(evaluation) == len(problems)
    assert 0.1 < len(evaluation) / len(problems) < 0.35
    assert [t.id for t in split_tasks(load_tasks(), "eval")] == [t.id for t in evaluation]
    # membership depends on the id only, not on which other tasks are loaded
    assert split_tasks(problems[::-1][:10], "eval") == [t for t in problems[::-1][:10]
                                                         if t in evaluation]
    with pytest.raises(ValueError, match="'test'"):
        split_tasks(problems, "test")


def test_prompt_shows_the_statement_and_first_case_only(tasks):
    task = tasks["add-two"]
    text = "\n".join(m["content"] for m in build_prompt(task))
    assert task.statement in text and "2 3" in text and "5" in text
    assert "123456789 987654321" not in text and "1111111110" not in text
    assert "shortest" in text and "```python" in text


def test_to_task_round_trips_through_task_data(tasks):
    task = tasks["rot13"].to_task()
    assert task.id == "rot13" and task.prompt[-1]["role"] == "user"
    assert CodegolfTask.from_task(task) == tasks["rot13"]


def _task_record(**changes):
    record = {"id": "double", "title": "Double", "category": "arithmetic",
              "statement": "Print twice the input.",
              "tests": [{"stdin": "1\n", "stdout": "2\n"}, {"stdin": "4\n", "stdout": "8\n"},
                        {"stdin": "0\n", "stdout": "0\n"}],
              "reference": "print(int(input())*2)", "reference_len": 21}
    record.update(changes)
    return {key: value for key, value in record.items() if value is not None}


def test_user_task_file_loads(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"tasks": [_task_record()]}))
    [task] = load_tasks(str(path))
    assert task.id == "double" and task.hidden == (("4\n", "8\n"), ("0\n", "0\n"))
    assert load_tasks(str(tmp_path)) == [task]


@pytest.mark.parametrize("changes, message", [
    ({"statement": None}, "missing field 'statement'"),
    ({"tests": [{"stdin": "1\n", "stdout": "2\n"}]}, "at least 3"),
    ({"reference_len": 5}, "'reference_len' is 5 but the reference is 21 bytes"),
    ({"category": "golf"}, "'category' is 'golf'"),
    ({"tests": [{"stdin": "1"}] * 3}, r"tests\[0\] must be an object"),
    ({"difficulty": "hard"}, "'difficulty' must be int"),
    ({"colour": "red"}, r"unknown field\(s\) \['colour'\]"),
    ({"id": "two words"}, "without spaces"),
])
def test_schema_errors_name_file_task_and_field(tmp_path, changes, message):
    path = tmp_path / "bad.json"
    bad = _task_record(**{"id": "x2", **changes})
    path.write_text(json.dumps({"tasks": [_task_record(), bad]}))
    with pytest.raises(ConfigError, match=message) as info:
        load_tasks(str(path))
    assert "bad.json: tasks[1]" in str(info.value)


def test_duplicate_ids_across_files_and_bad_paths_are_named(tmp_path):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps({"tasks": [_task_record()]}))
    with pytest.raises(ConfigError, match="'double' is defined twice"):
        load_tasks(str(tmp_path))
    (tmp_path / "b.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"b\.json' is not valid JSON"):
        load_tasks(str(tmp_path / "b.json"))
    with pytest.raises(ConfigError, match=r"--codegolf-tasks .*no such file"):
        load_tasks(str(tmp_path / "missing.json"))
