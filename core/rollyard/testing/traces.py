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
    """Requests that repeat an earlier request of their session (its input_ids, then more)
    without the reply the engine gave it: the history was re-tokenised or edited. A request
    that repeats no earlier one is a new episode that reuses the session id, and is fine.
    The first such request of each session is named."""
    earlier: dict[str, list[Call]] = {}
    problems = []
    for request, result in calls:
        sid, ids = request.session_id, request.input_ids
        if sid is None:
            continue
        before = earlier.setdefault(sid, [])
        continued = [(r, out) for r, out in before
                     if len(ids) > len(r.input_ids) and ids[:len(r.input_ids)] == r.input_ids]
        before.append((request, result))
        if not continued or any(
                ids[len(r.input_ids):len(r.input_ids) + len(out.output_ids)] == out.output_ids
                for r, out in continued):
            continue
        last, reply = max(continued, key=lambda call: len(call[0].input_ids))
        expected = list(last.input_ids) + list(reply.output_ids)
        position = _first_difference(expected, ids)
        got = ids[position] if position < len(ids) else "the end of input_ids"
        if not any(p.startswith(f"session {sid!r},") for p in problems):
            problems.append(
                f"session {sid!r}, turn {len(before)}: input_ids[{position}] is {got}, but the "
                f"engine's reply to turn {before.index((last, reply)) + 1} put "
                f"{expected[position]} there; send the engine's own output_ids back, not a "
                "re-tokenised history")
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


def _first_difference(expected: Sequence[int], got: Sequence[int]) -> int:
    """The first position where ``got`` does not go on as ``expected`` (which it differs
    from)."""
    return next(i for i, token in enumerate(expected) if i >= len(got) or got[i] != token)
