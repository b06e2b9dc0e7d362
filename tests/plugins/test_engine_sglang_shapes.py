"""The embedded engine against recorded real-SGLang answers (tests/sglang/fixtures).

The same requests that were sent to SGLang 0.5.23 serving the same tiny model are replayed
against the embedded engine: statuses agree, every field the embedded engine returns exists
in SGLang's answer with the same JSON type, greedy decoding picks the same tokens with the
same logprobs, and the transport accepts SGLang's own answers. Re-record with
``tests/sglang/run.sh --record-fixtures``.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from rollyard_plugins.sglang_transport import parse_generate_response

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "sglang" / "fixtures"
CASES = sorted(FIXTURES.glob("*.json"))


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def json_type(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def assert_same_shape(ours: object, theirs: object, where: str = "response") -> None:
    assert json_type(ours) == json_type(theirs), f"{where}: {ours!r} vs SGLang {theirs!r}"
    if isinstance(ours, dict):
        missing = set(ours) - set(theirs)
        assert not missing, f"{where}: fields {sorted(missing)} are not in SGLang's answer"
        for key in ours:
            if key in ("output_token_logprobs",):
                continue
            if isinstance(ours[key], dict):
                assert_same_shape(ours[key], theirs[key], f"{where}.{key}")


def test_fixtures_were_recorded() -> None:
    assert len(CASES) >= 5, f"no SGLang fixtures in {FIXTURES}"


@pytest.mark.parametrize("case", [c.stem for c in CASES if c.stem.startswith("generate")])
def test_generate_answers_match_sglang(case, embedded_engine, http) -> None:
    fixture = load(case)
    status, ours = http(embedded_engine.url, fixture["path"], fixture["request"])
    assert status == fixture["status"], ours
    if status != 200:
        return
    theirs = fixture["response"]
    assert_same_shape(ours, theirs)
    ours_meta, theirs_meta = ours["meta_info"], theirs["meta_info"]
    assert ours_meta["finish_reason"] == theirs_meta["finish_reason"]
    assert ours_meta["prompt_tokens"] == theirs_meta["prompt_tokens"]
    assert len(ours_meta["output_token_logprobs"]) == ours_meta["completion_tokens"] > 0
    for entry, their_entry in zip(ours_meta["output_token_logprobs"],
                                  theirs_meta["output_token_logprobs"]):
        assert [json_type(v) for v in entry[:2]] == [json_type(v) for v in their_entry[:2]]
    if fixture["request"]["sampling_params"].get("temperature") == 0.0:
        assert ours["output_ids"] == theirs["output_ids"]
        assert ([e[0] for e in ours_meta["output_token_logprobs"]] ==
                pytest.approx([e[0] for e in theirs_meta["output_token_logprobs"]], abs=1e-4))


@pytest.mark.parametrize("case", [c.stem for c in CASES
                                  if c.stem.startswith("generate") and
                                  json.loads(c.read_text())["status"] == 200])
def test_transport_accepts_sglang_answers(case) -> None:
    fixture = load(case)
    result = parse_generate_response(fixture["response"], "http://sglang")
    assert len(result.output_ids) == fixture["response"]["meta_info"]["completion_tokens"]


def test_model_info_has_sglang_fields(embedded_engine, http) -> None:
    _, ours = http(embedded_engine.url, "/get_model_info")
    assert_same_shape(ours, load("get_model_info")["response"])
