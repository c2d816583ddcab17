import numpy as np
import pytest

from jdlcore import (
    DeltaKernel, GaussianKernel, LaplaceKernel, Matern32Kernel, Matern52Kernel, kernel_from_dict, median_heuristic,
)


def brute(kernel, A, B):
    """Pairwise loop with the textbook formulas."""
    out = np.empty((len(A), len(B)))
    scale = np.broadcast_to(np.asarray(kernel.lengthscale, dtype=float), A.shape[1:])
    for i, a in enumerate(A):
        for j, b in enumerate(B):
            r = np.sqrt(np.sum(((a - b) / scale) ** 2))
            if isinstance(kernel, GaussianKernel):
                out[i, j] = np.exp(-0.5 * r**2)
            elif isinstance(kernel, LaplaceKernel):
                out[i, j] = np.exp(-r)
            elif isinstance(kernel, Matern32Kernel):
                out[i, j] = (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
            elif isinstance(kernel, Matern52Kernel):
                out[i, j] = (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)
    return out


@pytest.mark.parametrize("cls", [GaussianKernel, LaplaceKernel, Matern32Kernel, Matern52Kernel])
@pytest.mark.parametrize("lengthscale", [0.7, np.array([0.5, 1.5, 2.0])])
def test_kernel_blocks_match_formulas(cls, lengthscale, rng):
    A, B = rng.standard_normal((7, 3)), rng.standard_normal((5, 3))
    kernel = cls(lengthscale)
    np.testing.assert_allclose(kernel(A, B), brute(kernel, A, B), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.diag(kernel(A)), kernel.diag(A), atol=1e-12)
    assert kernel_from_dict(kernel.to_dict()) == kernel


def test_threaded_large_block_equals_unthreaded(rng):
    A, B = rng.standard_normal((20_000, 2)), rng.standard_normal((60, 2))
    kernel = GaussianKernel(0.8)
    big = kernel(A, B)  # several threaded slabs of rows
    blocks = np.vstack([kernel(A[start:start + 1000], B) for start in range(0, 20_000, 1000)])  # unthreaded
    np.testing.assert_allclose(big, blocks, rtol=0, atol=1e-15)
    rows = [0, 8737, 8738, 17475, 17476, 19999]  # either side of each slab boundary, by the formula itself
    np.testing.assert_allclose(big[rows], brute(kernel, A[rows], B), rtol=1e-12, atol=1e-12)


def test_delta_kernel():
    A = np.array([[0.0], [1.0], [1.0], [2.0]])
    K = DeltaKernel()(A)
    np.testing.assert_array_equal(K, (A == A.T).astype(float))
    assert kernel_from_dict({"name": "delta"}) == DeltaKernel()


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf, [1.0, -2.0]])
def test_bad_lengthscale(bad):
    with pytest.raises(ValueError, match="lengthscale"):
        GaussianKernel(bad)


def test_feature_count_mismatch(rng):
    with pytest.raises(ValueError, match="lengthscale"):
        GaussianKernel(np.ones(2))(rng.standard_normal((3, 3)))
    with pytest.raises(ValueError, match="B"):
        GaussianKernel(1.0)(rng.standard_normal((3, 3)), rng.standard_normal((3, 2)))


def test_unknown_kernel_name():
    with pytest.raises(ValueError, match="unknown name 'rbf'"):
        kernel_from_dict({"name": "rbf"})


def test_median_heuristic_matches_brute_force(rng):
    X = rng.standard_normal((50, 2))
    distances = [np.linalg.norm(X[i] - X[j]) for i in range(50) for j in range(i + 1, 50)]
    assert median_heuristic(X) == pytest.approx(np.median(distances), rel=1e-12)
    per_feature = median_heuristic(X, per_feature=True)
    for k in range(2):
        gaps = [abs(X[i, k] - X[j, k]) for i in range(50) for j in range(i + 1, 50)]
        assert per_feature[k] == pytest.approx(np.median(gaps), rel=1e-12)
    with pytest.raises(ValueError, match="median"):
        median_heuristic(np.ones((10, 2)))


def test_the_median_heuristic_over_distinct_pairs_where_most_pairs_are_tied(rng):
    """y 0 on three rows in four: over 56% of the pairs are tied and the median distance is 0. "distinct"
    gives the median over the pairs at a positive distance (brute force); "raise" keeps refusing; a
    median that is positive is the same either way; rows all equal have no distinct pair."""
    y = np.where(rng.random((80, 1)) < 0.75, 0.0, rng.exponential(size=(80, 1)))
    distances = np.array([abs(y[i, 0] - y[j, 0]) for i in range(80) for j in range(i + 1, 80)])
    assert np.median(distances) == 0
    assert median_heuristic(y, ties="distinct") == pytest.approx(np.median(distances[distances > 0]), rel=1e-12)
    with pytest.raises(ValueError, match="median pairwise distance is 0"):
        median_heuristic(y)
    X = rng.standard_normal((40, 2))
    assert median_heuristic(X, ties="distinct") == median_heuristic(X)
    with pytest.raises(ValueError, match="median pairwise distance is 0"):
        median_heuristic(np.ones((10, 2)), ties="distinct")
    with pytest.raises(ValueError, match="ties: must be"):
        median_heuristic(X, ties="ignore")


