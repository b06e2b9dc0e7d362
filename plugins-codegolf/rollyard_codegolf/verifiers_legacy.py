"""The code-golf problems as a pre-0.4 verifiers environment (``load_environment``), as
environments published for verifiers 0.1.9–0.3.x are written, scored in the code-golf sandbox.

Environment id ``rollyard_codegolf.verifiers_legacy``: ``rollyard train --rollout-plugin
verifiers --vf-env rollyard_codegolf.verifiers_legacy`` runs it in a venv with verifiers < 0.4
(the 0.4 taskset is :mod:`rollyard_codegolf.verifiers_env`). Importing this module imports
verifiers, so the codegolf entry point never imports it.

``load_environment(**options)``: the code-golf plugin's options without their ``--codegolf-``
prefix (``tasks``, ``extract``, ``correct``, ``workers``, ``timeout`` …). The dataset is the
train split, the eval dataset the eval split; each row's id is the problem id. Rewards:
``correct`` (weight 1: share of the hidden tests passed, or all-or-nothing with ``correct =
"all"``) and ``concise`` (weight 0.5: ``min(1, reference / length)`` for a program that passes
every hidden test, else 0), computed by one sandbox run per rollout.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import verifiers as vf
from datasets import Dataset

from rollyard_codegolf.options import CodegolfOptions
from rollyard_codegolf.parsing import extract_program
from rollyard_codegolf.prompting import build_prompt
from rollyard_codegolf.runner import ProgramRunner
from rollyard_codegolf.scoring import ProgramScore
from rollyard_codegolf.tasks import load_tasks, parse_task, split_tasks


def _rows(options: CodegolfOptions, split: str) -> Dataset:
    problems = split_tasks(load_tasks(options.tasks), split)
    return Dataset.from_list([{"id": p.id, "prompt": build_prompt(p), "answer": "",
                               "info": json.dumps({"codegolf": p.as_dict()})}
                              for p in problems])


def load_environment(**options: Any) -> Any:
    opts = CodegolfOptions.of(options)
    runners: list[ProgramRunner] = []  # built on the first score: listing tasks needs none

    def score(completion: Any, info: dict[str, Any], state: dict[str, Any]) -> Any:
        """The one sandbox run of this rollout, however many rewards ask."""
        if "codegolf_score" not in state:
            if not runners:
                runners.append(ProgramRunner(opts))
            problem = parse_task(info["codegolf"], where=f"task {info['codegolf']['id']!r}")
            reply = completion[-1]["content"] if completion else ""
            code = extract_program(reply or "", opts.extract)
            state["codegolf_score"] = asyncio.ensure_future(runners[0].score(code, problem))
        return state["codegolf_score"]

    async def correct(completion, info, state) -> float:
        result: ProgramScore = await score(completion, info, state)
        return float(result.all_passed) if opts.correct == "all" else result.fraction

    async def concise(completion, info, state) -> float:
        result: ProgramScore = await score(completion, info, state)
        if not result.all_passed:
            return 0.0
        return min(1.0, info["codegolf"]["reference_len"] / max(1, result.length))

    return vf.SingleTurnEnv(dataset=_rows(opts, "train"), eval_dataset=_rows(opts, "eval"),
                            rubric=vf.Rubric(funcs=[correct, concise], weights=[1.0, 0.5]))
