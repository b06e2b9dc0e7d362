"""The ``verifiers`` rollout's options (``--verifiers-*``), declared once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rollyard.options import option, positive


def json_object(text: str | None) -> dict[str, Any]:
    """The JSON object in ``text`` ({} for none); ValueError says what is wrong."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


def _json_object_check(text: str) -> None:
    json_object(text)


@dataclass(frozen=True)
class VerifiersOptions:
    """Which verifiers environment runs, and how."""

    env: str | None = option(None, metavar="ID", aliases=("--vf-env",),
                             help="verifiers environment: a 0.4 taskset package (e.g. "
                                  "rollyard_codegolf.verifiers_env) or a pre-0.4 environment "
                                  "with load_environment (e.g. vf-legacy-arith)")
    version: str | None = option(None, metavar="X",
                                 help="run the environment on verifiers X, in a venv of its own "
                                      "(default: a pre-0.4 environment gets the newest release "
                                      "of its API that meets its own requirement; a 0.4 "
                                      "taskset runs here)")
    env_config: str | None = option(None, metavar="JSON", check=_json_object_check,
                                    help="JSON merged into the verifiers env config (taskset "
                                         "arguments, harness, runtime, max_turns …)")
    eval_config: str | None = option(None, metavar="JSON", check=_json_object_check,
                                     help="JSON merged into the env config for the eval split")
    max_turns: int | None = option(None, metavar="N", check=positive,
                                   help="turn limit per episode (default: the environment's)")
    max_tasks: int | None = option(None, metavar="N", check=positive,
                                   help="use only the first N tasks (required for infinite "
                                        "tasksets)")
    concurrency: int = option(32, metavar="N", check=positive,
                              help="episodes in flight at once, over all groups")
