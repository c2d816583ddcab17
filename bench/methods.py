"""Every method of jdlcore on the same 1e5-point data set: accuracy, structure and time.

Data: (x, y) bivariate Gaussian, rho = 0.8, n = 1e5 points split 4:1 into training and validation
(the paper's split), plus 5,000 fresh test points. Each method's reg is chosen on the validation
set (the loss of its task) from a small grid, with the kernel factorisations shared across reg;
the table reports the chosen fit on the test set against the exact conditional law
Y | x ~ N(rho x, 1 - rho^2):

- loss (40): relative second-moment loss of E[Y^2 | x] (the paper's Sec. 5.1 metric);
- mean RMSE of E[Y | x]; normalization error max |E[1 | x] - 1|;
- negative share: share of negative weights (Radon-Nikodym values 1 + h, or CME weights; below
  -1e-12, so rounding does not count) at 500 test x over all atoms;
- event: P(Y <= q | x) for q the 5% quantile of the training y, mean absolute error against the truth
  and the clipped logistic loss (41) on the test events (KLR is fitted for this event only);
- fit (factorisations + solve for the chosen reg) and query (5,000 second moments) times.

A second block discretises x into D = 10 classes (deciles) and compares the greedy JDL with the full
JDL (delta kernel on x) and CME on the same data: CDF errors at -0.3, -0.2, -0.1 (the thesis's test
functions) against the exact class conditionals, normalization, negative weights, fit time.

    python bench/methods.py [--n 100000] [--quick]
"""
from __future__ import annotations

import argparse

import numpy as np
from scipy import integrate, stats

from _common import write_json
from jdlcore import (
    CME, JDL, KLR, DeltaKernel, Factorisation, GaussianKernel, GreedyJDL, PolynomialJDL, build_problem,
)
from jdlcore.conditional.losses import clipped_logistic_loss, relative_second_moment_loss
from experiments.metrics import negative_share, normalization_error, timed  # the report's metrics

RHO = 0.8
SIGMA = np.sqrt(1 - RHO**2)
LENGTHSCALE = 0.5