def test_the_blas_libraries_are_looked_up_again_only_after_an_import(monkeypatch):
    """The pool's hold on BLAS reuses the last look-up of the loaded libraries until a module is imported
    (a library loaded since, e.g. by an extension module, must be held too)."""
    import sys
    import types

    import jdlcore.pool as pool

    first = pool._thread_libraries()
    assert pool._thread_libraries() is first
    monkeypatch.setitem(sys.modules, "jdl_test_fresh_module", types.ModuleType("jdl_test_fresh_module"))
    again = pool._thread_libraries()
    assert again is not first and pool._thread_libraries() is again
    assert {lib["user_api"] for lib in again.info()} >= {lib["user_api"] for lib in first.info()}


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_work_alongside_runs_on_the_pool_beside_the_body_with_single_threaded_blas(monkeypatch):
    """``alongside``: the work runs on a pool thread while the body runs (each waits for the other to
    have started: run one after the other, they would time out), BLAS at one thread in both until both
    are done; its result or its error is read afterwards, and leaving waits for the work, also where the
    body raised."""
    import threading
    import time

    import jdlcore.pool as pool

    monkeypatch.setattr(pool, "_THREADS", 2)
    before = _blas_threads()
    started, release, seen = threading.Event(), threading.Event(), {}

    def work():
        started.set()
        seen["work"] = (threading.current_thread().name, _blas_threads(), release.wait(timeout=60))
        return 42

    with pool.alongside(work) as result:
        seen["body"] = (started.wait(timeout=60), _blas_threads(), result.done())
        release.set()
        assert result.result() == 42 and result.done()
    name, threads, released = seen["work"]
    assert name.startswith("jdl-kernel") and released and all(t == 1 for t in threads)
    assert seen["body"][0] and all(t == 1 for t in seen["body"][1]) and not seen["body"][2]
    assert _blas_threads() == before

    def failing():
        raise RuntimeError("from the work")

    with pool.alongside(failing) as result:
        with pytest.raises(RuntimeError, match="from the work"):
            result.result()
    finished = []

    def slow():
        time.sleep(0.2)
        finished.append(True)

    with pytest.raises(ValueError, match="from the body"):
        with pool.alongside(slow):
            raise ValueError("from the body")
    assert finished == [True] and _blas_threads() == before


def test_a_pool_thread_runs_openmp_at_one_thread_and_the_calling_thread_keeps_its_count(monkeypatch):
    """Work on the pool (``pool_map``, ``alongside``) finds every OpenMP library loaded held at one thread in
    its thread, also one loaded after the pool's threads started; the calling thread keeps its count. An
    OpenMP runtime keeps a team of threads per thread that runs a parallel region at several, and with
    more of them than cores every wait of every team sleeps."""
    import threading

    import jdlcore.pool as pool
    from threadpoolctl import threadpool_info, threadpool_limits

    def openmp_threads(_: object = None) -> tuple[str, list[int]]:
        return threading.current_thread().name, [lib["num_threads"] for lib in threadpool_info()
                                                 if lib["user_api"] == "openmp"]

    monkeypatch.setattr(pool, "_THREADS", 2)
    pool.pool_map(openmp_threads, [0, 1])  # the pool's threads started before an OpenMP library loads
    pytest.importorskip("lightgbm")  # links an OpenMP runtime
    with threadpool_limits(limits=2, user_api="openmp"):  # this thread at two, whatever OMP_NUM_THREADS says
        _, here = openmp_threads()
        if not here or max(here) < 2:
            pytest.skip("no OpenMP library loaded")
        seen = pool.pool_map(openmp_threads, list(range(8)))
        with pool.alongside(openmp_threads) as beside:
            pass
        seen.append(beside.result())
        assert {name for name, _ in seen} <= {f"jdl-kernel_{k}" for k in range(2)}
        assert all(counts and max(counts) == 1 for _, counts in seen), seen
        assert openmp_threads()[1] == here


