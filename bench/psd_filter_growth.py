"""The PSD filter with models fitted from data, against a bootstrap particle filter given the true ones.

The univariate growth model without its time-dependent cosine term (time-homogeneous):

    x_t = 0.5 x_t-1 + 25 x_t-1 / (1 + x_t-1^2) + v_t,  v_t ~ N(0, 10);    y_t = x_t^2 / 20 + w_t,  w_t ~ N(0, 1),

x_0 ~ N(0, 5). The transition tau(x' | x) and the observation omega(y | x) are fitted from ``--pairs``
pairs of a simulated chain (a different seed from the test series), each on ``--centres`` centres, by
``tune_psd_conditional``: the lengthscales are chosen from a 3 x 3 grid by the least-squares conditional
loss on a held-out quarter of the pairs (``--grid-tau``, ``--grid-omega``: lengthscales of x' or y,
then of x), the best refitted on all pairs. The filter compresses each belief onto ``--grid`` fixed points
on [-25, 25]. The particle filter (``--particles``, systematic resampling at every step) is given the
true densities; so is the exact filter on an 801-point grid, the reference that shows how much of a
difference between two filters' errors is the series' own luck. Figures per series of ``--steps``
steps: the RMSE of each filter's mean against the state, the PSD filter's ratio to the particle
filter's, and the seconds per step; then the median ratio and the ratio of the RMSEs pooled over the
``--series`` series.

    python bench/psd_filter_growth.py [--series 10] [--steps 200] [--pairs 3000] [--centres 80]
        [--grid 150] [--particles 10000] [--out psd_filter_growth]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import jdlcore  # noqa: F401  (first: it sets OpenBLAS's idle-thread wait)
import numpy as np

from _common import write_json
from jdlcore import GaussianPSDModel, PSDFilter, tune_psd_conditional

STATE_NOISE, OBSERVATION_NOISE, PRIOR_VARIANCE = 10.0, 1.0, 5.0
FIT = dict(regs=[1e-7], tol=1e-7, max_iter=4000)  # each candidate's and the refit's reg and FISTA


def drift(x: np.ndarray) -> np.ndarray:
    return 0.5 * x + 25.0 * x / (1.0 + x * x)


def simulate(steps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(states (steps,), observations (steps,)) from x_0 ~ N(0, PRIOR_VARIANCE)."""
    x, states = rng.normal(0.0, np.sqrt(PRIOR_VARIANCE)), np.empty(steps)
    for t in range(steps):
        x = drift(x) + np.sqrt(STATE_NOISE) * rng.standard_normal()
        states[t] = x
    return states, states**2 / 20.0 + np.sqrt(OBSERVATION_NOISE) * rng.standard_normal(steps)


def particle_filter(ys: np.ndarray, particles: int, rng: np.random.Generator) -> np.ndarray:
    """The bootstrap filter's means (steps,), the true transition and observation densities."""
    x = rng.normal(0.0, np.sqrt(PRIOR_VARIANCE), particles)
    means = np.empty(ys.size)
    for t, y in enumerate(ys):
        x = drift(x) + np.sqrt(STATE_NOISE) * rng.standard_normal(particles)
        log_w = -0.5 * (y - x * x / 20.0) ** 2 / OBSERVATION_NOISE
        w = np.exp(log_w - log_w.max())
        w /= w.sum()
        means[t] = w @ x
        positions = (rng.random() + np.arange(particles)) / particles  # systematic resampling
        x = x[np.minimum(np.searchsorted(np.cumsum(w), positions), particles - 1)]
    return means


def exact_filter(ys: np.ndarray, points: int = 801) -> np.ndarray:
    """The filter's means (steps,) on a grid of ``points`` on [-40, 40], the true densities."""
    grid = np.linspace(-40.0, 40.0, points)
    transition = np.exp(-0.5 * (grid[:, None] - drift(grid)[None, :]) ** 2 / STATE_NOISE)
    belief = np.exp(-0.5 * grid**2 / PRIOR_VARIANCE)
    means = np.empty(ys.size)
    for t, y in enumerate(ys):
        belief = (transition @ belief) * np.exp(-0.5 * (y - grid**2 / 20.0) ** 2 / OBSERVATION_NOISE)
        belief /= belief.sum()
        means[t] = belief @ grid
    return means


