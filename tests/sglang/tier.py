"""Driver of the real-SGLang tier: start SGLang on a tiny model, run the suites, stop it.

Run by tests/sglang/run.sh with ROLLYARD_SGLANG_PYTHON (SGLang's interpreter) and
ROLLYARD_SGLANG_PYTHONPATH (the vllm stand-in) set. The SGLang server is started through the
``sglang`` engine plugin itself, so the launcher is exercised too. Extra arguments go to
pytest; ``--record-fixtures`` rewrites tests/sglang/fixtures/ from this server instead.
"""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: launch_server flags for SGLang 0.5.23 on CPU (float32 comes from the dtype option).
#: SGLang honours sampling_seed only with --enable-deterministic-inference, which needs a GPU
#: attention backend, so seeded sampling is not part of this tier's contract.
CPU_FLAGS = "--max-total-tokens 65536 --skip-server-warmup"


def sglang_options(log_dir: str) -> dict[str, object]:
    return {"python": os.environ["ROLLYARD_SGLANG_PYTHON"],
            "pythonpath": os.environ.get("ROLLYARD_SGLANG_PYTHONPATH"), "device": "cpu",
            "dtype": "float32", "extra_args": CPU_FLAGS, "startup_timeout": 600,
            "log_dir": log_dir}


def main(argv: list[str]) -> int:
    import pytest
    from rollyard.models.tiny import build_tiny_model
    from rollyard_plugins.sglang_engine import SGLangEngine

    work = pathlib.Path(tempfile.mkdtemp(prefix="rollyard-sglang-tier-"))
    model_dir = build_tiny_model(work / "model", arch="qwen3", seed=0)
    started = time.monotonic()
    handle = SGLangEngine(sglang_options(str(work))).launch(str(model_dir), 0)
    print(f"== SGLang healthy at {handle.url} after {time.monotonic() - started:.0f} s "
          f"(log {handle.log_path})", flush=True)
    os.environ["ROLLYARD_TEST_ENGINE_URL"] = handle.url
    os.environ["ROLLYARD_TEST_MODEL_DIR"] = str(model_dir)
    os.environ["ROLLYARD_SGLANG_LOG_DIR"] = str(work)
    try:
        if "--record-fixtures" in argv:
            from record_fixtures import record

            record(handle.url, model_dir, HERE / "fixtures")
            return 0
        return int(pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                                str(ROOT / "tests/plugins/test_transport_contract.py"),
                                str(HERE), *argv]))
    finally:
        handle.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main(sys.argv[1:]))
