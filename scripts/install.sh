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
$PIP install -q --upgrade pip uv
# uv installs the packages (seconds, where pip takes minutes); it reads no pip configuration, so
# the machine's pip settings (find-links, extra indexes, constraints, certificate) are passed on,
# and like pip it takes the best match over every index
eval "$("$VENV/bin/python" scripts/pip_settings_for_uv.py)"
export UV_INDEX_STRATEGY=unsafe-best-match
# torch 2.13.0 is the local CPU build for Python 3.11; any other request pulls a CUDA build.
"$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" "torch==2.13.0" \
    -e ".[train,test]" -e "plugins-codegolf[verifiers]" -e "plugins-verifiers"
for hook in scripts/install.d/*.sh; do
    [ -e "$hook" ] && VENV="$VENV" bash "$hook"
done
echo "rollyard installed into $VENV"
