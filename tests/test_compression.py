"""Conditional distribution compression (seed 003): AMCMD and JMMD against brute force, the
objectives' identities and analytic gradients against finite differences, the exact label search,
and the compression methods' behaviour."""
import itertools

import numpy as np
import pytest

from jdlcore import CME, amcmd, compress, jmmd, run_compression
from jdlcore.compression import ArraySource, amcmd_between, kcme_embedding
from jdlcore.compression.compress import default_kernel
from jdlcore.compression.objectives import ACKIPObjective, JKIPObjective, label_objective, search_labels
from jdlcore.compression.synthetic import HeteroscedasticModel
from jdlcore.kernels import (DeltaKernel, GaussianKernel, LaplaceKernel, Matern32Kernel, Matern52Kernel)


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    Y = np.column_stack([np.sin(X[:, 0]) + 0.3 * rng.normal(size=n), X[:, 1] ** 2 + 0.2 * rng.normal(size=n)])
    return X, Y


def _brute_amcmd2(X, Y, Xc, Yc, kx, ky, reg, reg_c, X_eval):
    """(1/q) sum_r ||mu_N(x_r) - mu_M(x_r)||^2, one point at a time, through the Gram of all atoms."""
    W_N = np.linalg.solve(kx(X) + reg * np.eye(len(X)), np.eye(len(X)))
    W_M = np.linalg.solve(kx(Xc) + reg_c * np.eye(len(Xc)), np.eye(len(Xc)))
    gram = ky(np.vstack([Y, Yc]))
    total = 0.0
    for x in X_eval:
        b = np.concatenate([W_N @ kx(X, x[None]).ravel(), -(W_M @ kx(Xc, x[None]).ravel())])
        total += b @ gram @ b
    return total / len(X_eval)


# -- AMCMD and JMMD -------------------------------------------------------------------------------
def test_amcmd_equals_brute_force_average():
    X, Y = _data()
    Xc, Yc = X[:12] + 0.05, Y[:12] - 0.1
    X_eval = np.random.default_rng(3).normal(size=(40, 2))
    kx, ky = GaussianKernel(np.array([0.8, 1.2])), GaussianKernel(0.7)
    for reg, reg_c, points in ((0.05, 0.05, None), (0.02, 0.3, X_eval)):
        value = amcmd(X, Y, Xc, Yc, kernel_x=kx, kernel_y=ky, reg=reg, reg_c=reg_c, X_eval=points, squared=True)
        brute = _brute_amcmd2(X, Y, Xc, Yc, kx, ky, reg, reg_c, X if points is None else points)
        assert abs(value - brute) < 1e-10
        assert amcmd(X, Y, Xc, Yc, kernel_x=kx, kernel_y=ky, reg=reg, reg_c=reg_c, X_eval=points) == \
            pytest.approx(np.sqrt(brute), rel=1e-9)


def test_amcmd_is_a_metric_on_kcmes():
    X, Y = _data()
    kx, ky = GaussianKernel(1.0), GaussianKernel(0.8)
    sets = [(X[i::3], Y[i::3]) for i in range(3)]
    X_eval = X[:50]
    d = {(i, j): amcmd(*sets[i], *sets[j], kernel_x=kx, kernel_y=ky, reg=0.1, X_eval=X_eval)
         for i in range(3) for j in range(3)}
    assert amcmd(X, Y, X, Y, kernel_x=kx, kernel_y=ky, reg=0.1, squared=True) == pytest.approx(0.0, abs=1e-12)
    for i, j in itertools.permutations(range(3), 2):
        assert d[i, j] == pytest.approx(d[j, i], rel=1e-10)  # symmetric at equal reg
        assert d[i, j] > 0
    for i, j, k in itertools.permutations(range(3), 3):
        assert d[i, k] <= d[i, j] + d[j, k] + 1e-12


