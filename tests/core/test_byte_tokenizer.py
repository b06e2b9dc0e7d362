"""The light core's byte-level tokenizer renders chats as the tiny models' tokenizer does."""

from __future__ import annotations

from rollyard.models.byte_tokenizer import ByteChatTokenizer
from rollyard.models.tokenizer import IM_END
from rollyard.testing import tiny_tokenizer

CHAT = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "reverse: ab ✓"}]


def test_the_chat_template_is_the_tiny_models_one() -> None:
    light, full = ByteChatTokenizer(), tiny_tokenizer()
    for opened in (True, False):
        assert light.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=opened) \
            == full.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=opened)


def test_text_and_specials_round_trip() -> None:
    tokenizer = ByteChatTokenizer()
    ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True)
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(
        CHAT, tokenize=False, add_generation_prompt=True)
    assert ids.count(tokenizer.eos_token_id) == 2 and all(0 <= i < len(tokenizer) for i in ids)
    answer = tokenizer.encode("ba ✓" + IM_END, add_special_tokens=False)
    assert answer[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(answer, skip_special_tokens=True) == "ba ✓"
