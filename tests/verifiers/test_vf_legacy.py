"""Pre-0.4 verifiers environments (``load_environment``): token sequences rebuilt from the calls
the bridge recorded, the bridge's recording over real HTTP, and the legacy driver in real venvs
of verifiers 0.3.1 and 0.2.0 (built through ``Rollout.isolated_environment`` and cached in
``isolated_envs_dir``; the rollout runs there as a subprocess, the assertions run here)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from rollyard import RolloutContext, RolloutError, SamplingParams
from rollyard.rewards import RewardSet
from rollyard.testing import ScriptedTransport
from rollyard_verifiers.bridge import Bridge, BridgeServer, RecordedCall, SessionRecord
from rollyard_verifiers.recorded import segments
from rollyard_verifiers.samples import legacy_samples

HERE = Path(__file__).parent
ENVS = HERE / "envs"
CODEGOLF = HERE.parents[1] / "plugins-codegolf"


# ---------------------------------------------------------------- segments of recorded calls

def test_environment_tokens_between_calls_are_masked_out() -> None:
    calls = [RecordedCall([1, 2, 3], [4, 5], [-0.1, -0.2]),
             RecordedCall([1, 2, 3, 4, 5, 6, 7], [8], [-0.3])]
    [seg] = segments(calls)
    assert seg.tokens == [1, 2, 3, 4, 5, 6, 7, 8]
    assert seg.prompt_len == 3
    assert seg.loss_mask == [1, 1, 0, 0, 1]
    assert seg.logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]


def test_a_prompt_that_does_not_extend_the_history_starts_a_new_segment() -> None:
    calls = [RecordedCall([1, 2], [3], [-0.1]),
             RecordedCall([1, 9, 3, 4], [5, 6], [-0.2, -0.3]),  # history rewritten
             RecordedCall([1, 9, 3, 4, 5, 6, 7], [8], [-0.4])]
    first, second = segments(calls)
    assert (first.tokens, first.prompt_len, first.loss_mask) == ([1, 2, 3], 2, [1])
    assert (second.tokens, second.prompt_len) == ([1, 9, 3, 4, 5, 6, 7, 8], 4)
    assert second.loss_mask == [1, 1, 0, 1]
    assert second.logprobs == [-0.2, -0.3, 0.0, -0.4]


def test_a_call_with_mismatched_logprobs_is_refused() -> None:
    with pytest.raises(ValueError, match="2 output ids but 1 logprobs"):
        segments([RecordedCall([1], [2, 3], [-0.1])])


class EmptyModelResponseError(Exception):
    """Stands in for verifiers' error of the same name (the model ended its reply at once)."""


class ModelError(Exception):
    pass


@pytest.mark.parametrize(("error", "status"), [
    (None, "completed"),
    (EmptyModelResponseError("no content"), "completed"),  # the model's own outcome
    (ModelError("bad gateway"), "failed"),
])
def test_a_legacy_rollout_state_becomes_samples(error, status) -> None:
    state = {"trajectory_id": "r1", "reward": 1.2, "metrics": {"correct": 1.0, "brief": 1.0},
             "error": error, "is_truncated": False, "stop_condition": "max_turns_reached",
             "completion": [{"role": "assistant", "content": "6"}]}
    session = SessionRecord(weight_versions=[3, 2], calls=[RecordedCall([1, 2], [3], [-0.5])])
    [sample] = legacy_samples(state, session, "t", "g")
    assert sample.status.value == status
    if status == "completed":
        assert (sample.tokens, sample.prompt_len, sample.loss_mask) == ([1, 2, 3], 2, [1])
        assert sample.reward == 1.2 and sample.rewards == {"correct": 1.0, "brief": 1.0}
        assert sample.weight_version == 2 and sample.metadata["completion"] == "6"
    else:
        assert sample.reward == 0.0 and "ModelError: bad gateway" in sample.metadata["failure"]