def test_low_rank_amcmd_equals_exact_at_full_rank():
    X, Y = _data(150)
    Xc, Yc = X[:10], Y[:10] + 0.2
    kx, ky = GaussianKernel(0.9), GaussianKernel(0.6)
    exact = amcmd(X, Y, Xc, Yc, kernel_x=kx, kernel_y=ky, reg=0.1, squared=True)
    low_rank = amcmd(X, Y, Xc, Yc, kernel_x=kx, kernel_y=ky, reg=0.1, squared=True, rank_tol=1e-14)
    assert abs(low_rank - exact) < 1e-11 * exact
    rough = amcmd(X, Y, Xc, Yc, kernel_x=kx, kernel_y=ky, reg=0.1, squared=True, rank_tol=1e-3)
    assert 1e-5 * exact < abs(rough - exact) < 1e-2 * exact  # a coarse factorisation is close, not equal


def test_jmmd_equals_brute_force():
    X, Y = _data(60)
    Xc, Yc = X[:7] * 0.9, Y[:7]
    kx, ky = Matern52Kernel(1.1), GaussianKernel(0.5)
    Z_x, Z_y = np.vstack([X, Xc]), np.vstack([Y, Yc])
    w = np.concatenate([np.full(60, 1 / 60), np.full(7, -1 / 7)])
    brute = w @ (kx(Z_x) * ky(Z_y)) @ w
    assert jmmd(X, Y, Xc, Yc, kernel_x=kx, kernel_y=ky, squared=True) == pytest.approx(brute, abs=1e-13)


# -- objectives -----------------------------------------------------------------------------------
def test_ackip_objective_is_the_kcme_regression_risk_less_a_constant():
    """J + (1/n) sum_i l(y_i, y_i) = (1/n) sum_i ||l(y_i, .) - mu_C(x_i)||^2 (brute force per point)."""
    X, Y = _data()
    Xc, Yc = X[:9] + 0.1, Y[:9]
    kx, ky = GaussianKernel(0.8), GaussianKernel(0.6)
    value = ACKIPObjective(kx, ky, 0.01).evaluate(Xc, Yc, ArraySource(X, Y, chunk_rows=17), gradient=False).value
    W = np.linalg.inv(kx(Xc) + 0.01 * np.eye(9))
    risk = 0.0
    for x, y in zip(X, Y):
        coefficients = np.concatenate([[1.0], -(W @ kx(Xc, x[None]).ravel())])
        risk += coefficients @ ky(np.vstack([y, Yc])) @ coefficients
    assert value + 1.0 == pytest.approx(risk / len(X), abs=1e-12)  # l(y, y) = 1
    assert value >= -1.0


def test_jkip_objective_is_the_squared_jmmd_less_the_data_term():
    X, Y = _data(80)
    Xc, Yc = X[:6] - 0.2, Y[:6]
    kx, ky = GaussianKernel(0.8), Matern32Kernel(0.9)
    value = JKIPObjective(kx, ky).evaluate(Xc, Yc, ArraySource(X, Y), gradient=False).value
    data_term = np.mean(kx(X) * ky(Y))
    assert value + data_term == pytest.approx(jmmd(X, Y, Xc, Yc, kernel_x=kx, kernel_y=ky, squared=True), abs=1e-13)


def test_objectives_do_not_depend_on_the_chunking():
    X, Y = _data(200)
    Xc, Yc = X[:8], Y[:8] + 0.1
    for objective in (ACKIPObjective(GaussianKernel(0.8), GaussianKernel(0.6), 1e-3),
                      JKIPObjective(GaussianKernel(0.8), GaussianKernel(0.6))):
        one = objective.evaluate(Xc, Yc, ArraySource(X, Y, chunk_rows=200))
        many = objective.evaluate(Xc, Yc, ArraySource(X, Y, chunk_rows=9))
        assert many.value == pytest.approx(one.value, abs=1e-13)
        np.testing.assert_allclose(many.grad_x, one.grad_x, atol=1e-12)
        np.testing.assert_allclose(many.grad_y, one.grad_y, atol=1e-12)


def _finite_differences(objective, Xc, Yc, source, which, h=1e-4):
    """Fourth-order central differences of the objective in every coordinate of Xc or Yc."""
    base = Xc if which == "x" else Yc
    out = np.zeros_like(base)

    def value(shift):
        args = (Xc + shift, Yc) if which == "x" else (Xc, Yc + shift)
        return objective.evaluate(*args, source, gradient=False).value

    for index in np.ndindex(*base.shape):
        step = np.zeros_like(base)
        step[index] = h
        out[index] = (-value(2 * step) + 8 * value(step) - 8 * value(-step) + value(-2 * step)) / (12 * h)
    return out


