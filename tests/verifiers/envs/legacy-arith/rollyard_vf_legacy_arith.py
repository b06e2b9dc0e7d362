"""A single-turn verifiers environment written the way published ones are (pre-0.4 API): add
two numbers. Declares ``verifiers>=0.3.1`` and calls the top-level legacy names, as published
environments do. Rewards: ``correct`` (weight 1: the parsed answer is the sum) and ``brief``
(weight 0.2: the reply has at most 20 characters).

``load_environment(num_tasks=4, fail=None)``: ``fail`` makes it raise that message (a test of
how a broken environment is reported); ``sync_reward=True`` scores ``brief`` with a plain
function instead of a coroutine function.
"""

import verifiers as vf
from datasets import Dataset


def load_environment(num_tasks: int = 4, fail: str | None = None, sync_reward: bool = False):
    if fail:
        raise ValueError(fail)
    rows = [{"question": f"What is {2 + i}+{3 * i}?", "answer": str(2 + 4 * i)}
            for i in range(num_tasks)]
    parser = vf.XMLParser(["answer"], answer_field="answer")

    async def correct(completion, answer, **kwargs) -> float:
        text = parser.parse_answer(completion) or ""
        return 1.0 if text.strip() == answer else 0.0

    async def brief(completion, **kwargs) -> float:
        return 1.0 if len(completion[-1]["content"] or "") <= 20 else 0.0

    def brief_sync(completion, **kwargs) -> float:
        return 1.0 if len(completion[-1]["content"] or "") <= 20 else 0.0

    rubric = vf.Rubric(funcs=[correct, brief_sync if sync_reward else brief],
                       weights=[1.0, 0.2], parser=parser)
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), parser=parser, rubric=rubric,
                            system_prompt="Answer inside <answer></answer>.")
