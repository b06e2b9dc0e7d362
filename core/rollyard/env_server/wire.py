"""What the env server and the remote backend exchange: samples as JSON, and rollout states
signed by the server that made them."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import pickle
from typing import Any

from rollyard.errors import ConfigError
from rollyard.types import MARKS, Sample, SampleStatus

#: The largest request body a server accepts (a session's spec, a state to load).
MAX_BODY = 64 * 1024 * 1024


def sample_to_data(sample: Sample) -> dict[str, Any]:
    data = dataclasses.asdict(sample)
    data["status"] = sample.status.value
    # the marks travel as fields: their copies under the metadata keys are made again on arrival
    data["metadata"] = {k: v for k, v in data["metadata"].items()
                        if k not in MARKS or v != data[k]}
    return data


def sample_from_data(data: dict[str, Any]) -> Sample:
    return Sample(**{**data, "status": SampleStatus(data["status"])})


def seal_state(state: Any, key: str) -> str:
    """A rollout state as text, signed with ``key``: only states a server sealed itself are
    unpickled by it again (:func:`open_state`), so a trainer never sends it code to run."""
    blob = pickle.dumps(state)
    mac = hmac.new(key.encode(), blob, hashlib.sha256).hexdigest()
    return f"{mac}:{base64.b64encode(blob).decode()}"


def open_state(text: str, key: str) -> Any:
    mac, _, encoded = str(text).partition(":")
    blob = base64.b64decode(encoded.encode())
    if not hmac.compare_digest(mac, hmac.new(key.encode(), blob, hashlib.sha256).hexdigest()):
        raise ConfigError("the checkpoint's rollout state was not sealed by an env server with "
                          "this token")
    return pickle.loads(blob)
