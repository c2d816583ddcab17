"""The conditional PSD fit (jdlcore.psd.conditional_fit): its objective against a quadrature, the law it
learns against a known one, and the filter with fitted models against the Kalman filter."""
import warnings

import numpy as np
import pytest

from jdlcore import PSDFilter
from jdlcore.psd.conditional_fit import conditional_loss, fit_psd_conditional, tune_psd_conditional
from jdlcore.psd.model import GaussianPSDModel
from jdlcore.solvers.fista import ConvergenceWarning

GRID = np.linspace(-10.0, 10.0, 4001)
STEP = GRID[1] - GRID[0]


def integrate(values):
    """The trapezoid rule on GRID along the last axis."""
    return STEP * (values.sum(axis=-1) - 0.5 * (values[..., 0] + values[..., -1]))


def ar1_pairs(n, rho=0.7, noise=0.5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, noise / np.sqrt(1 - rho**2), n)
    return rho * x + noise * rng.standard_normal(n), x


def test_the_objective_equals_its_definition_by_quadrature():
    """J = (1/n) sum_s int tau(x', x_s)^2 dx' - (2/n) sum_s tau(x'_s, x_s) + reg Tr(A K A K), with the
    integral over x' by the trapezoid rule on a fine grid."""
    x_next, x = ar1_pairs(150)
    reg = 1e-4
    with warnings.catch_warnings():  # the objective's identity holds at any A the solver returns
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = fit_psd_conditional(x_next, x, m=12, lengthscale_next=0.5, lengthscale=0.6, reg=reg, max_iter=300)
    squares = np.array([integrate(model(np.column_stack([GRID, np.full(GRID.size, s)])) ** 2) for s in x])
    C, eta = model.centers, model.eta
    joint = np.exp(-sum(eta[t] * (C[:, t, None] - C[None, :, t]) ** 2 for t in range(2)))
    regulariser = np.trace(model.A @ joint @ model.A @ joint)
    expected = squares.mean() - 2.0 * model(np.column_stack([x_next, x])).mean() + reg * regulariser
    assert model.fit_info_["objective"] == pytest.approx(expected, rel=1e-9)


def test_the_held_out_loss_equals_its_definition_by_quadrature():
    """conditional_loss on pairs the fit did not see: (1/n) sum_s int tau(x', x_s)^2 dx' - (2/n) sum_s
    tau(x'_s, x_s) by the trapezoid rule; on the training pairs it is the objective less reg Tr(AKAK)."""
    x_next, x = ar1_pairs(150)
    held_next, held = ar1_pairs(60, seed=7)
    reg = 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = fit_psd_conditional(x_next, x, m=12, lengthscale_next=0.5, lengthscale=0.6, reg=reg, max_iter=300)
    squares = np.array([integrate(model(np.column_stack([GRID, np.full(GRID.size, s)])) ** 2) for s in held])
    expected = squares.mean() - 2.0 * model(np.column_stack([held_next, held])).mean()
    assert conditional_loss(model, held_next, held) == pytest.approx(expected, rel=1e-9)
    C, eta = model.centers, model.eta
    joint = np.exp(-sum(eta[t] * (C[:, t, None] - C[None, :, t]) ** 2 for t in range(2)))
    on_training = model.fit_info_["objective"] - reg * np.trace(model.A @ joint @ model.A @ joint)
    assert conditional_loss(model, x_next, x) == pytest.approx(on_training, rel=1e-9)
    with pytest.raises(ValueError, match="the model is over 2 coordinates"):
        conditional_loss(model, np.c_[held_next, held_next], held)


def test_the_tuning_chooses_by_the_held_out_loss_and_refits_on_every_pair():
    """A grid with a lengthscale far too short for x' = 0.7 x + 0.5 e: the held-out loss rejects it,
    the table is the grid in order, and the returned model is the chosen point refitted on all pairs."""
    x_next, x = ar1_pairs(800, seed=3)
    options = dict(m=15, max_iter=2000, tol=1e-7)
    model, table = tune_psd_conditional(x_next, x, lengthscales_next=[0.02, 0.35], lengthscales=[0.5], regs=[1e-6],
                                        **options)
    assert [row["lengthscale_next"] for row in table] == [0.02, 0.35]
    assert table[1]["loss"] < table[0]["loss"]
    assert model.fit_info_["chosen"] == {"lengthscale_next": 0.35, "lengthscale": 0.5, "reg": 1e-6}
    assert model.fit_info_["on_grid_edge"] == ["lengthscale_next"]  # the grid's largest: the best may lie beyond
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        refit = fit_psd_conditional(x_next, x, lengthscale_next=0.35, lengthscale=0.5, reg=1e-6, **options)
    np.testing.assert_array_equal(model.A, refit.A)
    with pytest.raises(ValueError, match="validation: the held-out share"):
        tune_psd_conditional(x_next, x, lengthscales_next=[0.35], lengthscales=[0.5], validation=1.0)
    with pytest.raises(ValueError, match="regs: the grid needs at least one value"):
        tune_psd_conditional(x_next, x, lengthscales_next=[0.35], lengthscales=[0.5], regs=[])


