"""OpenAI chat and text completion requests as vLLM generate bodies, and the responses back.

verifiers before 0.2 has no renderer client: its environments call an OpenAI-compatible server
(``client.chat.completions.create``) and read the token ids the way vLLM returns them with
``return_tokens_as_token_ids`` (``prompt_token_ids`` on the response, ``token_ids`` on the
choice, ``logprobs.content`` labelled ``token_id:<id>``). Here the prompt is rendered with the
run's tokenizer (its chat template), and the sampling keys become the ``sampling_params`` of
:func:`rollyard_verifiers.translate.translate_request`, which stays the one place that decides
what an engine can honour.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from rollyard_verifiers.translate import BridgeError

#: OpenAI request keys passed on as vLLM sampling params (same meaning).
SAMPLING_KEYS = frozenset({
    "max_tokens", "temperature", "top_p", "top_k", "seed", "n", "stop", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "min_p", "min_tokens", "stop_token_ids",
    "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
})
#: OpenAI request keys that change nothing about the sampled ids.
IGNORED_KEYS = frozenset({"model", "user", "return_tokens_as_token_ids", "stream_options",
                          "parallel_tool_calls", "tool_choice", "modalities", "cache_salt",
                          "priority"})


def sampling_params(body: Mapping[str, Any], consumed: frozenset[str]) -> dict[str, Any]:
    """The vLLM ``sampling_params`` of an OpenAI request; ``consumed`` keys (the prompt) are
    the caller's. An unknown key, streaming or top alternatives are an error naming the key."""
    params: dict[str, Any] = {"logprobs": 1}
    for key, value in body.items():
        if key in consumed or key in IGNORED_KEYS:
            continue
        if key in SAMPLING_KEYS:
            params[key] = value
        elif key == "max_completion_tokens":
            params.setdefault("max_tokens", value)
        elif key == "logprobs":
            if value not in (None, True, False, 0, 1):
                raise BridgeError(f"request field 'logprobs'={value!r}: rollyard returns only "
                                  "the sampled token's logprob")
        elif key == "top_logprobs":
            if value not in (None, 0):
                raise BridgeError(f"request field 'top_logprobs'={value!r}: rollyard returns "
                                  "only the sampled token's logprob")
        elif key == "stream":
            if value:
                raise BridgeError("request field 'stream': streaming is not supported")
        else:
            raise BridgeError(f"request field {key!r} is not supported; known fields: "
                              f"{sorted(SAMPLING_KEYS | IGNORED_KEYS | consumed)}")
    return params


def chat_prompt_ids(tokenizer: Any, body: Mapping[str, Any]) -> list[int]:
    """The prompt ids of a chat request: its messages (and tools) through the chat template,
    with the generation prompt."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BridgeError("request field 'messages' must be a non-empty list of messages")
    kwargs: dict[str, Any] = {"add_generation_prompt": True, "tokenize": True}
    if body.get("tools"):
        kwargs["tools"] = body["tools"]
    try:
        ids = tokenizer.apply_chat_template(messages, **kwargs)
    except Exception as exc:  # a template error names what it could not render
        raise BridgeError(f"request field 'messages' cannot be rendered with the model's chat "
                          f"template: {type(exc).__name__}: {exc}") from exc
    if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def completion_prompt_ids(tokenizer: Any, body: Mapping[str, Any]) -> list[int]:
    """The prompt ids of a text completion request (a string, or a list of token ids)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return [int(t) for t in tokenizer.encode(prompt, add_special_tokens=False)]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    raise BridgeError("request field 'prompt' must be a non-empty string or list of token ids")


def chat_response(model: str, prompt_ids: list[int], choice: Mapping[str, Any],
                  text: str) -> dict[str, Any]:
    """A ``chat.completion`` carrying the ids as vLLM does (``prompt_token_ids``,
    ``choices[0].token_ids``, ``logprobs.content`` labelled ``token_id:<id>``)."""
    ids = choice["token_ids"]
    return {
        "id": f"chatcmpl-rollyard-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": model, "prompt_token_ids": prompt_ids,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": choice["finish_reason"], "token_ids": ids,
                     "logprobs": {"content": [{**c, "bytes": None, "top_logprobs": []}
                                              for c in choice["logprobs"]["content"]]}}],
        "usage": _usage(prompt_ids, ids),
    }


def completion_response(model: str, prompt_ids: list[int], choice: Mapping[str, Any],
                        text: str) -> dict[str, Any]:
    """A ``text_completion`` with vLLM's token fields on its choice."""
    ids = choice["token_ids"]
    content = choice["logprobs"]["content"]
    return {
        "id": f"cmpl-rollyard-{uuid.uuid4().hex}", "object": "text_completion",
        "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": choice["finish_reason"],
                     "token_ids": ids, "prompt_token_ids": prompt_ids,
                     "logprobs": {"tokens": [c["token"] for c in content],
                                  "token_logprobs": [c["logprob"] for c in content],
                                  "top_logprobs": None, "text_offset": None}}],
        "usage": _usage(prompt_ids, ids),
    }


def _usage(prompt_ids: list[int], ids: list[int]) -> dict[str, int]:
    return {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
            "total_tokens": len(prompt_ids) + len(ids)}
