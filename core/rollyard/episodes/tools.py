"""Tool calls in a model's text, in the convention of its chat template, and tool results as
the messages that answer them.

Two conventions are understood: Qwen's (Hermes), each call a JSON object
``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` and ``</tool_call>``; and Llama
3's, the reply being one JSON object ``{"name": ..., "parameters": {...}}`` (after an optional
``<|python_tag|>``). :func:`tool_call_style` picks the one a tokenizer's template uses.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from rollyard.types import Message

ToolCallStyle = Literal["qwen", "llama3"]
_QWEN_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_PYTHON_TAG = "<|python_tag|>"


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCalls:
    """The calls found in a reply, and the reply's text around them; ``errors`` say why a
    call-looking part could not be read (bad JSON, no name), for the environment to tell the
    model."""

    calls: list[ToolCall]
    text: str
    errors: list[str] = field(default_factory=list)


def tool_call_style(tokenizer: Any) -> ToolCallStyle:
    """The convention of the tokenizer's chat template: ``llama3`` when it speaks of
    ``<|python_tag|>`` or of ``parameters`` without ``<tool_call>``, else ``qwen`` (also what
    the ChatML template of rollyard's tiny models is taught)."""
    template = str(getattr(tokenizer, "chat_template", "") or "")
    if "<tool_call>" in template:
        return "qwen"
    if _PYTHON_TAG in template or '"parameters"' in template:
        return "llama3"
    return "qwen"


def parse_tool_calls(text: str, style: ToolCallStyle | Any = "qwen") -> ToolCalls:
    """The tool calls in a reply's ``text``. ``style`` is a convention or a tokenizer (whose
    template decides, :func:`tool_call_style`)."""
    if not isinstance(style, str):
        style = tool_call_style(style)
    if style == "qwen":
        calls, errors = [], []
        for found in _QWEN_CALL.finditer(text):
            _read(found.group(1), "arguments", calls, errors)
        return ToolCalls(calls, _QWEN_CALL.sub("", text).strip(), errors)
    if style == "llama3":
        body = text.strip()
        body = body[len(_PYTHON_TAG):].strip() if body.startswith(_PYTHON_TAG) else body
        if not body.startswith("{"):
            return ToolCalls([], text.strip())
        calls, errors = [], []
        _read(body, "parameters", calls, errors)
        return ToolCalls(calls, "" if calls else text.strip(), errors)
    raise ValueError(f"unknown tool call style {style!r}; expected 'qwen' or 'llama3'")


def _read(body: str, arguments_key: str, calls: list[ToolCall], errors: list[str]) -> None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        errors.append(f"tool call {body[:80]!r} is not JSON: {exc}")
        return
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        errors.append(f"tool call {body[:80]!r} has no \"name\"")
        return
    arguments = data.get(arguments_key, data.get("arguments", {}))
    if not isinstance(arguments, dict):
        errors.append(f"tool call {data['name']!r}: {arguments_key} must be an object")
        return
    calls.append(ToolCall(data["name"], arguments))


def tool_result_message(call: ToolCall, result: Any) -> Message:
    """The message that gives ``result`` of ``call`` back to the model (role ``tool``; text
    as is, anything else as JSON); append it with ``conv.add_message(**message)``."""
    content = result if isinstance(result, str) else json.dumps(result)
    return {"role": "tool", "content": content, "name": call.name}
