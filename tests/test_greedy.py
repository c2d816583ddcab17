"""GreedyJDL (Lahjouji 2022): the greedy JDL for a discrete X, checked against independent computations.

- separability: JDL's own problem with the delta kernel on X (build_problem, its reductions'
  objective) equals the sum of the per-class objectives, and both equal the brute-force n^2
  empirical risk of paper (14);
- every per-class QP (atoms, cube with sample and global bounds) against cvxpy + Clarabel;
- normalization, positivity and the running inequality after every step (on a grid far outside the
  data for the global cube);
- E2 of the thesis (X ~ Binomial(2, 0.5), Y ~ N(0, 1) independent): conditional CDFs against Phi
  and against the full JDL with the delta kernel on X;
- state round trip, class order, unseen classes, bad input.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from scipy.stats import norm

from jdlcore import DegeneracyWarning, DeltaKernel, Factorisation, GaussianKernel, JDL, LaplaceKernel
from jdlcore.models.greedy import (
    ClassBasis, GreedyJDL, build_class_problem, class_objective, class_order_indices, solve_class_step,
)
from jdlcore.models.problem import build_problem

THRESHOLDS = np.array([-0.3, -0.2, -0.1])


def dependent_data(n: int, seed: int = 0, classes=(0.0, 1.0, 2.0, 5.0), probabilities=(0.2, 0.4, 0.15, 0.25)):
    """Classes with different conditionals Y | X = c ~ N(0.8 sin(c) + 0.3 c, 0.5^2): constraints bind."""
    rng = np.random.default_rng(seed)
    labels = rng.choice(np.asarray(classes), size=n, p=np.asarray(probabilities))
    Y = 0.8 * np.sin(labels) + 0.3 * labels + 0.5 * rng.standard_normal(n)
    return labels, Y[:, None]


def e2_data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.binomial(2, 0.5, n).astype(np.float64), rng.standard_normal(n)[:, None]


VARIANTS = [("atoms", "sample"), ("cube", "sample"), ("cube", "global")]


@pytest.fixture(scope="module")
def small_data():
    return dependent_data(160, seed=3)


@pytest.fixture(scope="module")
def small_models(small_data):
    labels, Y = small_data
    return {
        variant: GreedyJDL(kernel_y=GaussianKernel(0.4), reg=1e-4, tol=1e-6, positivity=variant[0],
                           bounds=variant[1]).fit(labels, Y)
        for variant in VARIANTS
    }


def steps(model: GreedyJDL):
    """(class index, n_i, v_i, c_i) in solving order, recomputed from the fitted coefficients."""
    classes, counts = model.basis_x_.classes, model.basis_x_.counts
    n = model.n_samples_
    order = [int(np.flatnonzero(classes == value)[0]) for value in model.diagnostics_["class_order"]]
    S, cumulative = np.zeros(model.coef_.shape[0]), 0.0
    for k in order:
        cumulative += counts[k]
        yield k, counts[k], S / counts[k], (n - cumulative) / counts[k]
        S = S + counts[k] * model.coef_[:, k]


# -- separability and the brute-force risk ---------------------------------------------------------------
def test_separable_objective_equals_jdl_problem_and_brute_force_risk(rng):
    labels, Y = dependent_data(40, seed=1)
    kernel, reg = GaussianKernel(0.6), 1e-3
    greedy = build_class_problem(labels[:, None], Y, kernel, Factorisation(tol=1e-10, seed=0))
    full = build_problem(labels[:, None], Y, DeltaKernel(), kernel, Factorisation(tol=1e-10, seed=0))
    assert np.array_equal(greedy.basis_y.coefficients, full.basis_y.coefficients)
    red, classes = greedy.reductions, greedy.basis_x.classes
    n, (m_y, D) = red.n, red.cross.shape
    assert full.basis_x.size == D
    C = full.basis_x.features(classes[:, None])  # JDL's Psi_X at each class (a signed permutation)
    A = greedy.basis_y.features(Y)  # psi_Y at the atoms, through the kernel (not the factor)
    index = np.searchsorted(classes, labels)
    for _ in range(3):
        H = rng.standard_normal((m_y, D)) / np.sqrt(red.lam_y)[:, None]
        per_class = sum(class_objective(H[:, k], red.lam_y, red.cross[:, k], red.sum_y, n, red.lam_x[k], reg)
                        for k in range(D))
        # JDL's objective (22) in JDL's own delta-kernel basis: h = psi_Y H onehot^T = psi_Y H_jdl C^T onehot^T
        H_jdl = np.linalg.solve(C, H.T).T
        assert np.isclose(full.reductions.objective(H_jdl, reg), per_class, rtol=1e-9, atol=1e-12)
        assert np.isclose(red.objective(H, reg), per_class, rtol=1e-12, atol=1e-14)
        # paper (14): (1/n^2) sum_{s,t} h^2 - (2/n) sum_i h(x_i, y_i) + (2/n^2) sum_{s,t} h + reg |h|^2
        h = A @ H[:, index]  # h[t, s] = h(x_s, y_t)
        brute = (np.sum(h**2) / n**2 - 2.0 / n * np.trace(h) + 2.0 / n**2 * np.sum(h) + reg * np.sum(H**2))
        assert np.isclose(brute, per_class, rtol=1e-8, atol=1e-12)


# -- each per-class QP against cvxpy + Clarabel -------------------------------------------------------
def _cvxpy_step(red, k, n_i, v, c, reg, positivity, A_y=None, bounds=None):
    import cvxpy as cp

    n = red.n
    D = n_i * red.lam_y + n**2 * reg
    g = n * red.cross[:, k] - n_i * red.sum_y
    scale = float(np.max(D))
    m = D.size
    h = cp.Variable(m)
    objective = cp.Minimize(0.5 * cp.sum(cp.multiply(D / scale, cp.square(h))) - (g / scale) @ h)
    s = red.sum_y / np.max(np.abs(red.sum_y))
    constraints = [s @ h == 0]
    if positivity == "atoms":
        constraints += [1 + A_y @ h >= 0, A_y @ (v + h) <= c]
    else:  # the digest's LP form: h = h+ - h-, v + h = w+ - w-
        a, b = bounds
        hp, hm, wp, wm = (cp.Variable(m, nonneg=True) for _ in range(4))
        constraints += [h == hp - hm, a @ hp - b @ hm + 1 >= 0, v + h == wp - wm, b @ wp - a @ wm <= c]
    problem = cp.Problem(objective, constraints)
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12, max_iter=500)
    assert problem.status == "optimal", problem.status
    return np.asarray(h.value)


@pytest.mark.parametrize("variant", VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_every_class_step_matches_cvxpy(small_models, variant):
    model = small_models[variant]
    red = model.reductions_
    A_y = model.basis_y_.features(model.y_atoms_)
    bounds = (red.min_y, red.max_y) if variant[1] == "sample" else model.basis_y_.ranges()
    worst, binding = 0.0, 0
    for k, n_i, v, c in steps(model):
        reference = _cvxpy_step(red, k, n_i, v, c, model.reg, variant[0], A_y=A_y, bounds=bounds)
        h = model.coef_[:, k]
        worst = max(worst, float(np.max(np.abs(h - reference)) / max(1.0, np.max(np.abs(reference)))))
    binding = sum(r > 0 for r in model.diagnostics_["qp_rounds"][:-1])
    print(f"{variant}: max |h - cvxpy| / max(1, |h|_inf) = {worst:.2e}; rounds {model.diagnostics_['qp_rounds']}")
    assert worst < 1e-6
    assert binding >= 1  # the constraints bind before the last class, so the QPs are not trivial


def test_step_solver_directly_against_cvxpy_with_foreign_v(small_models):
    """The step solver on a (v, c) not produced by a fit: a feasible v from h = -v/(c+1) reasoning."""
    model = small_models[("atoms", "sample")]
    red = model.reductions_
    A_y = model.basis_y_.features(model.y_atoms_)
    k, n_i = 1, model.basis_x_.counts[1]
    v = 0.5 * model.coef_[:, 0]
    v -= (red.sum_y @ v) / (red.sum_y @ red.sum_y) * red.sum_y  # s_Y^T v = 0
    c = 0.25 + float(np.max(A_y @ v))  # then h = 0 is feasible if 1 >= 0 (it is)
    for positivity, bounds in (("atoms", None), ("cube", (red.min_y, red.max_y))):
        if positivity == "cube":
            c = 0.25 + float(np.sum(np.maximum(red.min_y * v, red.max_y * v)))
        step = solve_class_step(red.lam_y, red.cross[:, k], red.sum_y, red.n, n_i, model.reg, v, c,
                                positivity=positivity, A_y=A_y, bounds=bounds)
        reference = _cvxpy_step(red, k, n_i, v, c, model.reg, positivity, A_y=A_y, bounds=bounds)
        assert np.max(np.abs(step.h - reference)) < 1e-6 * max(1.0, np.max(np.abs(reference)))


def test_solver_failure_names_class_and_round(small_models):
    model = small_models[("atoms", "sample")]
    red = model.reductions_
    A_y = model.basis_y_.features(model.y_atoms_)
    # c = -1 with v = 0: A h <= -1 at every atom contradicts s_Y^T h = 0 (infeasible)
    with pytest.raises(RuntimeError, match=r"class 'test' failed in cutting-plane round \d+"):
        solve_class_step(red.lam_y, red.cross[:, 0], red.sum_y, red.n, red.lam_x[0], model.reg,
                         np.zeros(red.lam_y.size), -1.0, A_y=A_y, label="'test'")


# -- guarantees -------------------------------------------------------------------------------------------
def _check_guarantees(model: GreedyJDL, tol: float = 1e-9) -> float:
    classes, counts, n = model.basis_x_.classes, model.basis_x_.counts, model.n_samples_
    weights = model.conditional_weights(classes)
    assert np.max(np.abs(weights.sum(axis=1) - 1)) < 1e-10
    density = model.radon_nikodym(classes)  # 1 + h(c, y_j), (D, n)
    assert np.max(np.abs(density.sum(axis=1) / n - 1)) < 1e-10  # unnormalised mass is 1 as well
    assert weights.min() >= -1e-12 / n and density.min() >= -1e-10
    running = np.zeros(n)
    worst = -np.inf
    for step, value in enumerate(model.diagnostics_["class_order"]):
        k = int(np.flatnonzero(classes == value)[0])
        running += counts[k] / n * density[k]
        worst = max(worst, float(running.max()) - 1)
        assert running.max() <= 1 + tol
        assert np.isclose(running.max(), model.diagnostics_["running_max"][step], rtol=0, atol=1e-12)
    assert np.max(np.abs(running - 1)) < 1e-9  # after the last class: the Y marginal holds at every atom
    return worst


@pytest.mark.parametrize("variant", VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_normalized_positive_and_running_bound(small_models, variant):
    model = small_models[variant]
    worst = _check_guarantees(model)
    print(f"{variant}: max running excess over 1 at the atoms {worst:.2e}; min 1 + h {model.diagnostics_['min_density']:.2e}")
    if variant == ("cube", "global"):
        # whole-domain bounds: positivity and the running bound hold at every y, far outside the data
        grid = np.linspace(-25, 25, 20001)[:, None]
        values = 1 + model.basis_y_.features(grid) @ model.coef_  # (G, D)
        assert values.min() >= -1e-9
        running = np.zeros(grid.shape[0])
        classes, counts = model.basis_x_.classes, model.basis_x_.counts
        for value in model.diagnostics_["class_order"]:
            k = int(np.flatnonzero(classes == value)[0])
            running += counts[k] / model.n_samples_ * values[:, k]
            assert running.max() <= 1 + 1e-9


def test_laplace_kernel_and_multivariate_y():
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 3, 80).astype(np.float64)
    Y = np.column_stack([labels + rng.standard_normal(80), rng.standard_normal(80)])
    for positivity in ("atoms", "cube"):  # the Laplace kernel in 2-D is nearly full rank (m_Y ~ n)
        model = GreedyJDL(kernel_y=LaplaceKernel(2.0), reg=1e-4, tol=1e-3, positivity=positivity,
                          bounds="global").fit(labels[:, None], Y)
        _check_guarantees(model)
        assert model.conditional_expectation([0.0, 2.0]).shape == (2, 2)


# -- class order and unseen classes -------------------------------------------------------------------------
def test_class_order_changes_result_not_guarantees(small_data):
    labels, Y = small_data
    common = dict(kernel_y=GaussianKernel(0.4), reg=1e-4, tol=1e-6)
    by_value = GreedyJDL(**common).fit(labels, Y)
    by_count = GreedyJDL(**common, class_order="frequency").fit(labels, Y)
    explicit = GreedyJDL(**common, class_order=[5.0, 0.0, 2.0, 1.0]).fit(labels, Y)
    classes, counts = np.unique(labels, return_counts=True)
    expected = [float(c) for c in classes[np.lexsort((classes, -counts))]]
    assert by_value.diagnostics_["class_order"] == [0.0, 1.0, 2.0, 5.0]
    assert by_count.diagnostics_["class_order"] == expected != [0.0, 1.0, 2.0, 5.0]
    assert explicit.diagnostics_["class_order"] == [5.0, 0.0, 2.0, 1.0]
    for model in (by_value, by_count, explicit):
        _check_guarantees(model)
    assert np.max(np.abs(by_value.coef_ - by_count.coef_)) > 1e-3
    assert np.max(np.abs(by_value.coef_ - explicit.coef_)) > 1e-3
    # frequency ties are broken by ascending value
    order = class_order_indices("frequency", np.array([1.0, 2.0, 3.0]), np.array([5.0, 7.0, 5.0]))
    assert order.tolist() == [1, 0, 2]


def test_unseen_class_at_query_time(small_models):
    model = small_models[("atoms", "sample")]
    message = r"Xq: class 7\.0 was not seen in training; known classes: \[0\.0, 1\.0, 2\.0, 5\.0\]"
    with pytest.raises(ValueError, match=message):
        model.conditional_weights([0.0, 7.0])
    with pytest.raises(ValueError, match=message):
        model.conditional_expectation([7.0])
    with pytest.raises(ValueError, match=message):
        model.conditional_cdf([[7.0]], [0.0])
    with pytest.raises(ValueError, match=message):
        model.predict_proba([1.0, 7.0], classes=[0.0])
    with pytest.raises(ValueError, match="Xq: X has 2 features, but"):
        model.conditional_weights(np.zeros((2, 2)))


# -- accuracy on the thesis's E2 -------------------------------------------------------------------------------
def test_e2_conditional_cdfs_close_to_truth_and_to_full_jdl():
    labels, Y = e2_data(2000, seed=0)
    kernel, reg, tol = GaussianKernel(0.5), 1e-3, 1e-3
    started = time.perf_counter()
    greedy = GreedyJDL(kernel_y=kernel, reg=reg, tol=tol).fit(labels, Y)
    greedy_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with pytest.warns(DegeneracyWarning, match="near_marginal"):  # in E2, Y is N(0, 1) in every class
        full = JDL(kernel_x=DeltaKernel(), kernel_y=kernel, reg=reg, tol=tol).fit(labels, Y)
    full_seconds = time.perf_counter() - started
    classes = np.array([0.0, 1.0, 2.0])
    truth = norm.cdf(THRESHOLDS)[None, :]
    greedy_error = np.abs(greedy.conditional_cdf(classes, THRESHOLDS) - truth)
    full_error = np.abs(full.conditional_cdf(classes, THRESHOLDS) - truth)
    print(f"E2 n=2000: max |CDF - Phi| greedy {greedy_error.max():.4f} (mean {greedy_error.mean():.4f}, "
          f"{greedy_seconds:.2f} s), full JDL {full_error.max():.4f} (mean {full_error.mean():.4f}, {full_seconds:.2f} s)")
    assert greedy_error.max() < 0.06 and full_error.max() < 0.06
    assert greedy_error.mean() < 1.5 * full_error.mean() + 0.005
    _check_guarantees(greedy)


# -- state --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["frequency", [2.0, 0.0, 5.0, 1.0]], ids=["frequency", "explicit"])
def test_state_round_trip_is_bit_identical(small_data, order):
    labels, Y = small_data
    model = GreedyJDL(kernel_y=GaussianKernel(0.4), reg=1e-4, tol=1e-6, positivity="cube",
                      class_order=order).fit(labels, Y)
    state = model.state()
    m_y, D, n, M = model.coef_.shape[0], 4, labels.size, model.support_.size
    expected = {
        "coef": (m_y, D), "y_atoms": (n, 1), "x_classes": (D,), "x_counts": (D,), "x_trace_error": (D + 1,),
        "y_pivot_points": (m_y, 1), "y_coefficients": (m_y, m_y), "y_eigenvalues": (m_y,),
        "y_rotation": (m_y, m_y), "y_trace_error": (m_y + 1,), "reduction_lam_x": (D,), "reduction_lam_y": (m_y,),
        "reduction_cross": (m_y, D), "reduction_sum_x": (D,), "reduction_sum_y": (m_y,), "reduction_min_x": (D,),
        "reduction_max_x": (D,), "reduction_min_y": (m_y,), "reduction_max_y": (m_y,),
        "support_atoms": (M, 1), "support_weights": (M,),
        **{f"registered_{k}_{part}": shape for k in (0, 1)
           for part, shape in (("moments", (m_y, 1)), ("totals", (1,)), ("support", (M, 1)))},
    }
    assert {k: np.shape(v) for k, v in state["arrays"].items()} == expected
    assert state["kernel_x"] == {"name": "delta"}
    json.dumps({k: v for k, v in state.items() if k != "arrays"})  # everything else is JSON
    copy = GreedyJDL.from_state(json.loads(json.dumps({k: v for k, v in state.items() if k != "arrays"}))
                                | {"arrays": {k: np.array(v) for k, v in state["arrays"].items()}})
    assert isinstance(copy.basis_x_, ClassBasis)
    for fitted in (model, copy):
        fitted.register("square", lambda y: y**2)
    Xq = np.array([5.0, 0.0, 1.0, 2.0, 2.0])
    for query in (
        lambda m: m.conditional_weights(Xq), lambda m: m.conditional_expectation(Xq),
        lambda m: m.conditional_cdf(Xq, [-0.5, 0.0, 1.0]), lambda m: m.conditional_quantile(Xq, [0.1, 0.5, 0.9]),
        lambda m: m.expectation("square", Xq), lambda m: m.negative_mass(Xq), lambda m: m.radon_nikodym(Xq),
        lambda m: m.predict_proba(Xq, classes=np.sort(Y[:3, 0])),
    ):
        assert np.array_equal(query(model), query(copy))
    assert copy.get_params()["class_order"] == (order if isinstance(order, str) else list(order))
    assert copy.diagnostics_["running_max"] == model.diagnostics_["running_max"]
    bad = {**state, "kernel_x": {"name": "gaussian", "lengthscale": 1.0}}
    with pytest.raises(ValueError, match="delta kernel on X"):
        GreedyJDL.from_state(bad)


# -- bad input --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "labels", "Y", "message"),
    [
        ({}, np.zeros(10), np.arange(10.0), r"labels: need at least 2 classes, got 1"),
        ({}, np.r_[np.nan, np.arange(9.0) % 2], np.arange(10.0), r"labels: contains NaN"),
        ({}, np.arange(10.0) % 2, np.r_[np.inf, np.arange(9.0)], r"Y: contains NaN or inf"),
        ({}, np.arange(10.0) % 2, np.arange(9.0), r"labels and Y: must have the same number of rows, got 10 and 9"),
        ({}, np.zeros((10, 2)), np.arange(10.0), r"labels: must be one column"),
        ({"reg": 0.0}, np.arange(10.0) % 2, np.arange(10.0), r"reg: must be finite and > 0"),
        ({"reg": -1.0}, np.arange(10.0) % 2, np.arange(10.0), r"reg: must be finite and > 0"),
        ({"positivity": "grid"}, np.arange(10.0) % 2, np.arange(10.0), r"positivity: unknown value 'grid'"),
        ({"bounds": "data"}, np.arange(10.0) % 2, np.arange(10.0), r"bounds: unknown value 'data'"),
        ({"class_order": "random"}, np.arange(10.0) % 2, np.arange(10.0), r"class_order: unknown value 'random'"),
        ({"class_order": [0.0]}, np.arange(10.0) % 3, np.arange(10.0), r"class_order: misses class\(es\) \[1\.0, 2\.0\]"),
        ({"class_order": [0.0, 1.0, 4.0]}, np.arange(10.0) % 3, np.arange(10.0), r"class_order: class 4\.0 was not seen"),
        ({"class_order": [0.0, 1.0, 1.0, 2.0]}, np.arange(10.0) % 3, np.arange(10.0), r"class_order: class 1\.0 appears more"),
        ({"class_order": [[0.0, 1.0]]}, np.arange(10.0) % 2, np.arange(10.0), r"class_order: must be"),
        ({"kernel_y": "gaussian"}, np.arange(10.0) % 2, np.arange(10.0), r"kernel_y: must be a jdlcore Kernel"),
        ({}, np.array(["a", "b"] * 5), np.arange(10.0), r"labels: must be numeric"),
    ],
)
def test_bad_input(params, labels, Y, message):
    with pytest.raises(ValueError, match=message):
        GreedyJDL(**params).fit(labels, Y)
