"""The lock of an output store: one holder at a time across processes, a clear wait and timeout naming
the holder, and recovery of a lock whose holder was killed."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline.locks import LockTimeout, lock_holder, lock_path, store_lock

REPO = Path(__file__).resolve().parents[1]
HOLDER = "import sys\nfrom pipeline.locks import store_lock\nwith store_lock(sys.argv[1]):\n" \
         "    print('locked', flush=True)\n    sys.stdin.read()\n"


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path/model.zarr until its stdin closes."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "model.zarr")], cwd=REPO,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "locked"
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=60)


def test_a_held_lock_times_out_naming_the_holder(tmp_path, holder):
    target = tmp_path / "model.zarr"
    assert lock_holder(target)["pid"] == holder.pid
    lines = []
    with pytest.raises(LockTimeout) as error:
        with store_lock(target, timeout=0.3, progress=lines.append):
            pass
    assert f"is locked by PID {holder.pid} on " in str(error.value) and "gave up after 0.3 s" in str(error.value)
    assert len(lines) == 1 and lines[0].startswith(f"waiting for PID {holder.pid} ")
    holder.stdin.close()  # released: the file goes with it, and the lock is free
    assert holder.wait(timeout=60) == 0
    assert not lock_path(target).exists()
    with store_lock(target, timeout=0):
        assert lock_holder(target)["pid"] == os.getpid()
    assert not lock_path(target).exists() and lock_holder(target) is None


def test_a_waiting_run_takes_the_lock_of_a_killed_holder(tmp_path, holder):
    """The stale lock is recovered: the kernel releases a killed holder's lock; its file is left, and
    the waiter takes the lock at once, without a timeout."""
    target = tmp_path / "model.zarr"
    waiting, acquired = threading.Event(), []

    def wait_for_lock():
        with store_lock(target, timeout=300, progress=lambda line: waiting.set()):
            acquired.append(lock_holder(target)["pid"])

    thread = threading.Thread(target=wait_for_lock)
    thread.start()
    assert waiting.wait(timeout=300)
    assert not acquired
    os.kill(holder.pid, signal.SIGKILL)
    thread.join(timeout=300)
    assert acquired == [os.getpid()]
    assert not lock_path(target).exists()


def test_one_holder_at_a_time_among_threads(tmp_path):
    target = tmp_path / "scores.zarr"
    inside, most, order = [0], [0], []
    guard = threading.Lock()

    def run(k):
        with store_lock(target, timeout=300):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.01)
            order.append(k)
            with guard:
                inside[0] -= 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert most[0] == 1 and sorted(order) == list(range(8))
    assert not lock_path(target).exists()


def test_a_bad_lock_timeout_setting_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("JDL_LOCK_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="JDL_LOCK_TIMEOUT: expected seconds as a number, got 'soon'"):
        with store_lock(tmp_path / "m.zarr"):
            pass
    assert list(tmp_path.iterdir()) == []