KERNEL_PAIRS = [
    (GaussianKernel(0.8), GaussianKernel(0.6)),
    (Matern52Kernel(np.array([0.9, 1.4])), Matern32Kernel(np.array([0.8, 1.1]))),
    (Matern32Kernel(1.2), Matern52Kernel(0.7)),
]


@pytest.mark.parametrize("objective_class", [ACKIPObjective, JKIPObjective])
@pytest.mark.parametrize("kernels", KERNEL_PAIRS, ids=["gaussian", "matern52-ard", "matern32"])
def test_gradients_match_finite_differences(objective_class, kernels):
    X, Y = _data(90, seed=1)
    rng = np.random.default_rng(2)
    Xc, Yc = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    objective = objective_class(*kernels, 1e-2)
    source = ArraySource(X, Y, chunk_rows=31)
    evaluation = objective.evaluate(Xc, Yc, source)
    for which, analytic in (("x", evaluation.grad_x), ("y", evaluation.grad_y)):
        numeric = _finite_differences(objective, Xc, Yc, source, which)
        assert np.max(np.abs(analytic - numeric)) <= 1e-7 * max(1.0, np.max(np.abs(analytic)))


def _classes_data(n=150, seed=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    Y = (X[:, :1] > 0).astype(float) + (X[:, 1:] > 0.5)
    return X, Y


@pytest.mark.parametrize("objective_class", [ACKIPObjective, JKIPObjective])
def test_discrete_response_gradient_and_label_objective(objective_class):
    X, Y = _classes_data()
    classes = np.unique(Y)
    rng = np.random.default_rng(5)
    Xc, Yc = rng.normal(size=(5, 2)), rng.choice(classes, size=(5, 1))
    objective = objective_class(GaussianKernel(0.9), DeltaKernel(), 1e-2, classes)
    source = ArraySource(X, Y, chunk_rows=40)
    evaluation = objective.evaluate(Xc, Yc, source)
    assert evaluation.grad_y is None
    numeric = _finite_differences(objective, Xc, Yc, source, "x")
    assert np.max(np.abs(evaluation.grad_x - numeric)) <= 1e-7 * max(1.0, np.max(np.abs(numeric)))
    # the label objective is the objective, for 30 random labellings (every point and pair of points varies)
    for labels in np.random.default_rng(7).integers(0, classes.size, size=(30, 5)):
        direct = objective.evaluate(Xc, classes[labels][:, None], source, gradient=False).value
        assert label_objective(labels, evaluation.labels) == pytest.approx(direct, abs=1e-12)


def test_label_search_moves_each_label_to_its_exact_best_class():
    X, Y = _classes_data()
    classes = np.unique(Y)
    rng = np.random.default_rng(6)
    Xc, labels = rng.normal(size=(6, 2)), rng.integers(0, classes.size, size=6)
    evaluation = ACKIPObjective(GaussianKernel(0.9), DeltaKernel(), 1e-2, classes).evaluate(
        Xc, classes[labels][:, None], ArraySource(X, Y), gradient=False)
    searched = search_labels(labels, evaluation.labels)
    value = label_objective(searched, evaluation.labels)
    assert value <= label_objective(labels, evaluation.labels)
    for t, c in itertools.product(range(6), range(classes.size)):  # no single change improves it
        changed = searched.copy()
        changed[t] = c
        assert label_objective(changed, evaluation.labels) >= value - 1e-14


# -- kernels --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", [GaussianKernel(0.7), Matern32Kernel(np.array([0.5, 2.0])), Matern52Kernel(1.3)])
def test_kernel_slope_gives_the_gradient(kernel):
    rng = np.random.default_rng(7)
    A, B, S = rng.normal(size=(4, 2)), rng.normal(size=(5, 2)), rng.normal(size=(4, 5))
    B[0] = A[0]  # a coinciding pair: the gradient is 0 there, and finite
    values, slope = kernel.value_and_slope(A, B)
    np.testing.assert_allclose(values, kernel(A, B), atol=1e-15)
    analytic = kernel.distance_gradient(A, B, S * slope)
    numeric = np.zeros_like(A)
    for index in np.ndindex(*A.shape):
        step = np.zeros_like(A)
        step[index] = 1e-6
        numeric[index] = (np.sum(S * kernel(A + step, B)) - np.sum(S * kernel(A - step, B))) / 2e-6
    np.testing.assert_allclose(analytic, numeric, atol=1e-8)


def test_non_differentiable_kernels_are_refused():
    with pytest.raises(ValueError, match="not differentiable"):
        LaplaceKernel(1.0).value_and_slope(np.zeros((2, 1)), np.ones((2, 1)))


# -- compression ----------------------------------------------------------------------------------
def test_ackip_beats_the_median_random_subsample_on_the_heteroscedastic_task():
    X, Y = HeteroscedasticModel().sample(1200, seed=11)
    kx, ky = default_kernel(X), default_kernel(Y)
    reg, m = 1e-3, 20
    options = dict(kernel_x=kx, kernel_y=ky, reg=reg)
    result = run_compression(ArraySource(X, Y), m=m, method="ackip", seed=0, steps=300, **options)
    assert result.value < result.initial_value
    assert np.min(result.trace) == pytest.approx(result.value)
    full = kcme_embedding(X, Y, kx, ky, reg)  # one O(n^3) solve for all the sets compared

    def distance(Xc, Yc):
        return np.sqrt(amcmd_between(full, kcme_embedding(Xc, Yc, kx, ky, reg), ArraySource(X, Y)))

    compressed = distance(result.X, result.Y)
    assert compressed == pytest.approx(amcmd(X, Y, result.X, result.Y, **options), rel=1e-9)
    rng = np.random.default_rng(1)
    randoms = [distance(X[idx], Y[idx]) for idx in (rng.choice(len(X), m, replace=False) for _ in range(20))]
    assert compressed < np.median(randoms)
    assert compressed < np.min(randoms)


@pytest.mark.parametrize("method", ["ackip", "jkip", "ackh", "jkh", "random"])
def test_every_method_returns_m_points_reproducibly(method):
    X, Y = _data(300, seed=8)
    options = dict(m=6, method=method, steps=15, seed=3)
    Xc, Yc = compress(X, Y, **options)
    assert Xc.shape == (6, 2) and Yc.shape == (6, 2)
    again = compress(X, Y, **options)
    np.testing.assert_array_equal(Xc, again[0])
    np.testing.assert_array_equal(Yc, again[1])
    if method == "random":  # a subsample of the data's (x, y) rows, pairs kept together
        pairs = np.hstack([X, Y])
        assert all(any(np.array_equal(row, data) for data in pairs) for row in np.hstack([Xc, Yc]))


def test_herding_trace_has_one_value_per_point_and_lbfgs_descends():
    X, Y = _data(300, seed=9)
    herded = run_compression(ArraySource(X, Y), m=5, method="ackh", steps=10, seed=0)
    assert herded.trace.shape == (5,)
    kip = run_compression(ArraySource(X, Y), m=6, method="ackip", optimizer="lbfgs", steps=30, seed=0)
    assert kip.value < kip.initial_value


def test_classification_compression_keeps_labels_among_the_classes():
    X, Y = _classes_data(400)
    for method, optimizer in (("ackip", "adam"), ("jkip", "adam"), ("ackip", "lbfgs"), ("ackh", "adam")):
        result = run_compression(ArraySource(X, Y), m=8, method=method, kernel_y=DeltaKernel(), steps=20,
                                 seed=1, optimizer=optimizer)
        assert set(np.unique(result.Y)) <= set(np.unique(Y))
        # a real descent (measured: 4.6 % to 176 % of |initial|), not only the best value kept from the start
        assert result.value < result.initial_value - 0.01 * abs(result.initial_value), (method, optimizer)


@pytest.mark.parametrize("kwargs, message", [
    (dict(m=0), "m: must be an integer"),
    (dict(m=301), "m: must be an integer"),
    (dict(m=2.5), "m: must be an integer"),
    (dict(method="herd"), "method"),
    (dict(optimizer="sgd"), "optimizer"),
    (dict(reg=0.0), "reg"),
    (dict(steps=-1), "steps"),
    (dict(n_init=0), "n_init"),
    (dict(kernel_x=LaplaceKernel(1.0)), "kernel_x: the laplace kernel has no gradient"),
    (dict(kernel_x=GaussianKernel(np.ones(3))), "kernel_x: has 3 lengthscales"),
    (dict(kernel_y="gaussian"), "kernel_y: must be a jdlcore Kernel"),
])
def test_bad_compression_arguments_are_refused(kwargs, message):
    X, Y = _data(300)
    with pytest.raises(ValueError, match=message):
        compress(X, Y, **{"m": 5, **kwargs})


def test_bad_data_is_refused():
    X, Y = _data(50)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="X: contains NaN"):
        compress(bad, Y, m=3)
    with pytest.raises(ValueError, match="same number of rows"):
        compress(X, Y[:-1], m=3)
    with pytest.raises(ValueError, match="Xc: has 1 features"):
        amcmd(X, Y, X[:3, :1], Y[:3], kernel_x=GaussianKernel(1.0), kernel_y=GaussianKernel(1.0), reg=0.1)
    with pytest.raises(ValueError, match="one column"):
        compress(X, Y, m=3, kernel_y=DeltaKernel())


