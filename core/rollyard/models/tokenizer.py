"""A byte-level BPE tokenizer with ChatML specials, trained in-process on a built-in corpus.

Every one of the 256 bytes is a token of its own (so every printable ASCII character is one
token and any text round-trips); BPE merges fill the rest of the small vocabulary. Training
on the same corpus with the same settings gives the same tokenizer, so models are reproducible.
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

#: ChatML, the template Qwen models use; ``add_generation_prompt`` opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = """\
You are a helpful assistant. Answer the question and explain your reasoning step by step.
Copy the string exactly. Reverse the string. Repeat the word. Sort the letters.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
What is the answer? The answer is 42. Please write a function that returns the result.
def solve(x):
    return x + 1

for i in range(10):
    print(i, i * i)

import sys
print(sum(map(int, sys.stdin.read().split())))
if n % 2 == 0: print("even")
else: print("odd")
class Node:
    def __init__(self, value, next=None):
        self.value = value
        self.next = next
user system assistant input output string number list word letter reverse copy
hello world, this is a test of the tokenizer; numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000.
"""


def training_corpus() -> list[str]:
    """The fixed text the tokenizer is trained on: prose, code, ChatML turns and characters."""
    alphabet = string.ascii_letters + string.digits + string.punctuation
    turns = [f"{IM_START}user\n{line}{IM_END}\n{IM_START}assistant\n{line[::-1]}{IM_END}\n"
             for line in _CORPUS.splitlines() if line.strip()]
    return [_CORPUS, alphabet, " ".join(alphabet), *turns]


def train_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Train the byte-level BPE tokenizer and wrap it with its specials and chat template.

    ``vocab_size`` counts the 256 byte tokens, the 3 specials and the merges; it must be at
    least 259.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    minimum = 256 + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size {vocab_size} is too small: byte-level BPE with ChatML "
                         f"specials needs at least {minimum}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=IM_END, pad_token=ENDOFTEXT, unk_token=None,
        bos_token=None, chat_template=CHAT_TEMPLATE, model_max_length=1 << 20,
        clean_up_tokenization_spaces=False)
