"""The real-SGLang tier runs only from tests/sglang/run.sh (``make test-sglang``), which
starts SGLang and sets ROLLYARD_TEST_ENGINE_URL; the default suite does not collect it."""

import os

if not (os.environ.get("ROLLYARD_TEST_ENGINE_URL") and os.environ.get("ROLLYARD_SGLANG_PYTHON")):
    collect_ignore_glob = ["*"]