def fitted_models(pairs: int, centres: int, grids: dict[str, list[float]],
                  rng: np.random.Generator) -> tuple[GaussianPSDModel, GaussianPSDModel, dict]:
    states, ys = simulate(pairs + 1, rng)
    started = time.perf_counter()
    models, record = {}, {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, (first, second) in (("tau", (states[1:], states[:-1])), ("omega", (ys, states))):
            grid = grids[name]
            models[name], table = tune_psd_conditional(first, second, lengthscales_next=grid[:3],
                                                       lengthscales=grid[3:], m=centres, **FIT)
            record[f"{name}_grid"] = table
            record.update({f"{name}_{key}": models[name].fit_info_[key] for key in (
                "chosen", "on_grid_edge", "validation_loss", "integral_mean", "integral_min", "integral_max",
                "iterations", "m")})
    record.update(fit_seconds=time.perf_counter() - started, warnings=[str(w.message) for w in caught])
    return models["tau"], models["omega"], record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--centres", type=int, default=80)
    parser.add_argument("--grid-tau", type=float, nargs=6, default=[2.0, 3.0, 4.5, 0.7, 1.0, 1.5],
                        help="three lengthscales of x', then three of x")
    parser.add_argument("--grid-omega", type=float, nargs=6, default=[0.7, 1.0, 1.4, 0.5, 0.8, 1.2],
                        help="three lengthscales of y, then three of x")
    parser.add_argument("--grid", type=int, default=150)
    parser.add_argument("--particles", type=int, default=10_000)
    parser.add_argument("--out", default="psd_filter_growth", help="name of the JSON in bench/results/")
    args = parser.parse_args(argv)
    tau, omega, fits = fitted_models(args.pairs, args.centres, {"tau": args.grid_tau, "omega": args.grid_omega},
                                     np.random.default_rng(1))
    print(f"chose tau {fits['tau_chosen']}, omega {fits['omega_chosen']}")
    print(f"fitted tau and omega in {fits['fit_seconds']:.1f} s; int tau dx' over the training x: "
          f"{fits['tau_integral_mean']:.3f} ({fits['tau_integral_min']:.3f}-{fits['tau_integral_max']:.3f}), "
          f"int omega dy: {fits['omega_integral_mean']:.3f}", flush=True)
    prior = GaussianPSDModel(np.eye(1), np.zeros((1, 1)), np.sqrt(2 * PRIOR_VARIANCE))  # k^2: N(0, PRIOR_VARIANCE)
    ffilter = PSDFilter(tau, omega, prior, compress_to=np.linspace(-25.0, 25.0, args.grid)[:, None])
    rows = []
    for series in range(args.series):
        rng = np.random.default_rng(100 + series)
        states, ys = simulate(args.steps, rng)
        started = time.perf_counter()
        psd = ffilter.run(ys).means[:, 0]
        psd_seconds = (time.perf_counter() - started) / args.steps
        started = time.perf_counter()
        pf = particle_filter(ys, args.particles, rng)
        pf_seconds = (time.perf_counter() - started) / args.steps
        exact = exact_filter(ys)
        row = {"series": series, **{f"{name}_rmse": float(np.sqrt(np.mean((means - states) ** 2)))
                                    for name, means in (("psd", psd), ("pf", pf), ("exact", exact))},
               "psd_step_seconds": psd_seconds, "pf_step_seconds": pf_seconds}
        row["ratio"] = row["psd_rmse"] / row["pf_rmse"]
        rows.append(row)
        print(f"series {series}: RMSE psd {row['psd_rmse']:.3f}, particles {row['pf_rmse']:.3f} (ratio "
              f"{row['ratio']:.3f}), exact grid {row['exact_rmse']:.3f}; a step {psd_seconds * 1e3:.1f} ms against "
              f"{pf_seconds * 1e3:.1f} ms", flush=True)
    summary = {key: statistics.median(r[key] for r in rows) for key in (
        "ratio", "psd_rmse", "pf_rmse", "exact_rmse", "psd_step_seconds", "pf_step_seconds")}
    pooled = {name: float(np.sqrt(np.mean([r[f"{name}_rmse"] ** 2 for r in rows]))) for name in ("psd", "pf", "exact")}
    summary.update(pooled_rmse=pooled, pooled_ratio=pooled["psd"] / pooled["pf"],
                   pooled_exact_ratio=pooled["exact"] / pooled["pf"])
    print(f"median ratio {summary['ratio']:.3f}, pooled {summary['pooled_ratio']:.3f} (the exact grid filter's "
          f"{summary['pooled_exact_ratio']:.3f}); a step {summary['psd_step_seconds'] * 1e3:.1f} ms against "
          f"{summary['pf_step_seconds'] * 1e3:.1f} ms")
    print(f"-> {write_json(args.out, {'settings': vars(args), 'fits': fits, 'rows': rows, 'median': summary})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