def test_a_pool_thread_s_nested_map_is_shared_with_a_free_pool_thread(monkeypatch):
    """From one of the pool's threads, ``pool_map`` runs its items in that thread and on a pool thread
    that is free meanwhile: two nested items that each wait for the other to have started both run (one
    after the other they would time out), on two of the pool's threads, results in order."""
    import threading

    import jdlcore.pool as pool

    monkeypatch.setattr(pool, "_THREADS", 2)
    both = threading.Barrier(2, timeout=60)

    def nested(k):
        both.wait()
        return k, threading.current_thread().name

    inner = pool.pool_map(lambda item: pool.pool_map(nested, [0, 1]) if item == 0 else None, [0, 1])[0]
    assert [k for k, _ in inner] == [0, 1]
    names = {name for _, name in inner}
    assert len(names) == 2 and all(name.startswith("jdl-kernel") for name in names)


def test_nested_maps_on_every_pool_thread_finish_and_raise_an_item_s_error_once_the_others_stopped(monkeypatch):
    """Every pool thread running a nested map (their helpers queued behind busy threads) still finishes,
    each result in its place; a nested item's error is raised after every item taken has finished, and
    no item is taken after it where one thread runs them all."""
    import threading

    import jdlcore.pool as pool

    monkeypatch.setattr(pool, "_THREADS", 2)
    done = []
    runner = threading.Thread(target=lambda: done.append(
        pool.pool_map(lambda i: pool.pool_map(lambda k: (i, k), list(range(5))), list(range(6)))))
    runner.start()
    runner.join(timeout=120)
    assert not runner.is_alive() and done == [[[(i, k) for k in range(5)] for i in range(6)]]
    started, finished, hold = [], [], threading.Event()

    def failing(k):
        started.append(k)
        if k == 1:
            hold.wait(timeout=0.2)  # the other thread, where it took item 0, finishes meanwhile
            raise ValueError("item 1")
        finished.append(k)
        return k

    with pytest.raises(ValueError, match="item 1"):
        pool.pool_map(lambda item: pool.pool_map(failing, [0, 1, 2, 3]) if item == 0 else None, [0, 1])
    assert sorted(finished) == sorted(k for k in started if k != 1) and 1 in started
    monkeypatch.setattr(pool, "_THREADS", 1)  # no helper: the calling thread takes every item
    started.clear()
    with pytest.raises(ValueError, match="item 1"):
        pool._shared(failing, [0, 1, 2, 3])
    assert started == [0, 1]


def test_work_alongside_runs_first_without_a_second_thread(monkeypatch):
    """With a pool of one thread the work runs first, in the calling thread, BLAS left as it is; its
    error is raised where its result is read."""
    import threading

    import jdlcore.pool as pool

    monkeypatch.setattr(pool, "_THREADS", 1)
    before, order = _blas_threads(), []
    with pool.alongside(lambda: order.append(("work", threading.current_thread().name)) or 7) as result:
        order.append(("body", threading.current_thread().name))
        assert _blas_threads() == before and result.done() and result.result() == 7
    here = threading.current_thread().name
    assert order == [("work", here), ("body", here)]

    def failing():
        raise RuntimeError("from the work")

    with pool.alongside(failing) as result:
        with pytest.raises(RuntimeError, match="from the work"):
            result.result()


def test_an_interrupt_stops_the_pool_s_work_at_its_next_step_and_the_next_call_runs(monkeypatch):
    """Ctrl-C in the calling thread (a ``KeyboardInterrupt`` in the body of ``alongside``, or while
    ``pool_map`` waits): the work on the pool stops at its next ``stop_point`` (``Stopped``) instead of
    running to its end, items not started are not run, and a later call runs in full."""
    import threading

    import jdlcore.pool as pool

    monkeypatch.setattr(pool, "_THREADS", 2)
    steps, started = [], threading.Event()

    def long_work():
        for step in range(10_000):
            started.set()
            pool.stop_point()
            steps.append(step)
            threading.Event().wait(0.001)

    with pytest.raises(KeyboardInterrupt):
        with pool.alongside(long_work) as beside:
            started.wait(timeout=60)
            raise KeyboardInterrupt
    assert isinstance(beside.exception(), pool.Stopped) and len(steps) < 10_000
    ran = []

    def item(k):
        if k == 0:
            raise KeyboardInterrupt  # as if delivered while the map waits on its first item
        ran.append(k)
        long_work()

    steps.clear()
    with pytest.raises(KeyboardInterrupt):
        pool.pool_map(item, list(range(6)))
    assert len(ran) <= 2 and len(steps) < 10_000  # the items after those running were skipped or stopped
    assert not pool._STOP.is_set()
    assert pool.pool_map(lambda k: k * k, list(range(6))) == [0, 1, 4, 9, 16, 25]
    with pool.alongside(lambda: 5) as beside:
        pass
    assert beside.result() == 5
