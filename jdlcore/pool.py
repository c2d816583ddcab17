"""jdl's thread pool: where kernel blocks, the folds of a tuning and the boosters of a map run side by
side, and how the threaded libraries they call behave on it.

The pool has JDL_KERNEL_THREADS threads, else one per core up to 4 (Dask workers of the embedded
cluster use 1). Work handed to the pool from one of its own threads runs in that thread, and on any
of the pool's threads that is free meanwhile (``_shared``). NumPy releases the GIL in BLAS and in
ufuncs, so the threads compute at once.

Ctrl-C reaches the main thread only. When it interrupts a call that handed work to the pool, the
pool's threads stop too: every item not yet started is skipped, and long work checks ``stop_point``
between its steps (a booster's rounds), so the call ends, and the process can exit, within a step.
"""
from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator

from threadpoolctl import ThreadpoolController

__all__ = ["pool_threads", "pool_map", "alongside", "stop_point", "Stopped"]

_THREADS = max(1, int(os.environ.get("JDL_KERNEL_THREADS", 0)) or min(4, os.cpu_count() or 1))
_POOL_PREFIX = "jdl-kernel"
_POOL: ThreadPoolExecutor | None = None
_BLAS: dict[str, Any] = {"lock": threading.Lock(), "holders": 0, "limits": None, "controller": None, "modules": None}
_HELD = threading.local()  # a pool thread's ``modules``: the module count when its OpenMP libraries were held
_STOP = threading.Event()  # set while an interrupted call of a thread outside the pool unwinds
_CALLS = threading.local()  # a thread's ``depth``: its calls (``_waited``) that handed work to the pool and run


class Stopped(KeyboardInterrupt):
    """Raised in the pool's threads at a ``stop_point`` once the call that handed them work was
    interrupted (a ``KeyboardInterrupt``: no ``except Exception`` along the way takes it for a failure)."""


def stop_point() -> None:
    """``Stopped`` if the call whose work this is was interrupted; for long work on the pool's threads,
    between its steps."""
    if _STOP.is_set():
        raise Stopped("the call that started this work was interrupted")


@contextmanager
def _waited(futures: list[Future]) -> Iterator[None]:
    """Around a call of a thread outside the pool that hands ``futures`` to the pool: on the way out,
    whatever the way, it waits for them, so nothing of the call runs on after it. On an interrupt
    (Ctrl-C) the pool's threads are first asked to stop (``_STOP``), and the thread's outermost such
    call clears the request once its work has ended, so that the next call runs."""
    depth = getattr(_CALLS, "depth", 0)
    _CALLS.depth = depth + 1
    try:
        yield
    except KeyboardInterrupt:
        _STOP.set()
        raise
    finally:
        wait(futures)
        _CALLS.depth = depth
        if depth == 0:
            _STOP.clear()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix=_POOL_PREFIX)
    return _POOL


def pool_threads() -> int:
    """The kernel pool's thread count (JDL_KERNEL_THREADS, else one per core up to 4)."""
    return _THREADS


def _on_pool_thread() -> bool:
    """Whether this thread is one of the pool's."""
    return threading.current_thread().name.startswith(_POOL_PREFIX)


def _runs_inline() -> bool:
    """Whether work handed to ``alongside`` from this thread runs in it: a pool of one thread, or this
    thread one of the pool's."""
    return _THREADS == 1 or _on_pool_thread()


def pool_map(work: Callable[[Any], Any], items: list, *, one_blas_thread: bool = False) -> list:
    """``work(item)`` for each item, results in order: on the kernel thread pool when there are several
    items and threads, else in this thread. From one of the pool's own threads, in that thread and on
    any of the pool's threads free meanwhile (``_shared``), under the BLAS setting of the work that
    called it. ``one_blas_thread``: hold BLAS to one thread while the pool runs, for work that runs
    BLAS inside the pool's threads (``_one_blas_thread``)."""
    if len(items) <= 1 or _THREADS == 1:
        return [work(item) for item in items]
    if _on_pool_thread():
        return _shared(work, items)
    with _one_blas_thread() if one_blas_thread else nullcontext():
        futures = [_pool().submit(_one_openmp_thread(work), item) for item in items]
        with _waited(futures):
            try:
                return [future.result() for future in futures]
            except BaseException:  # the items not started are not run
                for future in futures:
                    future.cancel()
                raise


