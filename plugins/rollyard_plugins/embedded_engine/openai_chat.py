"""The embedded engine's OpenAI-compatible face: ``POST /v1/chat/completions``.

Any OpenAI client (an LLM judge, a tool, a chat UI) can talk to the model the engine serves.
A chat request becomes a ``/generate`` body: the messages through the model's chat template
with the assistant turn opened, the OpenAI sampling fields as SGLang ``sampling_params``; the
finished sequences become one ``chat.completion`` object. Streaming, tools and logprobs are not
offered: such requests are refused with HTTP 400 naming the field.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from rollyard_plugins.embedded_engine.protocol import BadRequest, check_fields

#: OpenAI fields honoured, and fields accepted only at a value that changes nothing.
CHAT_FIELDS = {"model", "messages", "temperature", "top_p", "max_tokens",
               "max_completion_tokens", "seed", "n", "user"}
NEUTRAL_CHAT_VALUES: dict[str, tuple[Any, ...]] = {
    "stream": (False, None), "logprobs": (False, None), "tools": (None, []),
    "tool_choice": (None, "none"), "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None)}
#: max_tokens when the request gives none.
DEFAULT_MAX_TOKENS = 256
_FINISH = {"stop": "stop", "length": "length", "abort": "stop"}

ChatTemplate = Callable[[list[dict[str, Any]]], list[int]]


def chat_to_generate(body: Any, chat_template: ChatTemplate) -> dict[str, Any]:
    """The ``/generate`` body of an OpenAI chat request; BadRequest names what is wrong."""
    check_fields(body, CHAT_FIELDS, NEUTRAL_CHAT_VALUES, "/v1/chat/completions")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of {role, content} objects")
    for i, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise BadRequest(f"messages[{i}] must be an object with string role and content")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    params: dict[str, Any] = {
        "max_new_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
        "n": body.get("n", 1)}
    if body.get("seed") is not None:
        params["sampling_seed"] = body["seed"]
    try:
        input_ids = chat_template([{"role": m["role"], "content": m["content"]}
                                   for m in messages])
    except Exception as exc:  # the template refused these messages (e.g. roles out of order)
        raise BadRequest(f"the model's chat template refused these messages: {exc}") from exc
    return {"input_ids": input_ids, "sampling_params": params}


def chat_completion(results: Sequence[dict[str, Any]], model: str) -> dict[str, Any]:
    """One OpenAI ``chat.completion`` from the ``/generate`` results of its ``n`` choices."""
    choices = [{"index": i, "message": {"role": "assistant", "content": r["text"]},
                "finish_reason": _FINISH.get(r["meta_info"]["finish_reason"].get("type"), "stop")}
               for i, r in enumerate(results)]
    prompt_tokens = results[0]["meta_info"]["prompt_tokens"]
    completion_tokens = sum(r["meta_info"]["completion_tokens"] for r in results)
    return {"id": f"chatcmpl-{results[0]['meta_info']['id']}", "object": "chat.completion",
            "created": int(time.time()), "model": model, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}
