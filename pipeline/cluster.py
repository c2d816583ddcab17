"""Where the work runs: in this process, on an embedded LocalCluster, or on a Dask cluster.

``scheduler`` values: None or "auto" (the embedded cluster for data above ``AUTO_ROWS`` rows, this
process below: a cluster costs seconds to start and pays off only for large data), "memory" (this
process), "local" (an embedded LocalCluster: two single-threaded workers on this machine) or a
scheduler address "tcp://HOST:PORT". The environment variable ``JDL_SCHEDULER`` sets the CLI default.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

__all__ = ["AUTO_ROWS", "WORKER_ENVIRONMENT", "resolve_scheduler", "dask_client", "local_cluster", "shared_scheduler",
           "broadcast"]

AUTO_ROWS = 200_000

# Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536, which also freezes glibc's mmap threshold at
# 128 KiB: every slab-sized temporary is then mmap'ed and unmapped, and the workers spend their
# time in page faults (measured: 100 % system CPU in the reductions at n = 1e7). Keep freed memory
# up to 32 MiB blocks in the heap instead. Set the same for workers of a cluster you start yourself.
WORKER_ENVIRONMENT = {
    "MALLOC_TRIM_THRESHOLD_": 1 << 28, "MALLOC_MMAP_THRESHOLD_": 1 << 25,
    "OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1, "OPENBLAS_NUM_THREADS": 1, "JDL_KERNEL_THREADS": 1,
}


def resolve_scheduler(scheduler: str | None, n_rows: int) -> str | None:
    """None for in-process work, else "local" or an address; raises ``ValueError`` on a bad value."""
    if scheduler in (None, "", "auto"):
        return "local" if n_rows > AUTO_ROWS else None
    if scheduler == "memory":
        return None
    if scheduler == "local" or "://" in scheduler:
        return scheduler
    raise ValueError(f"scheduler: {scheduler!r} is not auto, memory, local or an address like tcp://HOST:PORT")


# dask.config.set restores, on exit, the values it found on entry: two threads whose settings overlap
# would restore each other's. The nanny reads its environment once, as it is made.
_CONFIG_LOCK = threading.Lock()


@contextlib.contextmanager
def local_cluster() -> Iterator[str]:
    """An embedded LocalCluster (two single-threaded workers, 6 GB each, ``WORKER_ENVIRONMENT``);
    yields its scheduler address and shuts it down on exit. Dask's configuration is set only while
    the nannies are made, and left as it was found. Its processes log only what is critical: a task's
    failure reaches the command as the task's error, which it prints in one line."""
    import logging

    import dask
    from distributed import LocalCluster

    with _CONFIG_LOCK, dask.config.set({"distributed.nanny.pre-spawn-environ": WORKER_ENVIRONMENT}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="6GB", dashboard_address=":0",
                               silence_logs=logging.CRITICAL)
    with cluster:
        yield cluster.scheduler_address


@contextlib.contextmanager
def dask_client(scheduler: str) -> Iterator:
    """A ``distributed.Client`` for an address, or for an embedded LocalCluster with "local".

    The client is never made the process's default (``set_as_default=False``): every task is sent
    through it explicitly, and a default client sets ``scheduler="dask.distributed"`` in dask's
    configuration, which is restored only when the last of the clients open at once closes, to the
    value the last-opened one found. Clients of one run overlap (the tuning's grids run side by side),
    so that value can be the setting itself, and every later ``.compute()`` of the process (xarray
    loading a store) would ask for a client that is gone."""
    from distributed import Client

    with contextlib.ExitStack() as stack:
        address = stack.enter_context(local_cluster()) if scheduler == "local" else scheduler
        yield stack.enter_context(Client(address, timeout=30, set_as_default=False))


@contextlib.contextmanager
def shared_scheduler(scheduler: str | None) -> Iterator[str | None]:
    """For a run of several steps: "local" starts one embedded cluster for all of them and yields its
    address; any other value is yielded unchanged (each step resolves it for its own data size)."""
    if scheduler == "local":
        with local_cluster() as address:
            yield address
    else:
        yield scheduler


def broadcast(client: Any, value: Any) -> Any:
    """``value`` sent to every worker of ``client`` (a list: each item, a future per item), under a key
    of its own: a scatter keyed by its values' hash reused the key of an equal scatter still being
    released, and the tasks reading it were cancelled for lost dependencies (dask/distributed #4612)."""
    return client.scatter(value, broadcast=True, hash=False)