def _shared(work: Callable[[Any], Any], items: list) -> list:
    """``work(item)`` for each item, results in order, called from one of the pool's threads: that
    thread takes the items one at a time, and so does each of the pool's threads that is free while
    it does (a helper handed to the pool, which takes none once all are taken). The calling thread
    then waits only for items other threads have taken and are running, never for work queued
    behind busy threads, so nested maps cannot wait on each other. (A pool thread used to run its
    nested work alone: on births at 40,000 rows the search on the summaries alone ran on for 4 s on
    one thread, the other core idle, after the search beside the columns had finished.) An item's
    error is raised once the items running have finished, the first item's of those that failed;
    no item is taken after it."""
    results: list[Any] = [None] * len(items)
    failed: dict[int, BaseException] = {}
    taken, running = 0, 0
    finished = threading.Condition()

    def take() -> None:
        nonlocal taken, running
        while True:
            stop_point()
            with finished:
                if taken == len(items) or failed:
                    return
                index, taken, running = taken, taken + 1, running + 1
            try:
                results[index] = work(items[index])
            except BaseException as error:  # raised in the calling thread
                with finished:
                    failed[index] = error
            finally:
                with finished:
                    running -= 1
                    finished.notify_all()

    helpers = [_pool().submit(_one_openmp_thread(take)) for _ in range(min(_THREADS, len(items)) - 1)]
    take()
    with finished:
        finished.wait_for(lambda: running == 0)
    for helper in helpers:
        helper.cancel()  # one not started would find nothing left
    if failed:
        raise failed[min(failed)]
    return results


@contextmanager
def alongside(work: Callable[[], Any]) -> Iterator[Future]:
    """``work()`` on a thread of the kernel pool while the body of the ``with`` runs in this one; yields
    its ``Future``: ``result()`` waits for it and returns its result, or raises its error (an error of a
    result never read is not raised), ``done()`` says whether it has finished. BLAS is held at one thread
    until both are done (``_one_blas_thread``), so that each keeps about a core busy and computes every
    BLAS product the same way whatever the other is doing; pool work handed out inside ``work`` runs in
    its thread (and on pool threads free meanwhile, ``_shared``), and the body's on the pool's other
    threads. Leaving the block waits for ``work`` (also where the body raised). With a pool of one
    thread, or from a thread of the pool, ``work`` runs first, in this thread, and the body after it."""
    if _runs_inline():
        done: Future = Future()
        try:
            done.set_result(work())
        except Exception as error:  # raised where the result is read, as from the pool
            done.set_exception(error)
        yield done
        return
    with _one_blas_thread():
        future = _pool().submit(_one_openmp_thread(work))
        with _waited([future]):
            yield future


def _one_openmp_thread(work: Callable) -> Callable:
    """``work`` as a pool thread runs it: with the OpenMP libraries loaded so far held at one thread in that
    thread (``omp_set_num_threads`` sets the calling thread's count only), looked at again after an
    import. The pool's threads share the cores already, and an OpenMP runtime keeps a team of threads for
    every thread that runs a parallel region at several: with more of them than cores, libgomp makes
    every wait of every team sleep for the rest of the process. (After a pool thread had read one
    LightGBM model from its text at the default thread count, a 2-thread LightGBM fit in the main thread
    took 6 times as long as before.)"""
    def held(*args: Any) -> Any:
        stop_point()
        if getattr(_HELD, "modules", None) != len(sys.modules):
            _thread_libraries().limit(limits=1, user_api="openmp")
            _HELD.modules = len(sys.modules)
        return work(*args)

    return held


def _thread_libraries() -> ThreadpoolController:
    """The process's thread-pool libraries (BLAS and OpenMP), looked up again only where a module has
    been imported since the last look (a library is loaded by an import: an extension module, or ctypes
    at a package's import, as LightGBM's); a look reads every loaded library's path and took about 5 ms,
    2 s of a 5,000-row tuning that held BLAS 415 times."""
    if _BLAS.get("modules") != len(sys.modules):
        _BLAS["controller"], _BLAS["modules"] = ThreadpoolController(), len(sys.modules)
    return _BLAS["controller"]


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """BLAS at one thread for the duration, process-wide. (Idle BLAS threads spin for a while after
    each call; beside the pool's threads they took a core: measured 65k against 110k query rows per
    second on 2 cores.) The BLAS libraries are looked up again after an import (``_thread_libraries``:
    one loaded since, such as SciPy's, is held too). Overlapping uses share one limit; the last to
    leave restores BLAS's own thread count. BLAS products of other threads that overlap one of these
    maps also run at one thread, and their last bits may differ from a run without the overlap."""
    with _BLAS["lock"]:
        if _BLAS["holders"] == 0:
            _BLAS["limits"] = _thread_libraries().limit(limits=1, user_api="blas")
        _BLAS["holders"] += 1
    try:
        yield
    finally:
        with _BLAS["lock"]:
            _BLAS["holders"] -= 1
            if _BLAS["holders"] == 0:
                _BLAS["limits"].restore_original_limits()
                _BLAS["limits"] = None
