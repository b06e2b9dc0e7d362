"""Token sequences of a legacy rollout, rebuilt from the calls the bridge recorded.

A pre-0.4 verifiers rollout reaches the engines through the bridge once per model turn; the
bridge keeps each call's prompt ids, sampled ids and logprobs (:class:`RecordedCall`). Nothing
is re-tokenised here: the first call's prompt is the sample's prompt, each sampled id is a model
token (loss mask 1, its engine logprob), and the ids a later prompt adds after the previous
prompt and reply are the environment's (loss mask 0: tool results, feedback, the chat template
between turns). A later prompt that does not extend the previous prompt and reply (the
environment rewrote the history, or the template closed a reply cut off by ``max_tokens``)
starts a new segment, as a new branch does on the 0.4 path: one Sample per segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rollyard_verifiers.bridge import RecordedCall


@dataclass
class Segment:
    """One token sequence: ``tokens[:prompt_len]`` is the prompt; ``loss_mask`` and
    ``logprobs`` cover the rest (0 and 0.0 on environment tokens)."""

    tokens: list[int]
    prompt_len: int
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def segments(calls: Sequence[RecordedCall]) -> list[Segment]:
    """The segments of one rollout's calls, in call order."""
    found: list[Segment] = []
    for call in calls:
        if len(call.output_ids) != len(call.logprobs):
            raise ValueError(f"a recorded call has {len(call.output_ids)} output ids but "
                             f"{len(call.logprobs)} logprobs")
        current = found[-1] if found else None
        if current is None or call.prompt_ids[:len(current.tokens)] != current.tokens:
            current = Segment(tokens=list(call.prompt_ids), prompt_len=len(call.prompt_ids))
            found.append(current)
        else:
            inserted = call.prompt_ids[len(current.tokens):]
            current.tokens += inserted
            current.loss_mask += [0] * len(inserted)
            current.logprobs += [0.0] * len(inserted)
        current.tokens += call.output_ids
        current.loss_mask += [1] * len(call.output_ids)
        current.logprobs += [float(lp) for lp in call.logprobs]
    return found
