"""A small single-turn verifiers (>= 0.4) environment for rollyard's tests: add two numbers.

Taskset id ``rollyard_vf_arith`` (this folder must be on ``sys.path``). Two rewards: ``correct``
(the reply contains the sum) and ``brief`` (the reply has at most 20 characters).
"""

import verifiers.v1 as vf


class ArithData(vf.TaskData):
    answer: str


class ArithTask(vf.Task[ArithData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace) -> float:
        return 1.0 if self.data.answer in trace.last_reply else 0.0

    @vf.reward(weight=0.2)
    async def brief(self, trace) -> float:
        return 1.0 if len(trace.last_reply) <= 20 else 0.0


class ArithTaskset(vf.Taskset[ArithTask]):
    """Four fixed additions, ids ``add-0`` … ``add-3``."""

    def load(self):
        for i in range(4):
            a, b = 2 + i, 3 * i
            yield ArithTask(ArithData(id=f"add-{i}", prompt=f"What is {a}+{b}?",
                                      answer=str(a + b)), self.config.task)


__all__ = ["ArithTaskset"]
