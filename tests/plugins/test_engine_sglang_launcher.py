"""The ``sglang`` engine launcher without SGLang: configuration errors and failed starts.

(Starting real SGLang is the opt-in tier, tests/sglang/run.sh.)"""

from __future__ import annotations

import sys

import pytest
from rollyard import ConfigError, EngineStartError
from rollyard_plugins.sglang_engine import SGLangEngine, SGLangRouter


def test_python_is_required_and_must_exist(tmp_path) -> None:
    with pytest.raises(ConfigError, match="--sglang-python"):
        SGLangEngine({}).launch(str(tmp_path), 0)
    with pytest.raises(ConfigError, match="not an executable"):
        SGLangEngine({"python": str(tmp_path / "nope")}).launch(str(tmp_path), 0)


def test_command_line_carries_device_dtype_and_extra_args(tmp_path) -> None:
    engine = SGLangEngine({"python": sys.executable, "device": "cpu", "dtype": "float32",
                           "extra_args": "--max-total-tokens 65536 --mem-fraction-static 0.5"})
    command = engine.command(str(tmp_path), 31000)
    assert command[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert command[command.index("--model-path") + 1] == str(tmp_path)
    assert command[command.index("--port") + 1] == "31000"
    assert command[command.index("--device") + 1] == "cpu"
    assert command[command.index("--dtype") + 1] == "float32"
    assert command[-4:] == ["--max-total-tokens", "65536", "--mem-fraction-static", "0.5"]


def test_a_python_without_sglang_fails_with_its_log(tmp_path) -> None:
    engine = SGLangEngine({"python": sys.executable, "log_dir": str(tmp_path),
                           "startup_timeout": 60})
    with pytest.raises(EngineStartError, match=r"exited with status 1(.|\n)*No module named"):
        engine.launch(str(tmp_path), 0)


def test_router_fails_clearly_without_sglang_router(tmp_path) -> None:
    router = SGLangRouter({"python": sys.executable, "log_dir": str(tmp_path)})
    assert router.command(["http://127.0.0.1:1", "http://127.0.0.1:2"], 9)[-2:] == [
        "http://127.0.0.1:1", "http://127.0.0.1:2"]
    with pytest.raises(EngineStartError, match="sglang_router"):
        router.launch(["http://127.0.0.1:1"])
    with pytest.raises(ConfigError, match="at least one"):
        router.command([], 9)
