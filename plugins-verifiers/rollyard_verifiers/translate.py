"""The one translation between vLLM's ``/inference/v1/generate`` and rollyard's token API.

verifiers renders chat messages to token ids client-side (through ``renderers``) and posts
them in vLLM's shape; rollyard engines speak SGLang. A request becomes a
:class:`rollyard.GenerateRequest` (the ``sglang`` transport then writes the SGLang body:
``max_new_tokens``, ``min_new_tokens``, ``sampling_seed``, ``no_stop_trim``,
``return_logprob``), and a
:class:`rollyard.GenerateResult` becomes the ``choices[0]`` that ``renderers`` parses. Both
directions are strict: anything that cannot be carried faithfully is an error naming the
field, never a silent change of meaning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rollyard import GenerateRequest, GenerateResult, SamplingParams

#: Body keys that carry nothing an SGLang engine needs (vLLM cache and scheduling hints).
IGNORED_BODY_KEYS = frozenset({"model", "cache_salt", "priority", "request_id"})
#: Body keys that ask for something rollyard cannot serve.
UNSUPPORTED_BODY_KEYS = {
    "features": "multimodal features are not supported by rollyard engines",
    "content_parts": "multimodal content parts are not supported by rollyard engines",
}
#: vLLM-only sampling keys that change nothing about which tokens are sampled.
IGNORED_SAMPLING_KEYS = frozenset({
    "logprobs", "skip_special_tokens", "spaces_between_special_tokens",
    "routed_experts_prompt_start", "include_stop_str_in_output",
})
#: Sampling keys accepted only at their neutral value, because rollyard cannot honour others.
NEUTRAL_SAMPLING_VALUES: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "stop": (None, [], ""),
    "repetition_penalty": (None, 1, 1.0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "min_p": (None, 0, 0.0),
}
MAPPED_SAMPLING_KEYS = frozenset({
    "max_tokens", "min_tokens", "temperature", "top_p", "top_k", "stop_token_ids", "seed",
})


class BridgeError(ValueError):
    """A request cannot cross the bridge; the message names the field."""


class EngineResultError(BridgeError):
    """An engine result cannot be turned into a response renderers would accept."""


def translate_request(body: Mapping[str, Any], session_id: str | None = None,
                      max_model_len: int | None = None) -> GenerateRequest:
    """The rollyard request for one vLLM-style generate ``body``.

    ``max_tokens`` is clamped to the context left after the prompt when ``max_model_len``
    is known; a prompt that leaves no room, or a missing ``max_tokens`` with no known
    context, is an error.
    """
    if not isinstance(body, Mapping):
        raise BridgeError(f"request body must be a JSON object, got {type(body).__name__}")
    for key in body:
        if key in UNSUPPORTED_BODY_KEYS:
            raise BridgeError(f"request field {key!r}: {UNSUPPORTED_BODY_KEYS[key]}")
        if key not in IGNORED_BODY_KEYS and key not in ("token_ids", "sampling_params"):
            raise BridgeError(f"request field {key!r} is not supported; expected token_ids, "
                              f"sampling_params and optionally {sorted(IGNORED_BODY_KEYS)}")
    input_ids = _token_ids(body.get("token_ids"), "token_ids")
    if not input_ids:
        raise BridgeError("request field 'token_ids' is empty")
    raw = body.get("sampling_params") or {}
    if not isinstance(raw, Mapping):
        raise BridgeError("request field 'sampling_params' must be a JSON object")
    return GenerateRequest(input_ids, _sampling(raw, len(input_ids), max_model_len),
                           session_id=session_id)


def _sampling(raw: Mapping[str, Any], prompt_len: int,
              max_model_len: int | None) -> SamplingParams:
    for key, value in raw.items():
        if key in IGNORED_SAMPLING_KEYS or key in MAPPED_SAMPLING_KEYS:
            continue
        if key in NEUTRAL_SAMPLING_VALUES:
            if value not in NEUTRAL_SAMPLING_VALUES[key]:
                raise BridgeError(f"sampling_params.{key}={value!r} is not supported by "
                                  f"rollyard engines; only {NEUTRAL_SAMPLING_VALUES[key]!r}")
            continue
        raise BridgeError(f"sampling_params.{key} is not supported; known keys: "
                          f"{sorted(MAPPED_SAMPLING_KEYS | IGNORED_SAMPLING_KEYS)}")
    if raw.get("logprobs") not in (None, 0, 1):
        raise BridgeError(f"sampling_params.logprobs={raw['logprobs']!r}: rollyard returns "
                          "only the sampled token's logprob (logprobs=1)")
    max_new_tokens = _max_new_tokens(raw.get("max_tokens"), prompt_len, max_model_len)
    top_k = _number(raw, "top_k", -1, int)
    min_new_tokens = _number(raw, "min_tokens", 0, int)
    if min_new_tokens < 0:
        raise BridgeError(f"sampling_params.min_tokens={min_new_tokens!r} must be >= 0")
    if isinstance(raw.get("max_tokens"), int) and min_new_tokens > raw["max_tokens"]:
        raise BridgeError(f"sampling_params.min_tokens={min_new_tokens!r} must be <= "
                          f"max_tokens ({raw['max_tokens']})")
    return SamplingParams(
        max_new_tokens=max_new_tokens,
        temperature=_number(raw, "temperature", 1.0, float),
        top_p=_number(raw, "top_p", 1.0, float),
        top_k=-1 if top_k == 0 else top_k,
        stop_token_ids=_token_ids(raw.get("stop_token_ids") or [],
                                  "sampling_params.stop_token_ids"),
        seed=None if raw.get("seed") is None else _number(raw, "seed", 0, int),
        min_new_tokens=min(min_new_tokens, max_new_tokens),
    )


def _max_new_tokens(requested: Any, prompt_len: int, max_model_len: int | None) -> int:
    if requested is not None and (not isinstance(requested, int) or isinstance(requested, bool)
                                  or requested < 1):
        raise BridgeError(f"sampling_params.max_tokens={requested!r} must be a positive int")
    if max_model_len is None:
        if requested is None:
            raise BridgeError("sampling_params.max_tokens is missing and the engine's context "
                              "length is unknown")
        return requested
    room = max_model_len - prompt_len
    if room < 1:
        raise BridgeError(f"prompt has {prompt_len} tokens; the engine's context of "
                          f"{max_model_len} tokens leaves no room to generate")
    return room if requested is None else min(requested, room)


def _number(raw: Mapping[str, Any], key: str, default: float, kind: type) -> Any:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            kind is int and not float(value).is_integer()):
        raise BridgeError(f"sampling_params.{key}={value!r} must be a {kind.__name__}")
    return kind(value)


def _token_ids(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise BridgeError(f"{where} must be a list of token ids, got {type(value).__name__}")
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise BridgeError(f"{where}[{i}]={token!r} is not a token id")
    return list(value)


def build_choice(result: GenerateResult) -> dict[str, Any]:
    """``choices[0]`` of the vLLM response for ``result``: ids, one ``token_id:<id>``-labelled
    logprob per id (zipped strictly), and the finish reason passed through."""
    if result.finish_reason not in ("stop", "length"):
        raise EngineResultError(f"engine finish_reason {result.finish_reason!r} is neither 'stop' "
                          "nor 'length'")
    ids = [int(t) for t in result.output_ids]
    if len(ids) != len(result.logprobs):
        raise EngineResultError(f"engine returned {len(ids)} output ids but {len(result.logprobs)} "
                          "logprobs; refusing to truncate either")
    content = []
    for i, (token, logprob) in enumerate(zip(ids, result.logprobs, strict=True)):
        value = float(logprob)
        if not math.isfinite(value):
            raise EngineResultError(f"engine logprob {i} (token {token}) is {value!r}, not finite")
        content.append({"token": f"token_id:{token}", "logprob": value})
    return {"index": 0, "token_ids": ids, "logprobs": {"content": content},
            "finish_reason": result.finish_reason}