def gaussian(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    return x[:, None], (RHO * x + SIGMA * rng.standard_normal(n))[:, None]


def second_moments(model, X: np.ndarray) -> np.ndarray:
    return model.conditional_expectation(X, lambda y: y**2)[:, 0]


def evaluate(name: str, model, fit_seconds: float, test: tuple, q: float) -> dict:
    Xt, Yt = test
    truth2 = (RHO * Xt[:, 0]) ** 2 + SIGMA**2
    event_truth = stats.norm.cdf((q - RHO * Xt[:, 0]) / SIGMA)
    events = (Yt[:, 0] <= q).astype(float)
    row = {"method": name, "fit_seconds": fit_seconds}
    if not model.answers("conditional_expectation"):  # a classifier (KLR): its event probability only
        probability = model.conditional_cdf(Xt, [q])[:, 0]
    else:
        m2, query = timed(lambda: second_moments(model, Xt))
        row.update({
            "loss_40": relative_second_moment_loss(m2[:, None, None], truth2[:, None, None]),
            "mean_rmse": float(np.sqrt(np.mean((model.conditional_expectation(Xt)[:, 0] - RHO * Xt[:, 0]) ** 2))),
            "normalization_error": normalization_error(model, Xt),
            "negative_share": negative_share(model, Xt[:500]),
            "query_seconds": query,
        })
        probability = model.conditional_cdf(Xt, [q])[:, 0]
    row["event_mae"] = float(np.mean(np.abs(probability - event_truth)))
    row["event_logloss_41"] = clipped_logistic_loss(probability, events)
    return row


def choose(models: dict, validation: tuple, loss) -> tuple:
    """The (reg, model) with the smallest validation loss."""
    scored = [(loss(model, *validation), reg, model) for reg, model in models.items()]
    best = min(scored, key=lambda item: (not np.isfinite(item[0]), item[0]))
    return best[1], best[2]


def moment_loss(model, X, Y) -> float:
    return relative_second_moment_loss(second_moments(model, X)[:, None, None], (Y[:, 0] ** 2)[:, None, None],
                                       pooled=True)


def continuous_block(n: int, regs: list[float], quick: bool) -> list[dict]:
    X, Y = gaussian(n, seed=1)
    split = 4 * n // 5
    train, validation = (X[:split], Y[:split]), (X[split:], Y[split:])
    test = gaussian(5000, seed=2)
    q = float(np.quantile(train[1], 0.05))
    kx, ky = GaussianKernel(LENGTHSCALE), GaussianKernel(LENGTHSCALE)
    problem, factor_seconds = timed(lambda: build_problem(*train, kx, ky, Factorisation(tol=1e-3)))
    print(f"factorisations: m_X = {problem.basis_x.size}, m_Y = {problem.basis_y.size}, {factor_seconds:.2f} s")
    rows = []

    def on_problem(name: str, make):
        fits = {reg: timed(lambda: make(reg))[::-1] for reg in regs}  # reg -> (seconds, model)
        reg, (seconds, model) = choose({r: f for r, f in fits.items()}, validation,
                                       lambda f, X_, Y_: moment_loss(f[1], X_, Y_))
        rows.append({**evaluate(name, model, factor_seconds + seconds, test, q), "reg": reg})
        print(rows[-1])

    for label, constraints, positivity in [("JDL unconstrained", "none", "grid"),
                                           ("JDL normalization", "normalization", "grid"),
                                           ("JDL tightening (33)", "positivity", "tightening"),
                                           ("JDL pointwise (29)", "positivity", "pointwise"),
                                           ("JDL clip", "positivity", "clip")]:
        on_problem(label, lambda reg: JDL(kx, ky, reg=reg, tol=1e-3, constraints=constraints,
                                          positivity=positivity).fit_problem(problem, train[1]))
    for label, constraints in [("CME unconstrained", "none"), ("CME (53)", "normalization"),
                               ("CME (53)+(54)", "positivity")]:
        on_problem(label, lambda reg: CME(kx, ky, reg=reg, tol=1e-3, constraints=constraints).fit_problem(problem))
    for label, constraints in [("JPDL q=4 normalization", "normalization"), ("JPDL q=4 SOS", "positivity")]:
        fits = {reg: timed(lambda: PolynomialJDL(degree=4, reg=reg, constraints=constraints).fit(*train))[::-1]
                for reg in regs}
        reg, (seconds, model) = choose(fits, validation, lambda f, X_, Y_: moment_loss(f[1], X_, Y_))
        rows.append({**evaluate(label, model, seconds, test, q), "reg": reg})
        print(rows[-1])
    klr_regs = regs if quick else [1e-3, 1e-1, 1e1]
    fits = {reg: timed(lambda: KLR(kx, reg=reg, tol=1e-3, threshold=q).fit(*train))[::-1] for reg in klr_regs}
    reg, (seconds, model) = choose(fits, validation, lambda f, X_, Y_: clipped_logistic_loss(
        f[1].event_probability(X_), (Y_[:, 0] <= q).astype(float)))
    rows.append({**evaluate("KLR (event y <= q5%)", model, seconds, test, q), "reg": reg})
    print(rows[-1])
    return rows


def class_truth(edges: np.ndarray, thresholds: list[float]) -> np.ndarray:
    """P(Y <= t | x in bin k) for x ~ N(0, 1) cut at ``edges``, shape (D, T), by quadrature."""
    out = np.empty((edges.size - 1, len(thresholds)))
    for k in range(edges.size - 1):
        a, b = edges[k], edges[k + 1]
        mass = stats.norm.cdf(b) - stats.norm.cdf(a)
        for j, t in enumerate(thresholds):
            value, _ = integrate.quad(lambda x: stats.norm.pdf(x) * stats.norm.cdf((t - RHO * x) / SIGMA), a, b)
            out[k, j] = value / mass
    return out


def discrete_block(n: int, reg: float) -> list[dict]:
    X, Y = gaussian(n, seed=3)
    edges = np.concatenate([[-np.inf], stats.norm.ppf(np.linspace(0.1, 0.9, 9)), [np.inf]])
    labels = np.digitize(X[:, 0], edges[1:-1]).astype(float)[:, None]
    thresholds = [-0.3, -0.2, -0.1]
    truth = class_truth(edges, thresholds)
    classes = np.arange(10.0)[:, None]
    ky = GaussianKernel(LENGTHSCALE)
    rows = []
    candidates = [
        ("greedy JDL, atoms", lambda: GreedyJDL(ky, reg=reg, tol=1e-3, positivity="atoms")),
        ("greedy JDL, cube (thesis)", lambda: GreedyJDL(ky, reg=reg, tol=1e-3, positivity="cube")),
        ("JDL delta kernel, normalization", lambda: JDL(DeltaKernel(), ky, reg=reg, tol=1e-3,
                                                        constraints="normalization")),
        ("JDL delta kernel, clip", lambda: JDL(DeltaKernel(), ky, reg=reg, tol=1e-3, positivity="clip")),
        ("CME delta kernel", lambda: CME(DeltaKernel(), ky, reg=reg, tol=1e-3)),
    ]
    for name, make in candidates:
        model, seconds = timed(lambda: make().fit(labels, Y))
        cdf = model.conditional_cdf(classes, thresholds)
        rows.append({"method": name, "fit_seconds": seconds, "cdf_max_error": float(np.max(np.abs(cdf - truth))),
                     "cdf_mean_error": float(np.mean(np.abs(cdf - truth))),
                     "normalization_error": normalization_error(model, classes),
                     "negative_share": negative_share(model, classes)})
        print(rows[-1])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="n = 5,000 and fewer reg values (a smoke run)")
    args = parser.parse_args()
    n = 5000 if args.quick else args.n
    regs = [1e-6, 1e-4] if args.quick else [1e-7, 1e-6, 1e-5, 1e-4, 1e-3]
    continuous = continuous_block(n, regs, args.quick)
    discrete = discrete_block(n, 1e-6)
    path = write_json("methods", {"n": n, "rho": RHO, "lengthscale": LENGTHSCALE, "continuous": continuous,
                                  "discrete": discrete})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