def test_it_learns_a_known_conditional_law():
    """x' = 0.7 x + 0.5 e: the fitted tau(. | x) integrates to about 1 over the data's range, and its
    mean and spread are the law's."""
    x_next, x = ar1_pairs(2000, seed=1)
    model = fit_psd_conditional(x_next, x, m=30, lengthscale_next=0.35, lengthscale=0.5, reg=1e-7)
    info = model.fit_info_
    assert 0.9 < info["integral_mean"] < 1.1
    for at in (-1.0, 0.0, 1.0):
        density = model(np.column_stack([GRID, np.full(GRID.size, at)]))
        mass = integrate(density)
        mean = integrate(GRID * density) / mass
        sd = np.sqrt(integrate((GRID - mean) ** 2 * density) / mass)
        assert abs(mass - 1.0) < 0.1 and abs(mean - 0.7 * at) < 0.1 and abs(sd - 0.5) < 0.1, (at, mass, mean, sd)


def kalman(ys, rho, q, r, prior_mean, prior_var):
    """The exact filter of x_t = rho x_t-1 + N(0, q), y_t = x_t + N(0, r): means and variances."""
    mean, var, out = prior_mean, prior_var, []
    for y in ys:
        mean, var = rho * mean, rho**2 * var + q
        gain = var / (var + r)
        mean, var = mean + gain * (y - mean), (1 - gain) * var
        out.append((mean, var))
    return np.array(out)


def test_the_filter_with_fitted_models_tracks_the_kalman_filter():
    """A linear Gaussian state-space model, the transition and the observation fitted from 3,000
    simulated pairs each (30 centres): over 100 steps the PSD filter's means stay within 0.3 times the
    Kalman filter's own error of the exact filtered means (measured 0.16), and its error against the
    state is within 10% of the Kalman filter's (measured +3.7%)."""
    rho, q, r = 0.8, 0.25, 0.5
    rng = np.random.default_rng(4)
    stationary = q / (1 - rho**2)
    x_prev = rng.normal(0.0, np.sqrt(stationary), 3000)
    tau = fit_psd_conditional(rho * x_prev + np.sqrt(q) * rng.standard_normal(3000), x_prev, m=30,
                              lengthscale_next=0.35, lengthscale=0.5, reg=1e-7, tol=1e-7)
    x_obs = rng.normal(0.0, np.sqrt(stationary), 3000)
    omega = fit_psd_conditional(x_obs + np.sqrt(r) * rng.standard_normal(3000), x_obs, m=30,
                                lengthscale_next=0.45, lengthscale=0.5, reg=1e-7, tol=1e-7)
    prior = GaussianPSDModel(np.eye(1), np.zeros((1, 1)), np.sqrt(stationary))  # k^2: N(0, stationary / 2)
    states, ys, x = [], [], rng.normal(0.0, np.sqrt(stationary / 2))
    for _ in range(100):
        x = rho * x + np.sqrt(q) * rng.standard_normal()
        states.append(x)
        ys.append(x + np.sqrt(r) * rng.standard_normal())
    states = np.array(states)
    exact = kalman(ys, rho, q, r, 0.0, stationary / 2)
    result = PSDFilter(tau, omega, prior, compress_to=np.linspace(-4.5, 4.5, 41)[:, None]).run(ys)
    kalman_error = np.sqrt(np.mean((exact[:, 0] - states) ** 2))
    psd_error = np.sqrt(np.mean((result.means[:, 0] - states) ** 2))
    assert np.sqrt(np.mean((result.means[:, 0] - exact[:, 0]) ** 2)) < 0.3 * kalman_error
    assert psd_error < 1.10 * kalman_error, (psd_error, kalman_error)


def test_bad_input_is_refused_by_name():
    x_next, x = ar1_pairs(50)
    with pytest.raises(ValueError, match=r"^X_next: has 49 rows but X has 50"):
        fit_psd_conditional(x_next[:49], x, lengthscale_next=0.5, lengthscale=0.5)
    with pytest.raises(ValueError, match=r"^reg"):
        fit_psd_conditional(x_next, x, lengthscale_next=0.5, lengthscale=0.5, reg=-1.0)
    with pytest.raises(ValueError, match=r"^m: must be >= 1"):
        fit_psd_conditional(x_next, x, m=0, lengthscale_next=0.5, lengthscale=0.5)
