"""A multi-turn tool verifiers environment in the pre-0.4 API, written the way published ones
are (declares ``verifiers>=0.3.1``, calls the top-level legacy names). The model calls the
calculator in text, ``<tool>add 2 3</tool>``, and the environment answers in a user turn
(``<result>5</result>``, or a reminder of the format when the reply has no call) until
``max_turns``. Text tool calls keep it independent of the tokenizer's special tokens, so a tiny
test model runs it. Rewards: ``correct`` (weight 1: the last reply contains the sum) and
``used_tool`` (weight 0.5: at least one well-formed call).
"""

import verifiers as vf
from datasets import Dataset


class CalculatorEnv(vf.MultiTurnEnv):
    """Answers each ``<tool>add A B</tool>`` with ``<result>A+B</result>``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tool_parser = vf.XMLParser(["tool"], answer_field="tool")

    async def env_response(self, messages, state, **kwargs):
        call = self.tool_parser.parse_answer(messages) or ""
        parts = call.split()
        if len(parts) == 3 and parts[0] == "add" and all(p.lstrip("-").isdigit()
                                                        for p in parts[1:]):
            state["calculator_calls"] = state.get("calculator_calls", 0) + 1
            reply = f"<result>{int(parts[1]) + int(parts[2])}</result>"
        else:
            reply = "Call the calculator as <tool>add A B</tool>."
        return [{"role": "user", "content": reply}]


def load_environment(num_tasks: int = 4, max_turns: int = 2):
    rows = [{"question": f"What is {10 + i}+{7 * i}? Use the calculator.",
             "answer": str(10 + 8 * i)} for i in range(num_tasks)]

    async def correct(completion, answer, **kwargs) -> float:
        return 1.0 if answer in str(completion[-1]["content"] or "") else 0.0

    async def used_tool(state, **kwargs) -> float:
        return 1.0 if state.get("calculator_calls", 0) > 0 else 0.0

    rubric = vf.Rubric(funcs=[correct, used_tool], weights=[1.0, 0.5])
    return CalculatorEnv(dataset=Dataset.from_list(rows), rubric=rubric, max_turns=max_turns,
                         system_prompt="Call <tool>add A B</tool>, then answer.")
