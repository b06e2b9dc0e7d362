#!/usr/bin/env bash
# The GPU check: on a machine with NVIDIA GPUs, what the CPU-only test machines cannot run.
#
#   1. installs SGLang (its own venv, cached like the real-SGLang tier's);
#   2. runs the transport contract suite (tests/plugins/test_transport_contract.py: generate,
#      batches, disk and in-memory weight updates) against SGLang on a GPU;
#   3. trains a tiny model for 20 steps with SGLang as the engine and
#      `--weight-sync distributed`, i.e. the trainer's rank 0 broadcasting over NCCL, and
#      checks that every step's weights reached the engine;
#   4. the same in bf16 with a tiny random Qwen2 model (q/k/v biases; the conformance suite's
#      `qwen2` row of tests/models/architectures.py): `--train-dtype bf16` (bf16 parameters,
#      fp32 master weights) and SGLang at `--sglang-dtype bfloat16`, 10 steps of the
#      distributed weight sync, `train/logprob_mismatch` finite and at most 5e-2 every step.
#
# Steps 3 and 4 need two GPUs: NCCL does not put two ranks of one communicator (the trainer's
# rank 0 and the engine) on the same device, so SGLang runs on the last GPU and Ray gives the
# trainer another. Usage: scripts/gpu-check.sh  (about 10 minutes, most of it the install).
# It has not been run on the CPU-only machines this project is developed on.
set -euo pipefail

SGLANG_VERSION=0.5.23
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
VENV="${ROLLYARD_SGLANG_VENV:-$HOME/.cache/rollyard/sglang-$SGLANG_VERSION-gpu}"
WORK="$(mktemp -d -t rollyard-gpu-check-XXXXXX)"
SERVER_PID=""

cleanup() {
    if [ -n "$SERVER_PID" ]; then kill -- -"$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi: not a GPU machine" >&2; exit 2; }
GPUS=$(nvidia-smi -L | grep -c "^GPU")
LAST=$((GPUS - 1))
echo "== $GPUS GPU(s); SGLang on GPU $LAST; work folder $WORK"

[ -x "$PY" ] || make -C "$ROOT" install
if ! "$VENV/bin/python" -c "import sglang" 2>/dev/null; then
    echo "== installing SGLang $SGLANG_VERSION into $VENV"
    rm -rf "$VENV"
    "${PYTHON:-python3.11}" -m venv "$VENV"
    "$VENV/bin/pip" install -q "sglang==$SGLANG_VERSION"
fi

"$PY" -m rollyard.cli init-model "$WORK/model"

echo "== 1/3: transport contract suite against SGLang"
PORT=$("$PY" -c "from rollyard_plugins.embedded_engine.process import free_port; print(free_port())")
setsid "$VENV/bin/python" -m sglang.launch_server --model-path "$WORK/model" --host 127.0.0.1 \
    --port "$PORT" --dtype float32 --base-gpu-id "$LAST" --mem-fraction-static 0.3 \
    > "$WORK/sglang.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -30 "$WORK/sglang.log"; exit 1; }
    sleep 1
done
ROLLYARD_TEST_ENGINE_URL="http://127.0.0.1:$PORT" ROLLYARD_TEST_MODEL_DIR="$WORK/model" \
    "$PY" -m pytest -q -p no:cacheprovider "$ROOT/tests/plugins/test_transport_contract.py"
kill -- -"$SERVER_PID"; SERVER_PID=""

echo "== 2/3: 20 training steps, --weight-sync distributed over NCCL"
if [ "$GPUS" -lt 2 ]; then
    echo "gpu-check: the NCCL weight sync needs two GPUs (trainer and engine on different" \
         "devices); this machine has $GPUS" >&2
    exit 1
fi
"$PY" -m rollyard.cli train --steps 20 --model "$WORK/model" --engine sglang \
    --sglang-python "$VENV/bin/python" --sglang-dtype float32 \
    --sglang-extra-args "--base-gpu-id $LAST --mem-fraction-static 0.3" \
    --weight-sync distributed --groups-per-step 4 --group-size 4 --max-new-tokens 8 \
    --keep-zero-variance-groups --no-progress --runs-dir "$WORK/runs" --name gpu-check
# check_run RUN STEPS [BOUND]: STEPS steps, the engine on every step's weights, and with BOUND
# train/logprob_mismatch finite and at most BOUND on every step
check_run() {
    "$PY" - "$@" <<'EOF'
import json, math, pathlib, sys
run, steps = pathlib.Path(sys.argv[1]), int(sys.argv[2])
bound = float(sys.argv[3]) if len(sys.argv) > 3 else None
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
assert [r["step"] for r in rows] == list(range(1, steps + 1)), f"not {steps} steps"
assert rows[-1]["weight_version"] == steps, rows[-1]
samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
stale = [s for s in samples if s["weight_version"] != s["step"] - 1]
assert not stale, f"{len(stale)} samples were generated with old weights"
line = (f"gpu-check: {steps} steps, engine on every step's weights; median weight sync "
        f"{sorted(r['time/weight_sync_s'] for r in rows)[steps // 2] * 1000:.1f} ms")
if bound is not None:
    mismatch = [r["train/logprob_mismatch"] for r in rows]
    assert all(math.isfinite(m) and m <= bound for m in mismatch), (bound, mismatch)
    line += f"; train/logprob_mismatch at most {max(mismatch):.2e} (bound {bound:g})"
print(line)
EOF
}
check_run "$WORK/runs/gpu-check" 20

echo "== 3/3: bf16: a tiny random Qwen2 model, --train-dtype bf16, SGLang --dtype bfloat16"
"$PY" - "$ROOT/tests/models" "$WORK/qwen2" <<'EOF'
import pathlib, sys
sys.path.insert(0, sys.argv[1])
from architectures import build
build(pathlib.Path(sys.argv[2]), "qwen2")
EOF
# one update per step and no replayed samples, so that the mismatch is the precision's alone
# (bf16 trainer against SGLang's bf16 kernels; on the CPU, bf16 against the embedded engine
# in bf16 measures 1.7e-3, tests/models/test_precision.py)
"$PY" -m rollyard.cli train --steps 10 --model "$WORK/qwen2" --engine sglang \
    --sglang-python "$VENV/bin/python" --sglang-dtype bfloat16 \
    --sglang-extra-args "--base-gpu-id $LAST --mem-fraction-static 0.3" \
    --train-dtype bf16 --weight-sync distributed --groups-per-step 4 --group-size 4 \
    --max-new-tokens 8 --minibatches 1 --no-replay-best --keep-zero-variance-groups \
    --no-progress --runs-dir "$WORK/runs" --name gpu-check-bf16
check_run "$WORK/runs/gpu-check-bf16" 10 5e-2
"$PY" - "$WORK/runs/gpu-check-bf16" <<'EOF'
import json, pathlib, sys
config = json.loads((pathlib.Path(sys.argv[1]) / "config.json").read_text())
assert config["train_dtype"] == "bf16", config.get("train_dtype")
EOF
echo "== gpu-check passed"
