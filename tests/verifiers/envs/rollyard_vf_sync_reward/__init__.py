"""A verifiers (>= 0.4) taskset whose reward is a plain function, which verifiers 0.4 cannot
await: the rollout refuses it before any episode runs."""

import verifiers.v1 as vf


class EchoTask(vf.Task[vf.TaskData]):
    @vf.reward(weight=1.0)
    def nonempty(self, trace) -> float:
        return 1.0 if trace.last_reply else 0.0


class EchoTaskset(vf.Taskset[EchoTask]):
    def load(self):
        yield EchoTask(vf.TaskData(id="echo-0", prompt="Say something."), self.config.task)


__all__ = ["EchoTaskset"]
