import contextlib
import os

# Two test processes share the machine's cores (pytest-xdist, pyproject's addopts). Set before NumPy
# loads its BLAS, in each: BLAS at one thread, and OpenMP's idle threads asleep instead of spinning,
# so that neither process's waiting threads take the core the other computes on. jdl's kernel pool
# keeps its threads: with it at one, the tuning takes other paths, and the suite ran slower.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (more seeds of a statistical check, scale runs) run only when asked for:
    ``pytest -m slow``."""
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with pytest -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def bivariate_gaussian(n: int, rho: float = 0.8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(seed)
    x = generator.standard_normal(n)
    y = rho * x + np.sqrt(1 - rho**2) * generator.standard_normal(n)
    return x[:, None], y[:, None]


def write_table(path, n: int = 400, seed: int = 0):
    """An .npz table of n rows: x ~ U(-3, 3), y = sin(x) + (0.2 + 0.1 |x|) e; returns ``path``."""
    generator = np.random.default_rng(seed)
    x = generator.uniform(-3, 3, n)
    y = np.sin(x) + (0.2 + 0.1 * np.abs(x)) * generator.standard_normal(n)
    np.savez(path, x=x, y=y)
    return path


def step_crps(cdf_at, y: float, atoms: np.ndarray) -> float:
    """The CRPS integral of (F(t) - 1{t >= y})^2 dt for a step CDF, exactly: the integrand is constant
    between consecutive breakpoints (the atoms and y) and zero outside them. ``cdf_at(t)`` gives F at
    the points t (right-continuous)."""
    points = np.unique(np.append(np.asarray(atoms, dtype=float).ravel(), y))
    heights = np.asarray(cdf_at(points[:-1]), dtype=float) - (points[:-1] >= y)
    return float(sum(h * h * (b - a) for h, a, b in zip(heights, points[:-1], points[1:])))


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
                # not the process's default client: jdl sends its work through the clients it opens, and
                # a default one here would hide a step that leaves dask asking for a client that is gone
                client = distributed.Client(address, timeout=5, set_as_default=False)
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


@pytest.fixture(scope="session")
def prefect_api(prefect_server):
    """The session's Prefect API (``prefect_server``) as this process's: yields its URL, which
    subprocesses get through PREFECT_API_URL. One server for every test that records runs: each
    start takes 10-20 s."""
    pytest.importorskip("prefect")
    from prefect.settings import PREFECT_API_URL, temporary_settings

    api, _ = prefect_server
    with temporary_settings({PREFECT_API_URL: api}):
        yield api


def _wait_for_http(url: str, process, timeout: float) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"the process serving {url} exited with code {process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")
        time.sleep(0.5)


@contextlib.contextmanager
def stopped_on_exit(process, grace: float = 20):
    """Yield ``process`` (started with start_new_session=True); on exit SIGTERM its process group,
    then SIGKILL whatever is left after ``grace`` seconds."""
    import os
    import signal
    import subprocess

    try:
        yield process
    finally:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=wait)
                os.killpg(process.pid, signal.SIGKILL)  # children the leader left behind
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real `prefect server start` on 127.0.0.1 with its own PREFECT_HOME, for the whole session; the
    scheduler service loops every 2 s. Yields (api_url, environment for clients)."""
    import os
    import shutil
    import subprocess
    import sys

    pytest.importorskip("prefect")
    binary = shutil.which("prefect", path=os.path.dirname(sys.executable)) or shutil.which("prefect")
    if binary is None:
        pytest.skip("the prefect command line is not installed")
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2", "PREFECT_API_URL": api,
           "PREFECT_UI_ENABLED": "false"}
    log = open(home / "server.log", "w")
    process = subprocess.Popen([binary, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                               stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    with stopped_on_exit(process):
        _wait_for_http(f"{api}/health", process, timeout=120)
        yield api, env
    log.close()


def processes_in_group(pgid: int) -> list[int]:
    """PIDs of the live (not zombie) processes of the process group ``pgid`` (needs psutil)."""
    import os

    psutil = pytest.importorskip("psutil")
    found = []
    for other in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(other.pid) == pgid and other.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(other.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return found
