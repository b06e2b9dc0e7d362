"""Starting or joining the Ray cluster a run works on.

Ray 2.5x turns token authentication on for a cluster that ``ray.init()`` starts and logs a
warning about it on every start unless ``RAY_AUTH_MODE`` chooses the mode. A run that starts
its own local cluster chooses ``token``, Ray's own default, so that only the warning goes. A
mode the user set is kept. Joining a cluster (``--ray-address``) leaves the mode to the user,
who sets ``RAY_AUTH_MODE`` to match that cluster's to silence Ray there.
"""

from __future__ import annotations

import os
import sys

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
        ray.init(num_cpus=num_cpus, object_store_memory=OBJECT_STORE_BYTES,
                 include_dashboard=False, log_to_driver=False)
    return True


def _choose_auth_mode() -> None:
    """Make Ray's default authentication mode explicit, before Ray is imported.

    Ray reads its configuration once, at import: a mode set after that would reach the
    cluster's processes but not this one, which then could not talk to them. So when Ray is
    already imported (a plugin or a test did it), nothing is set and Ray warns as before.
    """
    if AUTH_MODE_ENV not in os.environ and "ray" not in sys.modules:
        os.environ[AUTH_MODE_ENV] = "token"
