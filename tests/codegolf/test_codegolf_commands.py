"""``rollyard codegolf exec`` and ``rollyard codegolf score`` through the real CLI."""

import json

from rollyard.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["codegolf", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_exec_prints_the_result_as_json(tmp_path, capsys):
    program = tmp_path / "p.py"
    program.write_text("import sys\nprint(input() * 2)\nprint('oops', file=sys.stderr)\n")
    (tmp_path / "in.txt").write_text("ab\n")
    status, out, _ = run_cli(capsys, "exec", str(program), "--stdin", str(tmp_path / "in.txt"))
    result = json.loads(out)
    assert status == 0
    assert (result["exit_status"], result["stdout"], result["stderr"]) == (0, "abab\n", "oops\n")
    assert result["limit"] is None and result["sandboxed"] is True
    assert result["wall_s"] > 0 and "cpu_s" in result


def test_exec_reports_the_limit_that_stopped_a_program(tmp_path, capsys):
    program = tmp_path / "loop.py"
    program.write_text("while True:\n    print('x' * 1000)")
    status, out, _ = run_cli(capsys, "exec", str(program), "--timeout", "2")
    result = json.loads(out)
    assert status == 0 and result["limit"] == "output" and result["stdout_truncated"] is True
    assert len(result["stdout"]) <= 4000


def test_score_prints_passed_tests_reason_and_length(tmp_path, capsys):
    program = tmp_path / "add.py"
    program.write_text("print(eval(input().replace(*' +')))\n")
    status, out, _ = run_cli(capsys, "score", str(program), "--task", "add-two")
    score = json.loads(out)
    assert status == 0 and score["task"] == "add-two"
    assert (score["passed"], score["total"], score["reason"], score["length"]) == (3, 3, None, 35)
    program.write_text("print(5)")
    _, out, _ = run_cli(capsys, "score", str(program), "--task", "add-two", "--all-tests")
    assert json.loads(out)["passed"] == 1 and json.loads(out)["reason"] == "wrong_answer"


def test_errors_name_the_task_and_the_file(tmp_path, capsys):
    program = tmp_path / "p.py"
    program.write_text("print(1)")
    status, _, err = run_cli(capsys, "score", str(program), "--task", "no-such-task")
    assert status == 1 and "'no-such-task'" in err
    status, _, err = run_cli(capsys, "exec", str(tmp_path / "missing.py"))
    assert status == 1 and "missing.py" in err
