import contextlib

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def bivariate_gaussian(n: int, rho: float = 0.8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(seed)
    x = generator.standard_normal(n)
    y = rho * x + np.sqrt(1 - rho**2) * generator.standard_normal(n)
    return x[:, None], y[:, None]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def dask_cluster(workers: int = 2):
    """A real `dask scheduler` with `dask worker` processes (each with its nanny) on 127.0.0.1,
    1 thread and 2 GB each; everything is shut down on exit."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    distributed = pytest.importorskip("distributed")
    binary = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if binary is None:
        pytest.skip("the dask command line is not installed")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    processes = [subprocess.Popen(
        [binary, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )]
    for _ in range(workers):
        processes.append(subprocess.Popen(
            [binary, "worker", address, "--nworkers", "1", "--nthreads", "1", "--memory-limit", "2GB",
             "--no-dashboard", "--host", "127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        ))
    client = None
    try:
        deadline = time.monotonic() + 60
        while client is None:
            try:
                client = distributed.Client(address, timeout=5)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        client.wait_for_workers(workers, timeout=60)
        yield client
    finally:
        if client is not None:
            client.close()
        for process in reversed(processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture(scope="session")
def dask_client():
    with dask_cluster(2) as client:
        yield client
