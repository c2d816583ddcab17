"""Where the work runs: in this process, on an embedded LocalCluster, or on a Dask cluster.

``scheduler`` values: None or "auto" (the embedded cluster for data above ``AUTO_ROWS`` rows, this
process below: a cluster costs seconds to start and pays off only for large data), "memory" (this
process), "local" (an embedded LocalCluster: two single-threaded workers on this machine) or a
scheduler address "tcp://HOST:PORT". The environment variable ``JDL_SCHEDULER`` sets the CLI default.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["AUTO_ROWS", "WORKER_ENVIRONMENT", "resolve_scheduler", "dask_client"]

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


@contextlib.contextmanager
def dask_client(scheduler: str) -> Iterator:
    """A ``distributed.Client`` for an address, or for an embedded LocalCluster with "local"."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler == "local":
        environment = dask.config.set({"distributed.nanny.pre-spawn-environ": WORKER_ENVIRONMENT})
        with environment, LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="6GB",
                                       dashboard_address=None) as cluster, Client(cluster) as client:
            yield client
    else:
        with Client(scheduler, timeout=30) as client:
            yield client