def test_the_bridge_records_each_call_of_a_session_over_http(rollyard_tokenizer) -> None:
    """The ids and logprobs recorded are those the HTTP response carried, per session."""
    import aiohttp

    transport = ScriptedTransport(["ab", "cde"], tokenizer=rollyard_tokenizer,
                                  per_session=True)
    bridge = Bridge(transport)
    body = {"token_ids": [5, 6, 7], "sampling_params": {"max_tokens": 8, "logprobs": 1}}

    async def main() -> list[dict[str, Any]]:
        async with BridgeServer(bridge) as server, aiohttp.ClientSession() as http:
            url = server.base_url.removesuffix("/v1") + "/inference/v1/generate"
            replies = []
            for session, extra in (("s1", []), ("s1", [9]), ("s2", [])):
                async with http.post(url, json={**body, "token_ids": body["token_ids"] + extra},
                                     headers={"X-Session-ID": session}) as response:
                    assert response.status == 200
                    replies.append((await response.json())["choices"][0])
            return replies

    r1, r2, r3 = asyncio.run(main())
    s1, s2 = bridge.pop_session("s1"), bridge.pop_session("s2")
    assert [c.prompt_ids for c in s1.calls] == [[5, 6, 7], [5, 6, 7, 9]]
    assert [c.output_ids for c in s1.calls] == [r1["token_ids"], r2["token_ids"]]
    assert [c.logprobs for c in s1.calls] == [
        [x["logprob"] for x in r["logprobs"]["content"]] for r in (r1, r2)]
    assert r1["token_ids"] != r2["token_ids"]  # the second call of s1 got the second reply
    assert [c.output_ids for c in s2.calls] == [r3["token_ids"]] == [r1["token_ids"]]
    assert bridge.pop_session("s1").calls == []  # popped


def test_chat_and_text_completions_carry_the_engine_ids(tiny_model_dir) -> None:
    """What verifiers before 0.2 calls through the OpenAI SDK: the prompt rendered with the
    model's chat template, vLLM's token fields, ``token_id:<id>`` labels, the session kept."""
    from openai import AsyncOpenAI
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    transport = ScriptedTransport(["It is 5."], tokenizer=tokenizer, logprob=-0.25)
    bridge = Bridge(transport, model="tiny", tokenizer=tokenizer)
    messages = [{"role": "user", "content": "2+3?"}]

    async def main() -> tuple[Any, Any, str]:
        async with BridgeServer(bridge) as server:
            client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
            chat = await client.chat.completions.create(
                model="tiny", messages=messages, max_tokens=16, temperature=0.5, logprobs=True,
                extra_body={"return_tokens_as_token_ids": True},
                extra_headers={"X-Session-ID": "s1"})
            text = await client.completions.create(model="tiny", prompt="2+3=", max_tokens=16,
                                                   extra_headers={"X-Session-ID": "s1"})
            try:
                await client.chat.completions.create(model="tiny", messages=messages,
                                                     max_tokens=4, top_logprobs=3,
                                                     logprobs=True)
            except Exception as exc:  # the bridge's 400, with its message
                refused = str(exc)
            await client.close()
            return chat, text, refused

    chat, text, refused = asyncio.run(main())
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if isinstance(prompt, Mapping) else prompt)
    choice = chat.choices[0]
    assert chat.prompt_token_ids == transport.requests[0].input_ids == prompt
    assert choice.token_ids == transport.calls[0][1].output_ids
    assert choice.message.content == "It is 5."
    assert [c.token for c in choice.logprobs.content] == [
        f"token_id:{t}" for t in choice.token_ids]
    assert [c.logprob for c in choice.logprobs.content] == [-0.25] * len(choice.token_ids)
    assert transport.requests[0].sampling.temperature == 0.5
    assert text.choices[0].prompt_token_ids == tokenizer.encode("2+3=",
                                                                add_special_tokens=False)
    assert text.choices[0].text == "It is 5."
    assert text.choices[0].logprobs.token_logprobs == [-0.25] * len(text.choices[0].token_ids)
    assert [c.output_ids for c in bridge.pop_session("s1").calls] == [
        choice.token_ids, text.choices[0].token_ids]
    assert "'top_logprobs'=3" in refused


# ---------------------------------------------------------------- refused in the core's venv

def rollout_here(model_dir: Path, env_id: str) -> Any:
    from rollyard_verifiers.rollout import VerifiersRollout
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    context = RolloutContext(
        config={}, tokenizer=tokenizer, transport=ScriptedTransport([], tokenizer=tokenizer),
        rewards=RewardSet({}, {}), options={"env": env_id}, rng=random.Random(0),
        sampling=SamplingParams(max_new_tokens=8))
    rollout = VerifiersRollout(context)
    rollout.tasks("train")
    return rollout


def test_a_synchronous_reward_of_a_04_taskset_is_named(tiny_model_dir, test_envs) -> None:
    with pytest.raises(RolloutError) as caught:
        rollout_here(tiny_model_dir, "rollyard_vf_sync_reward")
    message = str(caught.value)
    assert "reward function EchoTask.nonempty" in message
    assert "'async def nonempty'" in message and "\n" not in message


