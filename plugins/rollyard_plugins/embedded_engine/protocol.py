"""SGLang's native ``/generate`` request and response shapes, validated field by field.

Field names follow SGLang 0.5.23 (``GenerateReqInput`` and ``SamplingParams`` in
``sglang/srt/managers/io_struct.py`` and ``sglang/srt/sampling/sampling_params.py``). A field
the engine does not implement is refused with HTTP 400 naming it, never silently ignored.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rollyard_plugins.embedded_engine.sampling import SamplingOptions


class BadRequest(ValueError):
    """A request the engine refuses (HTTP 400); the message names the field."""


#: Top-level /generate fields the engine honours (routing and metrics fields have no effect
#: on one engine's answer). Anything else is refused.
REQUEST_FIELDS = frozenset({
    "rid", "input_ids", "text", "sampling_params", "return_logprob", "session_id",
    "log_metrics", "routing_key", "custom_labels"})
#: SGLang top-level fields accepted only at their neutral value.
NEUTRAL_REQUEST_VALUES: dict[str, tuple[Any, ...]] = {
    "stream": (False, None), "top_logprobs_num": (None, 0), "logprob_start_len": (None, -1),
    "return_text_in_logprobs": (False, None), "token_ids_logprob": (None,),
    "priority": (None,)}
#: Sampling fields whose value is honoured.
SAMPLING_FIELDS = frozenset({
    "max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "stop_token_ids",
    "ignore_eos",
    "sampling_seed", "no_stop_trim", "skip_special_tokens", "spaces_between_special_tokens", "n"})
#: SGLang sampling fields accepted only at their neutral value (they change nothing then).
NEUTRAL_SAMPLING_VALUES: dict[str, tuple[Any, ...]] = {
    "min_p": (0, 0.0), "frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0), "stop": (None, [], ""),
    "stop_regex": (None, [], ""), "json_schema": (None, ""), "regex": (None, ""),
    "ebnf": (None, ""), "logit_bias": (None, {}), "custom_params": (None, {}),
    "stream_interval": (None,)}


@dataclass
class ParsedPrompt:
    rid: str
    input_ids: list[int]
    options: SamplingOptions
    return_logprob: bool


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(params: dict[str, Any], name: str, default: float) -> float:
    value = params.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"sampling_params.{name} must be a finite number, got {value!r}")
    return float(value)


def _flag(params: dict[str, Any], name: str, default: bool) -> bool:
    value = params.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"sampling_params.{name} must be true or false, got {value!r}")
    return value


def parse_sampling(params: Any) -> SamplingOptions:
    """Validate ``sampling_params``; raise BadRequest naming the first bad field."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise BadRequest(f"sampling_params must be an object, got {type(params).__name__}")
    for name, value in params.items():
        if name in SAMPLING_FIELDS:
            continue
        if name in NEUTRAL_SAMPLING_VALUES:
            if value not in NEUTRAL_SAMPLING_VALUES[name]:
                raise BadRequest(f"sampling_params.{name} is not supported by the embedded "
                                 f"engine (only its default {NEUTRAL_SAMPLING_VALUES[name][0]!r})")
            continue
        raise BadRequest(f"sampling_params.{name} is not a known sampling field; known fields: "
                         f"{', '.join(sorted(SAMPLING_FIELDS | set(NEUTRAL_SAMPLING_VALUES)))}")
    max_new = params.get("max_new_tokens", 128)
    if not _is_int(max_new) or max_new <= 0:
        raise BadRequest(f"sampling_params.max_new_tokens must be a positive integer, "
                         f"got {max_new!r}")
    min_new = params.get("min_new_tokens", 0)
    min_new = 0 if min_new is None else min_new
    if not _is_int(min_new) or not 0 <= min_new <= max_new:
        raise BadRequest(f"sampling_params.min_new_tokens must be an integer in "
                         f"[0, max_new_tokens ({max_new})], got {min_new!r}")
    temperature = _number(params, "temperature", 1.0)
    if temperature < 0:
        raise BadRequest(f"sampling_params.temperature must be >= 0, got {temperature}")
    top_p = _number(params, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise BadRequest(f"sampling_params.top_p must be in (0, 1], got {top_p}")
    top_k = params.get("top_k", -1)
    top_k = -1 if top_k is None else top_k
    if not _is_int(top_k) or (top_k < 1 and top_k != -1):
        raise BadRequest(f"sampling_params.top_k must be -1 (all) or a positive integer, "
                         f"got {top_k!r}")
    stop_ids = params.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(_is_int(t) for t in stop_ids):
        raise BadRequest(f"sampling_params.stop_token_ids must be a list of integers, "
                         f"got {stop_ids!r}")
    seed = params.get("sampling_seed")
    if seed is not None and not _is_int(seed):
        raise BadRequest(f"sampling_params.sampling_seed must be an integer, got {seed!r}")
    n = params.get("n", 1)
    if n is not None and (not _is_int(n) or n < 1):
        raise BadRequest(f"sampling_params.n must be a positive integer, got {n!r}")
    return SamplingOptions(
        max_new_tokens=max_new, min_new_tokens=min_new, temperature=temperature, top_p=top_p,
        top_k=top_k, stop_token_ids=frozenset(stop_ids),
        ignore_eos=_flag(params, "ignore_eos", False),
        seed=seed, no_stop_trim=_flag(params, "no_stop_trim", False),
        skip_special_tokens=_flag(params, "skip_special_tokens", True))


def _check_ids(ids: Any, where: str, vocab_size: int) -> list[int]:
    if not isinstance(ids, list) or not ids:
        raise BadRequest(f"{where} must be a non-empty list of token ids")
    for i, token in enumerate(ids):
        if not _is_int(token):
            raise BadRequest(f"{where}[{i}] is {token!r}; token ids must be integers")
        if not 0 <= token < vocab_size:
            raise BadRequest(f"{where}[{i}] is {token}, outside the vocabulary [0, {vocab_size})")
    return ids


def check_fields(body: Any, known: Iterable[str], neutral: Mapping[str, tuple[Any, ...]],
                 endpoint: str) -> None:
    """BadRequest unless ``body`` is an object of ``known`` fields, and of ``neutral`` ones at
    a value that changes nothing (the first is the one to send)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    accepted = set(known) | set(neutral)
    unknown = sorted(set(body) - accepted)
    if unknown:
        raise BadRequest(f"unsupported field(s) {unknown}; {endpoint} accepts "
                         f"{sorted(accepted)}")
    for name, values in neutral.items():
        if name in body and body[name] not in values:
            raise BadRequest(f"{name}={body[name]!r} is not supported by {endpoint} "
                             f"(only {values[0]!r})")


def parse_generate(body: Any, vocab_size: int, context_len: int,
                   tokenize: Any) -> tuple[list[ParsedPrompt], bool]:
    """Validate a /generate body; return its prompts and whether it was a batch."""
    check_fields(body, REQUEST_FIELDS, NEUTRAL_REQUEST_VALUES, "the embedded engine")
    if ("input_ids" in body) == ("text" in body):
        raise BadRequest("give exactly one of input_ids and text")
    if "text" in body:
        texts = body["text"]
        batch = isinstance(texts, list)
        texts = texts if batch else [texts]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise BadRequest("text must be a string or a non-empty list of strings")
        prompts = [tokenize(t) for t in texts]
    else:
        ids = body["input_ids"]
        batch = isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)
        prompts = ids if batch else [ids]
    where = "input_ids" if "input_ids" in body else "text"
    prompts = [_check_ids(p, f"{where}[{b}]" if batch else where, vocab_size)
               for b, p in enumerate(prompts)]
    options, n = _batch_sampling(body.get("sampling_params"), len(prompts), batch)
    for b, (prompt, option) in enumerate(zip(prompts, options)):
        total = len(prompt) + option.max_new_tokens
        if total > context_len:
            name = f"{where}[{b}]" if batch else where
            raise BadRequest(
                f"{name}: the prompt ({len(prompt)} tokens) plus sampling_params.max_new_tokens "
                f"({option.max_new_tokens}) is {total} tokens, longer than the model's context "
                f"length ({context_len} tokens)")
    if n > 1:  # SGLang's parallel sampling: n samples of each prompt, prompt after prompt
        prompts = [p for p in prompts for _ in range(n)]
        options = [o for o in options for _ in range(n)]
        batch = True
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, (str, list)):
        raise BadRequest(f"rid must be a string, got {rid!r}")
    rids = _rids(rid, len(prompts), batch)
    return_logprob = bool(body.get("return_logprob", False))
    return [ParsedPrompt(r, p, o, return_logprob)
            for r, p, o in zip(rids, prompts, options)], batch


def _batch_sampling(params: Any, count: int,
                    batch: bool) -> tuple[list[SamplingOptions], int]:
    """One SamplingOptions per prompt and the parallel-sample count ``n``: ``sampling_params``
    is one object for every prompt, or (a batch only) a list of one object per prompt, as in
    SGLang; every object must then give the same ``n``."""
    if not isinstance(params, list):
        n = params.get("n", 1) if isinstance(params, dict) else 1
        return [parse_sampling(params)] * count, n or 1
    if not batch:
        raise BadRequest("sampling_params must be an object for a single prompt (a list only "
                         "goes with a batch of prompts)")
    if len(params) != count:
        raise BadRequest(f"sampling_params has {len(params)} entries for {count} prompts")
    options = []
    for i, entry in enumerate(params):
        try:
            options.append(parse_sampling(entry))
        except BadRequest as exc:
            raise BadRequest(f"sampling_params[{i}]: {exc}") from None
    counts = {(entry.get("n", 1) or 1) for entry in params}
    if len(counts) > 1:
        raise BadRequest("sampling_params: every entry must give the same n")
    return options, counts.pop()


#: Request ids the engine makes up: one random prefix per process and a counter (a uuid4 per
#: request reads the OS's entropy every time, which costs more than the rest of a request).
_RID_PREFIX = uuid.uuid4().hex[:16]
_RID_COUNTER = itertools.count()


def new_rid() -> str:
    return f"{_RID_PREFIX}{next(_RID_COUNTER):016x}"


def _rids(rid: Any, count: int, batch: bool) -> list[str]:
    if rid is None:
        return [new_rid() for _ in range(count)]
    if isinstance(rid, list):
        if len(rid) != count or not all(isinstance(r, str) for r in rid):
            raise BadRequest(f"rid must be a list of {count} strings for this batch")
        return rid
    return [f"{rid}_{i}" for i in range(count)] if batch else [rid]


def format_result(output: list[int], logprobs: list[float], finish_reason: dict[str, Any],
                  rid: str, prompt_tokens: int, weight_version: str, text: str,
                  return_logprob: bool, latency: float) -> dict[str, Any]:
    """One /generate response in SGLang's shape."""
    meta: dict[str, Any] = {
        "id": rid, "finish_reason": finish_reason, "prompt_tokens": prompt_tokens,
        "weight_version": weight_version, "completion_tokens": len(output),
        "cached_tokens": 0, "e2e_latency": latency}
    if return_logprob:
        meta["output_token_logprobs"] = [[lp, tok, None] for lp, tok in zip(logprobs, output)]
    return {"text": text, "output_ids": output, "meta_info": meta}
