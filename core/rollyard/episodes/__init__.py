"""Building blocks for rollout plugins: render a prompt, run single-turn episodes, hold a
multi-turn conversation, read tool calls, or write a step-style environment.

- :func:`sample_single_turn` runs a group of one-reply episodes;
- :class:`Conversation` and :func:`sample_multi_turn` run episodes where the model and the
  environment take turns, keeping ids, loss mask and logprobs right;
- :class:`TextEnv` is a rollout written as ``reset(task)`` / ``step(reply)``;
- :func:`parse_tool_calls` and :func:`tool_result_message` speak a chat template's tool
  convention.
"""

from rollyard.episodes.conversation import Conversation, Play, Turn, sample_multi_turn
from rollyard.episodes.prompts import render_prompt
from rollyard.episodes.single_turn import (
    episode_sampling,
    new_group_id,
    sample_single_turn,
    session_id,
)
from rollyard.episodes.text_env import StepResult, TextEnv
from rollyard.episodes.tools import (
    ToolCall,
    ToolCalls,
    parse_tool_calls,
    tool_call_style,
    tool_result_message,
)

__all__ = ["Conversation", "Play", "StepResult", "TextEnv", "ToolCall", "ToolCalls", "Turn",
           "episode_sampling", "new_group_id", "parse_tool_calls", "render_prompt",
           "sample_multi_turn", "sample_single_turn", "session_id", "tool_call_style",
           "tool_result_message"]
