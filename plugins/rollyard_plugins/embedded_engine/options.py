"""The embedded engine's options, declared once: ``--embedded-*`` flags of ``rollyard train``
and the ``[embedded]`` run.toml table, and (the server's share) the flags of ``rollyard engine
serve``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rollyard.options import non_negative, option, positive


@dataclass(frozen=True)
class EmbeddedOptions:
    """How the run starts each embedded engine."""

    max_batch_size: int = option(64, check=positive,
                                 help="most sequences one engine decodes together")
    weight_update_policy: Literal["wait", "abort"] = option(
        "wait", help="on a weight update, let running requests finish on the old weights "
                     "(wait) or end them with finish reason abort")
    # One torch thread: tiny models gain nothing from more, and on a small machine a second
    # thread spin-waits for a core the HTTP side needs (measured: 10-20x slower at 1-16
    # requests on 2 cores).
    threads: int = option(1, check=non_negative,
                          help="torch CPU threads per engine; 0 = torch's choice")
    dtype: Literal["fp32", "bf16"] = option(
        "fp32", help="precision the engine holds the weights and computes in (logprobs are "
                     "taken in fp32); weight updates of another dtype are cast on arrival")
    weight_sync_timeout: float = option(
        120.0, check=positive,
        help="seconds a weight-update process group may take to form, and one in-memory "
             "weight broadcast to arrive, before the engine gives up on it")
    api_key_file: str | None = option(
        None, metavar="FILE",
        help="file holding a key every request but GET /health must carry as "
             "'Authorization: Bearer KEY' (SGLang's --api-key); clients send it with "
             "--sglang-transport-api-key-file")
    startup_timeout: float = option(120.0, check=positive,
                                    help="seconds to wait for the engine's /health")
    log_dir: str | None = option(None, metavar="DIR",
                                 help="where engine logs go (default: a temporary folder)")
    python: str | None = option(None, metavar="PATH",
                                help="interpreter that runs the engine (default: this one)")


#: The options the server process itself takes (``rollyard engine serve --threads 1 …``).
SERVER_OPTIONS = ("max_batch_size", "weight_update_policy", "threads", "dtype",
                  "weight_sync_timeout", "api_key_file")
