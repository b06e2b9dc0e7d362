"""Run ``VerifiersRollout`` on pre-0.4 environments inside a venv of an old verifiers (the test
body of tests/verifiers/test_vf_legacy.py runs here as a subprocess; the assertions stay in the
test). The engine is rollyard's ScriptedTransport, each episode playing its script from the
start, behind the bridge's real HTTP face and verifiers' own renderer client.

Usage: ``python vf_legacy_runner.py MODEL_DIR`` with a JSON list of cases on stdin, each
``{"env", "options", "replies", "groups", "n", "max_new_tokens"}``; prints one JSON object per
case: ``tasks``, ``samples`` (with ``response_text``: the decoded response tokens), ``calls``
(what the engine was asked and answered) and ``metrics``, or ``error`` (a RolloutError's
message).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from dataclasses import asdict
from typing import Any

from rollyard import RolloutContext, RolloutError, SamplingParams
from rollyard.rewards import RewardSet
from rollyard.testing import ScriptedTransport
from rollyard_verifiers.rollout import VerifiersRollout
from transformers import AutoTokenizer


def run_case(tokenizer: Any, case: dict[str, Any]) -> dict[str, Any]:
    transport = ScriptedTransport(case["replies"], tokenizer=tokenizer, per_session=True)
    context = RolloutContext(
        config={}, tokenizer=tokenizer, transport=transport, rewards=RewardSet({}, {}),
        options={"env": case["env"], "concurrency": 8, **case.get("options", {})},
        rng=random.Random(0),
        sampling=SamplingParams(max_new_tokens=case.get("max_new_tokens", 64), temperature=1.0))
    try:
        rollout = VerifiersRollout(context)
        tasks = rollout.tasks("train")
    except RolloutError as exc:
        return {"error": str(exc)}

    async def groups() -> list[Any]:
        chosen = tasks[:case.get("groups", 1)]
        return await asyncio.gather(*(rollout.run_group(t, case.get("n", 1)) for t in chosen))

    samples = []
    for group in asyncio.run(groups()):
        for sample in group:
            sample.validate()
            record = asdict(sample)
            record["status"] = sample.status.value
            record["response_text"] = tokenizer.decode(sample.response_ids)
            record["prompt_text"] = tokenizer.decode(sample.tokens[:sample.prompt_len])
            samples.append(record)
    calls = [{"prompt_ids": request.input_ids, "output_ids": result.output_ids,
              "logprobs": result.logprobs} for request, result in transport.calls]
    return {"tasks": [{"id": t.id, "prompt": t.prompt, "data": t.data} for t in tasks],
            "samples": samples, "calls": calls, "metrics": rollout.metrics()}


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
    for case in json.loads(sys.stdin.read()):
        print(json.dumps(run_case(tokenizer, case), default=str), flush=True)


if __name__ == "__main__":
    main()
