#!/usr/bin/env bash
# Build the project's virtual environment: pinned CPU torch, the core and both plugin
# packages in editable mode, and the system tools the tests need (bubblewrap).
set -euo pipefail
PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv}

if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq bubblewrap
    else
        sudo apt-get update -qq && sudo apt-get install -y -qq bubblewrap
    fi
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
# torch 2.13.0 is the local CPU build for Python 3.11; any other request pulls a CUDA build.
$PIP install -q "torch==2.13.0"
$PIP install -q -e ".[train,test]" -e "plugins-codegolf[verifiers]" -e "plugins-verifiers"
for hook in scripts/install.d/*.sh; do
    [ -e "$hook" ] && VENV="$VENV" bash "$hook"
done
echo "rollyard installed into $VENV"
