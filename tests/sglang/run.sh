#!/usr/bin/env bash
# The real-SGLang tier (`make test-sglang`): runs the transport contract suite and the
# launcher/router tests against sglang itself, on CPU, with a tiny model from init-model.
#
# SGLang lives in its own virtual environment (it pins torch, transformers and openai),
# created once and cached outside the clone, keyed by version:
#   ${ROLLYARD_SGLANG_VENV:-~/.cache/rollyard/sglang-$SGLANG_VERSION}
# On a CPU-only machine SGLang's rotary embedding imports vllm._custom_ops; the pure-torch
# stand-in in tests/sglang/vllm_stub is put on its PYTHONPATH (a test aid, not shipped).
set -euo pipefail

SGLANG_VERSION=0.5.23
ROUTER_VERSION=0.3.2
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY="$ROOT/.venv/bin/python"
VENV="${ROLLYARD_SGLANG_VENV:-$HOME/.cache/rollyard/sglang-$SGLANG_VERSION}"
BASE_PYTHON="${PYTHON:-python3.11}"

ensure_venv() {
    if "$VENV/bin/python" -c "import sglang, sglang_router" 2>/dev/null; then
        return
    fi
    echo "== creating the SGLang $SGLANG_VERSION environment in $VENV (once; ~5 min, ~10 GB)"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$BASE_PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q "sglang==$SGLANG_VERSION" "sglang-router==$ROUTER_VERSION" 2>&1 \
        | { grep -v "is neither a file nor a directory" || true; }
    "$VENV/bin/python" -c "import sglang, sglang_router" || {
        echo "installing sglang into $VENV failed" >&2; exit 1; }
}

started=$(date +%s)
ensure_venv
echo "== SGLang environment ready ($(( $(date +%s) - started )) s)"
export ROLLYARD_SGLANG_PYTHON="$VENV/bin/python"
export ROLLYARD_SGLANG_PYTHONPATH="$HERE/vllm_stub"
"$PY" "$HERE/tier.py" "$@"
echo "== real-SGLang tier took $(( $(date +%s) - started )) s"
