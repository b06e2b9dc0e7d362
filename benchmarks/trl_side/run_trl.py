"""One TRL ``GRPOTrainer`` run on one of rollyard's tasks, stopped by a training-time budget.

Runs in the benchmark's own virtual environment (trl, transformers, torch 2.13.0 CPU), never in
rollyard's. Started by ``benchmarks/vs_trl.py``; usable alone::

    python run_trl.py --model DIR --operation copy --budget 60 --lr 1e-3 --out run.jsonl
    python run_trl.py --model DIR --task arithmetic --arithmetic-max-number 10 --groups 4 \
        --max-new-tokens 16 --temperature 0.8 --lr 3e-5 --eval-tasks 100 --budget 60 --out r.jsonl

Writes one JSON object per optimizer step to ``--out`` (``t``: seconds since training began,
``reward``: mean summed reward, the per-function means, entropy, share of zero-std groups,
``gen_s``/``gen_tokens``: seconds in generation and completion tokens generated in the step,
end-of-turn tokens included) and ``<out>.prompts.json``: the prompt token ids TRL itself
tokenized for the first steps, which the driver compares with rollyard's. With
``--eval-tasks K`` (arithmetic) it also scores the first K held-out problems by greedy
``generate`` before and after training, the exact-answer check of rollyard's eval/pass@1, into
``<out>.eval.json``.

Settings (see the module docstring of vs_trl.py for why): use_cpu, fp32, no vLLM, no gradient
checkpointing, one optimizer step per generation batch of ``groups × group_size`` completions,
the prompt stream in rollyard's order (``shuffle_dataset=False``), the chat template applied by
TRL itself to the same chat messages, constant learning rate; everything else is TRL's default.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arithmetic_task
import toy_task

RECORDED_PROMPT_STEPS = 5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--task", choices=("toy", "arithmetic"), default="toy")
    parser.add_argument("--operation", choices=sorted(toy_task.OPERATIONS), default="copy",
                        help="toy: the operation")
    parser.add_argument("--arithmetic-max-number", type=int, default=20)
    parser.add_argument("--arithmetic-eval-tasks", type=int,
                        default=arithmetic_task.DEFAULT_EVAL_TASKS,
                        help="arithmetic: size of the eval split (the plugin's option)")
    parser.add_argument("--eval-tasks", type=int, default=0,
                        help="arithmetic: held-out problems scored greedily before and after")
    parser.add_argument("--budget", type=float, required=True, help="training seconds")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--groups", type=int, default=16, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="generations per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=6)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--num-tasks", type=int,
                        help="training tasks (default: the task's own default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-step-s", type=float, default=0.01,
                        help="fastest step assumed when sizing the prompt list")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (0: torch's default, one per core)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    max_steps = int(args.budget / args.min_step_s) + 10
    if args.task == "toy":
        task = toy_task
        stream = toy_task.task_stream(args.operation, args.seed, args.groups, max_steps,
                                      args.num_tasks or toy_task.DEFAULT_NUM_TASKS)
    else:
        task = arithmetic_task
        splits = arithmetic_task.make_splits(
            args.num_tasks or arithmetic_task.DEFAULT_NUM_TASKS,
            args.arithmetic_eval_tasks,
            args.arithmetic_max_number, args.seed)
        stream = arithmetic_task.task_stream(splits, args.seed, args.groups, max_steps)
    rows = [t for step in stream for t in step]
    dataset = Dataset.from_dict({"prompt": [t["prompt"] for t in rows],
                                 "answer": [t["answer"] for t in rows]})

    def text(completion) -> str:  # conversational completions are [{"role", "content"}]
        return completion[0]["content"] if isinstance(completion, list) else completion

    def reward_func(name: str):
        score = task.REWARD_FUNCTIONS[name]

        def reward(prompts, completions, answer, **kwargs):
            return [score(text(c), a) for c, a in zip(completions, answer)]

        reward.__name__ = name.replace("-", "_")
        return reward

    reward_funcs = {name: reward_func(name) for name in task.REWARD_WEIGHTS}
    batch = args.groups * args.group_size
    config = GRPOConfig(
        output_dir=str(out.parent / f"{out.stem}-trainer"),
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, use_vllm=False,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=args.group_size, steps_per_generation=1, num_iterations=1,
        max_completion_length=args.max_new_tokens, temperature=args.temperature, top_p=1.0, top_k=0,
        shuffle_dataset=False, max_steps=max_steps, seed=args.seed, data_seed=args.seed,
        reward_weights=[task.REWARD_WEIGHTS[name] for name in reward_funcs],
        report_to="none", save_strategy="no", disable_tqdm=True, logging_steps=1,
        dataloader_num_workers=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)

    class Budget(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = None
            self.fh = out.open("w")

        def on_train_begin(self, targs, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            if time.perf_counter() - self.t0 >= args.budget:
                control.should_training_stop = True

        def on_log(self, targs, state, control, logs=None, **kw):
            if not logs or "reward" not in logs:
                return
            parts = {name: logs.get(f"rewards/{fn.__name__}/mean")
                     for name, fn in reward_funcs.items()}
            row = {"step": state.global_step, "t": time.perf_counter() - self.t0,
                   "reward": sum(task.REWARD_WEIGHTS[n] * v for n, v in parts.items()),
                   "trl_reward": logs["reward"],
                   **{f"reward/{n}": v for n, v in parts.items()},
                   "entropy": logs.get("entropy"),
                   "frac_reward_zero_std": logs.get("frac_reward_zero_std"),
                   "step_time": logs.get("step_time"),
                   "gen_s": generation["s"], "gen_tokens": generation["tokens"]}
            generation.update(s=0.0, tokens=0)
            self.fh.write(json.dumps(row) + "\n")
            self.fh.flush()

    trainer = GRPOTrainer(model=model, reward_funcs=list(reward_funcs.values()), args=config,
                          train_dataset=dataset, processing_class=tokenizer,
                          callbacks=[Budget()])
    trainer.remove_callback(PrinterCallback)  # no log dict printed per step (rollyard prints
    # one short line per step; the numbers go to --out)

    # record the prompt ids TRL itself builds for the first steps (each prompt appears
    # group_size times in a generation batch); the driver compares them with rollyard's
    recorded: list[list[list[int]]] = []
    tokenize = trainer._tokenize_prompts

    def recording_tokenize(prompts):
        result = tokenize(prompts)
        if len(recorded) < RECORDED_PROMPT_STEPS:
            ids = [list(map(int, p)) for p in result[0]]
            recorded.append([ids[i] for i in range(0, len(ids), args.group_size)])
        return result

    trainer._tokenize_prompts = recording_tokenize

    # generation time and completion tokens of each step (the batch's sampling, nothing else)
    generation = {"s": 0.0, "tokens": 0}
    generate = trainer._generate_single_turn

    def timed_generate(*a, **kw):
        started = time.perf_counter()
        completion_ids, logprobs = generate(*a, **kw)
        generation["s"] += time.perf_counter() - started
        generation["tokens"] += sum(len(ids) for ids in completion_ids)
        return completion_ids, logprobs

    trainer._generate_single_turn = timed_generate
    scores = {}
    if args.eval_tasks:
        held_out = splits["eval"][:args.eval_tasks]
        scores["before"] = greedy_eval(model, tokenizer, held_out, args.max_new_tokens)
    trainer.train()
    if args.eval_tasks:
        scores["after"] = greedy_eval(trainer.model, tokenizer, held_out, args.max_new_tokens)
        Path(f"{out}.eval.json").write_text(json.dumps(scores))
    Path(f"{out}.prompts.json").write_text(json.dumps(recorded))
    return 0


def greedy_eval(model, tokenizer, tasks: list[dict], max_new_tokens: int,
                batch: int = 25) -> dict:
    """pass@1 of greedy ``generate`` on ``tasks`` (the exact answer, as rollyard's eval counts
    it), with the replies and the seconds it took."""
    import torch

    started, replies = time.perf_counter(), []
    was_training, side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"
    try:
        for i in range(0, len(tasks), batch):
            texts = [tokenizer.apply_chat_template(t["prompt"], add_generation_prompt=True,
                                                   tokenize=False) for t in tasks[i:i + batch]]
            inputs = tokenizer(texts, return_tensors="pt", padding=True,
                               add_special_tokens=False)
            with torch.no_grad():
                ids = model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens,
                                     eos_token_id=tokenizer.eos_token_id,
                                     pad_token_id=tokenizer.pad_token_id)
            replies += tokenizer.batch_decode(ids[:, inputs["input_ids"].shape[1]:],
                                              skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    solved = [arithmetic_task.answer_reward(r, t["answer"]) for r, t in zip(replies, tasks)]
    return {"pass@1": sum(solved) / len(solved), "tasks": len(tasks),
            "seconds": time.perf_counter() - started,
            "replies": [{"id": t["id"], "reply": r} for r, t in zip(replies, tasks)]}


if __name__ == "__main__":
    sys.exit(main())