def test_a_legacy_environment_in_the_04_venv_says_how_to_run_it(
        tiny_model_dir, legacy_env_site, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(legacy_env_site))
    with pytest.raises(RolloutError, match=r"'rollyard_vf_legacy_arith' is written for "
                                           r"verifiers < 0\.4.*--rollout-env isolated"):
        rollout_here(tiny_model_dir, "rollyard_vf_legacy_arith")


# ---------------------------------------------------------------- in venvs of old verifiers

def legacy_python(env_id: str, envs_dir: Path, site: Path) -> Path:
    """The venv ``VerifiersRollout.isolated_environment`` asks for ``env_id`` installed in
    ``site`` (built once, cached in ``envs_dir``: the matrix's, the training tests')."""
    from rollyard.isolation.envs import ENVS_DIR_VARIABLE, ensure_env, env_spec
    from rollyard_verifiers.options import VerifiersOptions
    from rollyard_verifiers.rollout import VerifiersRollout

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENVS_DIR_VARIABLE, str(envs_dir))
        patch.syspath_prepend(str(site))
        request = VerifiersRollout.isolated_environment(VerifiersOptions(env=env_id))
        assert request is not None
        return ensure_env(env_spec("rollyard-verifiers", request), print) / "bin" / "python"


def run_cases(python: Path, model_dir: Path, site: Path,
              cases: list[dict[str, Any]]) -> list[dict]:
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    environ["PYTHONPATH"] = os.pathsep.join([str(site), str(CODEGOLF)])
    done = subprocess.run([str(python), str(HERE / "vf_legacy_runner.py"), str(model_dir)],
                          input=json.dumps(cases), capture_output=True, text=True,
                          env=environ, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


CASES_031 = [
    {"env": "rollyard_vf_legacy_arith", "replies": ["<answer>6</answer>"], "groups": 2, "n": 2},
    {"env": "rollyard_vf_legacy_tools", "replies": ["<tool>add 10 0</tool>", "It is 10."]},
    {"env": "rollyard_vf_legacy_arith", "replies": [],
     "options": {"env_config": json.dumps({"fail": "no dataset today\nsecond line"})}},
    {"env": "rollyard_codegolf.verifiers_legacy", "max_new_tokens": 48,
     "replies": ["```python\nprint(sum(map(int,input().split())))\n```"]},
    {"env": "rollyard_vf_legacy_tools", "replies": [""]},  # the end of sequence at once
]


@pytest.fixture(scope="module")
def results_031(tiny_model_dir, isolated_envs_dir, legacy_env_site) -> list[dict[str, Any]]:
    python = legacy_python("rollyard_vf_legacy_arith", isolated_envs_dir, legacy_env_site)
    return run_cases(python, tiny_model_dir, legacy_env_site, CASES_031)


@pytest.mark.slow
def test_031_single_turn_tasks_tokens_and_rubric(results_031) -> None:
    result = results_031[0]
    assert [t["id"] for t in result["tasks"]] == ["0", "1", "2", "3"]  # row indices
    assert result["tasks"][1]["prompt"] == [
        {"role": "system", "content": "Answer inside <answer></answer>."},
        {"role": "user", "content": "What is 3+3?"}]
    assert result["tasks"][1]["data"]["answer"] == "6"
    samples, calls = result["samples"], result["calls"]
    assert len(samples) == 4 and len(calls) == 4
    engine = {(tuple(c["prompt_ids"]), tuple(c["output_ids"])) for c in calls}
    for sample in samples:
        assert sample["status"] == "completed"
        prompt, response = sample["tokens"][:sample["prompt_len"]], \
            sample["tokens"][sample["prompt_len"]:]
        assert (tuple(prompt), tuple(response)) in engine  # the engine's own ids
        assert sample["prompt_text"].endswith("What is 2+0?<|im_end|>\n<|im_start|>assistant\n") \
            or sample["prompt_text"].endswith("What is 3+3?<|im_end|>\n<|im_start|>assistant\n")
        assert sample["response_text"] == "<answer>6</answer><|im_end|>"
        assert sample["loss_mask"] == [1] * len(response)
        assert sample["logprobs"] == [-0.5] * len(response)
        correct = 1.0 if sample["task_id"] == "1" else 0.0  # 3+3 = 6; 2+0 = 2
        assert sample["rewards"]["correct"] == correct and sample["rewards"]["brief"] == 1.0
        assert sample["reward"] == pytest.approx(correct + 0.2)
    assert len({s["group_id"] for s in samples}) == 2
    assert result["metrics"]["verifiers/reward_mean"] == pytest.approx(0.7)
    assert result["metrics"]["verifiers/num_turns_mean"] == 1.0


@pytest.mark.slow
def test_031_multi_turn_tool_environment_masks_its_own_tokens(results_031) -> None:
    [sample] = results_031[1]["samples"]
    first, second = results_031[1]["calls"]
    assert sample["status"] == "completed"
    assert sample["tokens"][:len(second["prompt_ids"])] == second["prompt_ids"]
    inserted = len(second["prompt_ids"]) - len(first["prompt_ids"]) - len(first["output_ids"])
    assert inserted > 0
    assert sample["loss_mask"] == ([1] * len(first["output_ids"]) + [0] * inserted
                                   + [1] * len(second["output_ids"]))
    assert sample["logprobs"] == ([-0.5] * len(first["output_ids"]) + [0.0] * inserted
                                  + [-0.5] * len(second["output_ids"]))
    assert sample["response_text"] == (
        "<tool>add 10 0</tool><|im_end|>\n<|im_start|>user\n<result>10</result><|im_end|>\n"
        "<|im_start|>assistant\nIt is 10.<|im_end|>")
    assert {k: sample["rewards"][k] for k in ("correct", "used_tool")} == {
        "correct": 1.0, "used_tool": 1.0}
    assert sample["reward"] == pytest.approx(1.5)
    assert sample["metadata"]["num_turns"] == 2


@pytest.mark.slow
def test_031_an_empty_first_reply_ends_the_rollout_and_trains(results_031) -> None:
    """verifiers stops a rollout whose reply is empty (its EmptyModelResponseError) after one
    model call; the reply was sampled, so it is a completed one-turn sample."""
    [sample] = results_031[4]["samples"]
    [call] = results_031[4]["calls"]
    assert sample["status"] == "completed" and sample["response_text"] == "<|im_end|>"
    assert sample["tokens"] == call["prompt_ids"] + call["output_ids"]
    assert sample["loss_mask"] == [1]
    assert sample["metadata"]["num_turns"] == 1
    assert sample["metadata"]["stop_condition"] == "has_error"


@pytest.mark.slow
def test_031_an_environment_raising_in_load_environment_is_one_line(results_031) -> None:
    assert results_031[2] == {"error": "verifiers environment 'rollyard_vf_legacy_arith': "
                                       "load_environment raised ValueError: no dataset today "
                                       "second line (plugin 'verifiers')"}


@pytest.mark.slow
def test_031_codegolf_as_a_load_environment_environment(results_031) -> None:
    result = results_031[3]
    assert [t["id"] for t in result["tasks"]][:2] == ["add-two", "calculator"]
    [sample] = result["samples"]
    assert sample["rewards"]["correct"] == 1.0 and sample["rewards"]["concise"] == 1.0
    assert sample["reward"] == pytest.approx(1.5)


@pytest.mark.slow
@pytest.mark.vf_matrix  # make test trains this environment (test_vf_train_e2e.py)
def test_020_single_turn_with_a_plain_reward_function(tiny_model_dir, isolated_envs_dir,
                                                     legacy_env_site) -> None:
    """Its own requirement (verifiers==0.2.0) selects its venv."""
    python = legacy_python("rollyard_vf_v020_arith", isolated_envs_dir, legacy_env_site)
    assert subprocess.run([str(python), "-c", "import verifiers; assert verifiers.__version__ "
                           "== '0.2.0', verifiers.__version__"]).returncode == 0
    [result] = run_cases(python, tiny_model_dir, legacy_env_site,
                         [{"env": "rollyard_vf_v020_arith", "replies": ["It is 6"], "groups": 2}])
    assert [t["id"] for t in result["tasks"]] == ["0", "1", "2", "3"]
    assert result["tasks"][0]["data"]["info"] == {"factors": [2, 3]}
    first, second = result["samples"]
    assert first["prompt_text"] == "<|im_start|>user\n2*3=<|im_end|>\n<|im_start|>assistant\n"
    assert first["response_text"] == "It is 6<|im_end|>"
    assert first["rewards"]["exact"] == 1.0 and second["rewards"]["exact"] == 0.0  # 3*4
    assert first["reward"] == pytest.approx(1.1) and second["reward"] == pytest.approx(0.1)
