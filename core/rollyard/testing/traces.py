"""Check samples against what the scripted engine really produced: the loss mask is 1 exactly
on the engine's tokens, their logprobs are the engine's, and each request of a session
continues the tokens of the one before (no re-tokenised history)."""

from __future__ import annotations

from collections.abc import Sequence

from rollyard.types import GenerateRequest, GenerateResult, Sample

Call = tuple[GenerateRequest, GenerateResult]
#: Logprobs are compared up to this; engines send them as JSON floats.
TOLERANCE = 1e-6


def session_problems(calls: Sequence[Call]) -> list[str]:
    """A request that repeats the previous request of its session but not the reply the
    engine gave it: the history was re-tokenised or edited (the first such, per session)."""
    last: dict[str, Call] = {}
    problems = []
    turns: dict[str, int] = {}
    for request, result in calls:
        sid = request.session_id
        if sid is None:
            continue
        turns[sid] = turns.get(sid, 0) + 1
        before = last.get(sid)
        last[sid] = (request, result)
        if before is None:
            continue
        prev_ids, ids = before[0].input_ids, request.input_ids
        if ids[:len(prev_ids)] != prev_ids:
            continue  # a new episode that reuses the session id, not a continuation
        expected = list(prev_ids) + list(before[1].output_ids)
        position = _first_difference(expected, ids)
        if position is not None:
            got = ids[position] if position < len(ids) else "the end of input_ids"
            problems.append(
                f"session {sid!r}, turn {turns[sid]}: input_ids[{position}] is {got}, but "
                f"the engine's reply of turn {turns[sid] - 1} put {expected[position]} there; "
                "send the engine's own output_ids back, not a re-tokenised history")
    return problems


def sample_problem(index: int, sample: Sample, calls: Sequence[Call]) -> str | None:
    """What is wrong with usable ``sample`` (number ``index``) given the engine's ``calls``:
    the first token whose mask or logprob disagrees with the engine, naming the turn and the
    response position; None when it agrees."""
    where = f"sample {index}"
    if sample.prompt_len <= 0:
        return (f"{where}: prompt_len is {sample.prompt_len}; the prompt (the first "
                "request's input_ids) must be counted")
    spans = _engine_spans(sample, calls)
    if not spans:
        return (f"{where}: no reply of the engine follows its prompt in its tokens; build "
                "the response from the engine's output_ids")
    engine: dict[int, tuple[int, float]] = {}  # response position -> (turn, logprob)
    for turn, (start, result) in enumerate(spans, 1):
        for offset, logprob in enumerate(result.logprobs):
            engine.setdefault(start + offset - sample.prompt_len, (turn, float(logprob)))
    turn = 0
    for position, (mask, logprob) in enumerate(zip(sample.loss_mask, sample.logprobs)):
        token = sample.tokens[sample.prompt_len + position]
        if position in engine:
            turn, expected = engine[position]
            if mask != 1:
                return (f"{where}, turn {turn}, response position {position} (token "
                        f"{token}): loss_mask is {mask} on a token the engine generated")
            if abs(logprob - expected) > TOLERANCE:
                return (f"{where}, turn {turn}, response position {position} (token "
                        f"{token}): logprob is {logprob}, the engine's is {expected}")
        elif mask != 0:
            return (f"{where}, turn {turn} (environment tokens after the model's reply), "
                    f"response position {position} (token {token}): loss_mask is {mask} on "
                    "a token the engine did not generate")
    return None


def _engine_spans(sample: Sample, calls: Sequence[Call]) -> list[tuple[int, GenerateResult]]:
    """Where in ``sample.tokens`` a reply of the engine follows the very input it answered:
    (start, result), in order, the longest reply at each start."""
    tokens = sample.tokens
    found: dict[int, GenerateResult] = {}
    for request, result in calls:
        start, output = len(request.input_ids), list(result.output_ids)
        if not output or start < sample.prompt_len or start + len(output) > len(tokens):
            continue
        if tokens[start:start + len(output)] == output and tokens[:start] == request.input_ids:
            if start not in found or len(found[start].output_ids) < len(output):
                found[start] = result
    return sorted(found.items(), key=lambda item: item[0])


def _first_difference(expected: Sequence[int], got: Sequence[int]) -> int | None:
    for position, token in enumerate(expected):
        if position >= len(got) or got[position] != token:
            return position
    return None
