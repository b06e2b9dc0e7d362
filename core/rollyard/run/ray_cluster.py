"""Starting or joining the Ray cluster a run works on.

Ray 2.5x turns token authentication on for a cluster that ``ray.init()`` starts and logs a
warning about it on every start unless ``RAY_AUTH_MODE`` chooses the mode. A run that starts
its own local cluster chooses ``token``, Ray's own default, so that only the warning goes. A
mode the user set is kept. Joining a cluster (``--ray-address``) leaves the mode to the user,
who sets ``RAY_AUTH_MODE`` to match that cluster's to silence Ray there.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The environment variable Ray reads its authentication mode from (``token`` | ``disabled``).
AUTH_MODE_ENV = "RAY_AUTH_MODE"
#: Object store of a local cluster: the run ships token lists and samples, never tensors.
OBJECT_STORE_BYTES = 256 * 1024**2


def start_ray(address: str | None, num_cpus: int | None) -> bool:
    """Join the cluster at ``address``, or start a local one with ``num_cpus`` CPUs (all of
    the machine's when None). Returns whether this call started Ray, so that the caller knows
    it must shut it down; False when Ray was already initialised in this process."""
    if not address:
        _choose_auth_mode()
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, include_dashboard=False)
    else:
        with _sigint_ignored():
            ray.init(num_cpus=num_cpus, object_store_memory=OBJECT_STORE_BYTES,
                     include_dashboard=False, log_to_driver=False)
    return True


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while the local cluster starts: its processes inherit that, so a Ctrl-C
    in the terminal (which signals the whole process group) reaches only the driver, which
    then stops the run in order, saving through the ranks (see rollyard.run.signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _choose_auth_mode() -> None:
    """Make Ray's default authentication mode explicit, before Ray is imported.

    Ray reads its configuration once, at import: a mode set after that would reach the
    cluster's processes but not this one, which then could not talk to them. So when Ray is
    already imported (a plugin or a test did it), nothing is set and Ray warns as before.
    """
    if AUTH_MODE_ENV not in os.environ and "ray" not in sys.modules:
        os.environ[AUTH_MODE_ENV] = "token"
