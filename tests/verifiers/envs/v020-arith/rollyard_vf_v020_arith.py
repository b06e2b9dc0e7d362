"""A single-turn verifiers 0.2.0 environment (the API at the top level of ``verifiers``):
multiply two numbers. Rewards: ``exact`` (weight 1: the reply's last number is the product; a
plain function, which verifiers 0.2 awaits through ``maybe_await``) and ``short`` (weight 0.1:
the reply has at most 12 characters).
"""

import re

import verifiers as vf
from datasets import Dataset


def load_environment(num_tasks: int = 4):
    rows = [{"question": f"{i + 2}*{i + 3}=", "answer": str((i + 2) * (i + 3)),
             "info": {"factors": [i + 2, i + 3]}} for i in range(num_tasks)]

    def exact(completion, answer) -> float:
        numbers = re.findall(r"-?\d+", completion[-1]["content"] or "")
        return 1.0 if numbers and numbers[-1] == answer else 0.0

    async def short(completion) -> float:
        return 1.0 if len(completion[-1]["content"] or "") <= 12 else 0.0

    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows),
                            rubric=vf.Rubric(funcs=[exact, short], weights=[1.0, 0.1]))
