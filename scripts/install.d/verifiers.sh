#!/usr/bin/env bash
# rollyard-verifiers: a local PEP 503 index of the wheels verifiers' harness programs need, so
# `uv sync --script` works without a network. Idempotent; a no-op when already current.
set -euo pipefail
VENV=${VENV:-.venv}
"$VENV/bin/python" -m rollyard_verifiers.offline_index
