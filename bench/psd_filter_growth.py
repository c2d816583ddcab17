"""The PSD filter with models fitted from data, against a bootstrap particle filter given the true ones.

The univariate growth model without its time-dependent cosine term (time-homogeneous):

    x_t = 0.5 x_t-1 + 25 x_t-1 / (1 + x_t-1^2) + v_t,  v_t ~ N(0, 10);    y_t = x_t^2 / 20 + w_t,  w_t ~ N(0, 1),

x_0 ~ N(0, 5). The transition tau(x' | x) and the observation omega(y | x) are fitted by
``fit_psd_conditional`` from ``--pairs`` pairs of a simulated chain (a different seed from the test
series), each on ``--centres`` centres; the filter compresses each belief onto ``--grid`` fixed points
on [-25, 25]. The particle filter (``--particles``, systematic resampling at every step) is given the
true densities. Figures per series of ``--steps`` steps: the RMSE of each filter's mean against the
state, their ratio, and the seconds per step; the median over ``--series`` series.

    python bench/psd_filter_growth.py [--series 5] [--steps 200] [--pairs 3000] [--centres 80]
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
from jdlcore import GaussianPSDModel, PSDFilter, fit_psd_conditional

STATE_NOISE, OBSERVATION_NOISE, PRIOR_VARIANCE = 10.0, 1.0, 5.0


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


def fitted_models(pairs: int, centres: int,
                  rng: np.random.Generator) -> tuple[GaussianPSDModel, GaussianPSDModel, dict]:
    states, ys = simulate(pairs + 1, rng)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tau = fit_psd_conditional(states[1:], states[:-1], m=centres, lengthscale_next=1.5, lengthscale=1.2, reg=1e-7,
                                  tol=1e-7)
        omega = fit_psd_conditional(ys, states, m=centres, lengthscale_next=0.7, lengthscale=0.8, reg=1e-7, tol=1e-7)
    record = {"fit_seconds": time.perf_counter() - started, "warnings": [str(w.message) for w in caught],
              **{f"{name}_{key}": model.fit_info_[key] for name, model in (("tau", tau), ("omega", omega))
                 for key in ("integral_mean", "integral_min", "integral_max", "iterations", "m")}}
    return tau, omega, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--centres", type=int, default=80)
    parser.add_argument("--grid", type=int, default=150)
    parser.add_argument("--particles", type=int, default=10_000)
    parser.add_argument("--out", default="psd_filter_growth", help="name of the JSON in bench/results/")
    args = parser.parse_args(argv)
    tau, omega, fits = fitted_models(args.pairs, args.centres, np.random.default_rng(1))
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
        row = {"series": series, "psd_rmse": float(np.sqrt(np.mean((psd - states) ** 2))),
               "pf_rmse": float(np.sqrt(np.mean((pf - states) ** 2))), "psd_step_seconds": psd_seconds,
               "pf_step_seconds": pf_seconds}
        row["ratio"] = row["psd_rmse"] / row["pf_rmse"]
        rows.append(row)
        print(f"series {series}: RMSE psd {row['psd_rmse']:.3f}, particles {row['pf_rmse']:.3f} (ratio "
              f"{row['ratio']:.3f}); a step {psd_seconds * 1e3:.1f} ms against {pf_seconds * 1e3:.1f} ms", flush=True)
    summary = {key: statistics.median(r[key] for r in rows) for key in ("ratio", "psd_rmse", "pf_rmse",
                                                                        "psd_step_seconds", "pf_step_seconds")}
    print(f"median ratio {summary['ratio']:.3f}; a step {summary['psd_step_seconds'] * 1e3:.1f} ms against "
          f"{summary['pf_step_seconds'] * 1e3:.1f} ms")
    print(f"-> {write_json(args.out, {'settings': vars(args), 'fits': fits, 'rows': rows, 'median': summary})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