def test_amcmd_uses_the_cme_convention_for_the_low_rank_variant():
    """The low-rank CME with reg / n is the paper's KCME with reg (checked at full rank)."""
    X, Y = _data(100)
    kx, ky = GaussianKernel(0.9), GaussianKernel(0.6)
    cme = CME(kx, ky, reg=0.1 / 100, tol=1e-14, scaling="none").fit(X, Y)  # the KCME's kernels as given
    W = np.linalg.solve(kx(X) + 0.1 * np.eye(100), np.eye(100))
    Xq = X[:5] + 0.3
    dense = (W @ kx(X, Xq)).T @ np.sin(Y[:, 0])
    np.testing.assert_allclose(cme.conditional_expectation(Xq, lambda y: np.sin(y[:, 0])), dense, atol=1e-8)


def test_select_reg_scores_the_validation_rkhs_error():
    from jdlcore.compression.regularisation import select_reg

    X, Y = HeteroscedasticModel().sample(400, seed=12)
    kx, ky = default_kernel(X), default_kernel(Y)
    regs = [1e-4, 1e-2, 1.0]
    reg, info = select_reg(X, Y, kernel_x=kx, kernel_y=ky, regs=regs, subset_size=40, n_subsets=3, seed=5)
    assert info["losses"].shape == (3, 3)
    assert reg == regs[int(np.argmin(info["losses"].mean(axis=0)))]
    # one entry by brute force: the same split and subsets, the validation RKHS error less l(y, y) = 1
    rng = np.random.default_rng(5)
    order = rng.permutation(400)
    validation, training = order[:40], order[40:]
    subset = rng.choice(training, 40, replace=False)
    W = np.linalg.inv(kx(X[subset]) + 1e-2 * np.eye(40))
    errors = []
    for v in validation:
        coefficients = np.concatenate([[1.0], -(W @ kx(X[subset], X[v][None]).ravel())])
        errors.append(coefficients @ ky(np.vstack([Y[v], Y[subset]])) @ coefficients)
    assert info["losses"][0, 1] == pytest.approx(np.mean(errors) - 1.0, abs=1e-10)
    with pytest.raises(ValueError, match="validation_fraction"):
        select_reg(X, Y, kernel_x=kx, kernel_y=ky, validation_fraction=1.5)


def test_reg_is_chosen_by_validation_unless_given():
    from jdlcore.compression.regularisation import DEFAULT_REGS

    X, Y = HeteroscedasticModel().sample(600, seed=13)
    chosen = run_compression(ArraySource(X, Y), m=10, steps=5, seed=0)
    assert chosen.settings["reg_from"] == "validation" and chosen.settings["reg"] in DEFAULT_REGS
    given = run_compression(ArraySource(X, Y), m=10, steps=5, seed=0, reg=0.5)
    assert given.settings["reg_from"] == "given" and given.settings["reg"] == 0.5
