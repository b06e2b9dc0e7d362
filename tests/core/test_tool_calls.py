"""Tool calls read from a model's text in its chat template's convention, and tool results
appended as the template renders them."""

from __future__ import annotations

import asyncio
import copy
import random

import pytest
from rollyard import RolloutContext, Task
from rollyard.episodes import (
    Conversation,
    ToolCall,
    parse_tool_calls,
    tool_call_style,
    tool_result_message,
)
from rollyard.testing import ScriptedTransport

#: The tool parts of Qwen3's and Llama 3.1's templates, reduced to what tells them apart.
QWEN_TOOLS = (
    "{% for m in messages %}{% if m['role'] == 'tool' %}"
    "{{ '<|im_start|>user\n<tool_response>\n' + m['content'] + '\n</tool_response><|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    "{# calls are written as <tool_call>{json}</tool_call> #}")
LLAMA_TOOLS = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    "{# a call: <|python_tag|>{\"name\": ..., \"parameters\": ...} #}")


@pytest.fixture(scope="module")
def tokenizers(tiny_model_dir):
    """The tokenizer ``rollyard init-model`` writes (ChatML), and copies of it with Qwen's
    and Llama 3's tool conventions in their templates."""
    from transformers import AutoTokenizer

    chatml = AutoTokenizer.from_pretrained(tiny_model_dir)
    made = {"chatml": chatml}
    for name, template in (("qwen", QWEN_TOOLS), ("llama3", LLAMA_TOOLS)):
        made[name] = copy.deepcopy(chatml)
        made[name].chat_template = template
    return made


def test_the_style_follows_the_chat_template(tokenizers):
    assert {name: tool_call_style(tok) for name, tok in tokenizers.items()} == {
        "chatml": "qwen", "qwen": "qwen", "llama3": "llama3"}


def test_qwen_calls_are_read_between_tool_call_tags(tokenizers):
    text = ('Let me look.\n<tool_call>\n{"name": "lookup", "arguments": {"word": "fox"}}\n'
            '</tool_call>\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
            "<tool_call>{not json}</tool_call><tool_call>{\"arguments\": {}}</tool_call>")
    found = parse_tool_calls(text, tokenizers["qwen"])
    assert found.calls == [ToolCall("lookup", {"word": "fox"}), ToolCall("add", {"a": 1})]
    assert found.text == "Let me look."
    assert len(found.errors) == 2
    assert "'{not json}' is not JSON" in found.errors[0]
    assert 'has no "name"' in found.errors[1]


def test_llama3_calls_are_the_whole_reply_as_json(tokenizers):
    call = '<|python_tag|>{"name": "lookup", "parameters": {"word": "fox"}}'
    assert parse_tool_calls(call, tokenizers["llama3"]).calls == [
        ToolCall("lookup", {"word": "fox"})]
    plain = parse_tool_calls("The answer is 3.", tokenizers["llama3"])
    assert (plain.calls, plain.text, plain.errors) == ([], "The answer is 3.", [])
    bad = parse_tool_calls('{"name": "lookup", "parameters": [1]}', "llama3")
    assert bad.calls == [] and "parameters must be an object" in bad.errors[0]
    with pytest.raises(ValueError, match="unknown tool call style 'xml'"):
        parse_tool_calls("", "xml")


def test_a_tool_result_is_appended_as_the_template_renders_it(tokenizers):
    tok = tokenizers["qwen"]
    task = Task(id="t", prompt=[{"role": "user", "content": "Look up fox."}])
    call = '<tool_call>{"name": "lookup", "arguments": {"word": "fox"}}</tool_call>'
    transport = ScriptedTransport([call, "done"], tokenizer=tok, per_session=True)
    conv = Conversation(RolloutContext({"seed": 0}, tok, transport, None, {},
                                       random.Random(0)), task, 0)

    async def play():
        turn = await conv.generate()
        [found] = parse_tool_calls(turn.text, tok).calls
        assert conv.add_message(**tool_result_message(found, {"animal": True}))
        await conv.generate()

    asyncio.run(play())
    expected = tok.apply_chat_template(
        [*task.prompt, {"role": "assistant", "content": call},
         {"role": "tool", "content": '{"animal": true}'},
         {"role": "assistant", "content": "done"}], tokenize=False)
    rendered = tok.decode(conv.tokens, skip_special_tokens=False)
    assert rendered + "\n" == expected
    assert "<tool_response>\n{\"animal\": true}\n</tool_response>" in rendered
