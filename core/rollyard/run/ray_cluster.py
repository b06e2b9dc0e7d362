"""Starting or joining the Ray cluster a run works on.

A run without ``--ray-address`` starts its own local cluster, as ``ray start --head --block``
in a session of its own, and joins it. Its processes (GCS, raylet, the actors' workers) are
then outside the run's process group: a signal meant for the run — Ctrl-C in a terminal,
``timeout``, Slurm's ``scancel``, ``kill -TERM -PGID`` — reaches only the driver, which stops
the run in order and saves through the trainer's ranks first (:mod:`rollyard.run.signals`).
:func:`stop_ray` ends the cluster. Its files (sockets, logs) go to a temporary folder of its
own, so that Ray's pointer to "the current cluster" (``ray_current_cluster``) is written there
and not in ``/tmp/ray``, where a later plain ``ray.init()`` on the machine would read it.

Ray 2.5x turns token authentication on for a cluster started without a mode and logs a warning
about it on every start unless ``RAY_AUTH_MODE`` chooses the mode. A run that starts its own
local cluster chooses ``token``, Ray's own default, so that only the warning goes; the token
is made (as ``ray.init()`` would) before the cluster starts. A mode the user set is kept.
Joining a cluster leaves the mode to the user, who sets ``RAY_AUTH_MODE`` to match that
cluster's to silence Ray there.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rollyard.errors import RollyardError

#: The environment variable Ray reads its authentication mode from (``token`` | ``disabled``).
AUTH_MODE_ENV = "RAY_AUTH_MODE"
#: Object store of a local cluster: the run ships token lists and samples, never tensors.
OBJECT_STORE_BYTES = 256 * 1024**2
#: Seconds a local cluster may take to come up.
START_TIMEOUT_S = 300.0
#: Where the cluster's folder goes: Ray's unix socket paths inside it must stay short.
TEMP_ROOT = "/tmp"
_PR_SET_PDEATHSIG = 1
#: Times a head that exits before it is up is started again.
START_ATTEMPTS = 3
#: Where the head's fixed listener ports are drawn from: above Ray's worker ports.
LOWEST_PORT = 20000
_PORTS = random.SystemRandom()  # not the run's seeded generator


class RayStartError(RollyardError):
    """The run's local Ray cluster did not come up."""


@dataclass
class LocalCluster:
    """A local Ray head this process started: ``ray start --block`` leading its session."""

    process: subprocess.Popen
    temp_dir: Path
    address: str

    def stop(self) -> None:
        """SIGKILL every process of the cluster's session (its workers included) and remove
        its folder. Nothing of it needs a graceful end: the driver has left it."""
        if self.process.returncode is None:  # not reaped: its pid, the session's id, is ours
            kill_session(self.process.pid)
            self.process.wait()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


#: The local cluster this process started, if any (stopped by :func:`stop_ray`).
_cluster: LocalCluster | None = None


def start_ray(address: str | None, num_cpus: int | None) -> bool:
    """Join the cluster at ``address``, or start a local one with ``num_cpus`` CPUs (all of
    the machine's when None) and join it. Returns whether this call started Ray (joined it),
    so that the caller knows it must call :func:`stop_ray`; False when Ray was already
    initialised in this process."""
    global _cluster
    if not address:
        _choose_auth_mode()
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, include_dashboard=False)
        return True
    cluster = start_local_cluster(num_cpus)
    try:
        # quiet: "connecting to an existing cluster" would puzzle whoever started none
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    except BaseException:
        cluster.stop()
        raise
    _cluster = cluster
    return True


def local_cluster_dir() -> Path | None:
    """The folder of the local cluster :func:`start_ray` started (None: it started none)."""
    return _cluster.temp_dir if _cluster is not None else None


def stop_ray() -> None:
    """Leave the cluster (``ray.shutdown``) and stop the local one :func:`start_ray` started."""
    global _cluster
    import ray

    try:
        ray.shutdown()
    finally:
        cluster, _cluster = _cluster, None
        if cluster is not None:
            cluster.stop()


def start_local_cluster(num_cpus: int | None) -> LocalCluster:
    """Start ``ray start --head --block`` in a session of its own and wait until its address
    is written. It dies with this process's main thread (``PR_SET_PDEATHSIG``, when started
    there); Ray's own fate sharing takes its GCS and raylet with it. A head that exits first
    (a port it was given taken meanwhile) is started again, :data:`START_ATTEMPTS` times."""
    _make_token()
    for _ in range(START_ATTEMPTS - 1):
        with contextlib.suppress(RayStartError):
            return _start_head(num_cpus)
    return _start_head(num_cpus)


def _start_head(num_cpus: int | None) -> LocalCluster:
    temp_dir = Path(tempfile.mkdtemp(prefix="ry-", dir=TEMP_ROOT))
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
               "--port=0", f"--ray-client-server-port={_free_port()}",
               f"--dashboard-agent-listen-port={_free_port()}", "--include-dashboard=false",
               "--disable-usage-stats", f"--temp-dir={temp_dir}",
               f"--object-store-memory={OBJECT_STORE_BYTES}"]
    if num_cpus is not None:
        command.append(f"--num-cpus={num_cpus}")
    log_path = temp_dir / "ray-start.log"
    in_main = threading.current_thread() is threading.main_thread()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=_die_with_parent if in_main else None)
    cluster = LocalCluster(process, temp_dir, "")
    address_file = temp_dir / "ray_current_cluster"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not cluster.address:
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-2000:]
            cluster.stop()
            state = (f"exited with status {process.returncode}" if process.returncode
                     is not None else f"was not up within {START_TIMEOUT_S:.0f} s")
            raise RayStartError(f"the run's local Ray cluster ({' '.join(command[2:5])}) "
                                f"{state}; its last output:\n{tail}")
        if address_file.is_file():
            cluster.address = address_file.read_text().strip()
        if not cluster.address:
            time.sleep(0.1)
    return cluster


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid``, and wait for them."""
    import psutil

    procs = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                procs.append(proc)
        except (OSError, psutil.Error):
            continue
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent (its main thread) dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port() -> int:
    """A port for one of the head's fixed listeners (Ray's client server, its dashboard
    agent): free now, and below the kernel's ephemeral range, which every outgoing connection
    on the machine draws from (a port there may be taken before the head binds it, and
    ``ray start --block`` then stops the whole cluster)."""
    try:
        top = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        top = LOWEST_PORT
    for port in _PORTS.sample(range(LOWEST_PORT, max(top, LOWEST_PORT + 1)),
                              min(64, max(top - LOWEST_PORT, 1))):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # the range is full: let the kernel choose
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _make_token() -> None:
    """Make Ray's token (``~/.ray/auth_token``) if token authentication is on and there is
    none, as ``ray.init()`` does before it starts a cluster; ``ray start`` would refuse."""
    from ray._private.authentication.authentication_token_setup import (
        ensure_token_if_auth_enabled,
    )

    ensure_token_if_auth_enabled(None, create_token_if_missing=True)


def _choose_auth_mode() -> None:
    """Make Ray's default authentication mode explicit, before Ray is imported.

    Ray reads its configuration once, at import: a mode set after that would reach the
    cluster's processes but not this one, which then could not talk to them. So when Ray is
    already imported (a plugin or a test did it), nothing is set and Ray warns as before.
    """
    if AUTH_MODE_ENV not in os.environ and "ray" not in sys.modules:
        os.environ[AUTH_MODE_ENV] = "token"
