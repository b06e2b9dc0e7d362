"""The toy task of ``rollyard train --rollout-plugin toy``, restated without rollyard.

Pure standard library, so the TRL runner (in its own venv, without rollyard) and the benchmark
driver share one copy. Every definition mirrors the rollyard source named beside it; the driver
checks the copy against what a real rollyard run wrote (task ids per step, rewards per sample,
prompt token ids), so a change on the rollyard side shows up as a failed check, not as a
silently unfair comparison.
"""

from __future__ import annotations

import random
from collections import Counter

# plugins/rollyard_plugins/toy.py
ALPHABET = "abcde"
EVAL_SHARE = 0.2
OPERATIONS = {"copy": lambda s: s, "reverse": lambda s: s[::-1]}
DEFAULT_NUM_TASKS = 200


def make_tasks(operation: str, count: int, seed: int, min_len: int = 2,
               max_len: int = 4) -> list[dict]:
    """toy.make_tasks: ``count`` distinct words, as dicts with id, messages, answer, word."""
    rng = random.Random(f"{operation}-{seed}")
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choice(ALPHABET) for _ in range(rng.randint(min_len, max_len)))] = None
    return [{"id": f"{operation}-{i:04d}",
             "prompt": [{"role": "user", "content": f"{operation}: {word}"}],
             "answer": OPERATIONS[operation](word), "word": word}
            for i, word in enumerate(words)]


def train_tasks(operation: str, seed: int, count: int = DEFAULT_NUM_TASKS) -> list[dict]:
    """StringOperationRollout's "train" split: the first (1 - EVAL_SHARE) of the tasks."""
    tasks = make_tasks(operation, count, seed)
    return tasks[:int(len(tasks) * (1 - EVAL_SHARE))]


class TaskCycle:
    """core/rollyard/run/driver.py TaskCycle: endless shuffled passes, seeded with --seed."""

    def __init__(self, tasks: list[dict], seed: int) -> None:
        self.tasks, self.rng, self.queue = tasks, random.Random(seed), []

    def take(self, n: int) -> list[dict]:
        out = []
        while len(out) < n:
            if not self.queue:
                self.queue = list(self.tasks)
                self.rng.shuffle(self.queue)
            out.append(self.queue.pop())
        return out


def task_stream(operation: str, seed: int, groups_per_step: int, steps: int,
                count: int = DEFAULT_NUM_TASKS) -> list[list[dict]]:
    """The tasks of each training step, in the order rollyard draws them."""
    cycle = TaskCycle(train_tasks(operation, seed, count), seed)
    return [cycle.take(groups_per_step) for _ in range(steps)]


# plugins/rollyard_plugins/basic_rewards.py
def exact_match(completion: str, answer: str) -> float:
    """ExactMatch: 1.0 when the stripped completion equals the stripped answer."""
    return float(completion.strip() == answer.strip())


def char_f1(completion: str, answer: str) -> float:
    """CharF1: 0.5 × F1 of the character multisets + 0.5 × share of positions holding the
    answer's character, over the longer of completion and answer."""
    completion, answer = completion.strip(), answer.strip()
    if not completion or not answer:
        return 0.0
    overlap = sum((Counter(completion) & Counter(answer)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(completion), overlap / len(answer)
    f1 = 2 * precision * recall / (precision + recall)
    in_place = sum(a == b for a, b in zip(completion, answer)) / max(len(completion), len(answer))
    return 0.5 * f1 + 0.5 * in_place


# StringOperationRollout.default_rewards; rollyard's sample reward is the weighted sum
REWARD_WEIGHTS = {"char-f1": 1.0, "exact-match": 1.0}
REWARD_FUNCTIONS = {"char-f1": char_f1, "exact-match": exact_match}
REWARD_MAX = sum(REWARD_WEIGHTS.values())


def total_reward(completion: str, answer: str) -> float:
    return sum(w * REWARD_FUNCTIONS[name](completion, answer)
               for name, w in REWARD_WEIGHTS.items())
