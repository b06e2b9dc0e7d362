"""Find the program in a model's reply."""

from __future__ import annotations

import re
from typing import Literal, get_args

ExtractMode = Literal["last_block", "whole"]
EXTRACT_MODES: tuple[str, ...] = get_args(ExtractMode)

# A fenced block: ``` or ~~~ (3+), an optional info string, the body, the same fence again.
# An unclosed final block (a reply cut at max_new_tokens) counts up to the end of the reply.
_FENCE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)"
    r"(?:^[ \t]*(?P=fence)[ \t]*$|\Z)",
    re.MULTILINE | re.DOTALL)
_PYTHON_TAGS = {"", "python", "python3", "py", "py3"}


def extract_program(reply: str, mode: ExtractMode = "last_block") -> str | None:
    """The program in ``reply``, or None when there is none.

    ``last_block``: the body of the last fenced code block tagged python (or untagged);
    ``whole``: the entire reply, with a surrounding fence removed if it is one block.
    Blank programs count as missing.
    """
    if mode not in EXTRACT_MODES:
        raise ValueError(f"extract mode {mode!r}: choose one of {list(EXTRACT_MODES)}")
    blocks = [m for m in _FENCE.finditer(reply)
              if m.group("info").strip().split(" ")[0].lower() in _PYTHON_TAGS]
    if mode == "whole":
        program = reply
        if len(blocks) == 1 and blocks[0].group(0).strip() == reply.strip():
            program = blocks[0].group("body")
    elif blocks:
        program = blocks[-1].group("body")
    else:
        return None
    program = program.strip("\n").rstrip()
    return program if program.strip() else None
