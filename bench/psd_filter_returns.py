"""The PSD filter on a real series: the volatility of daily stock returns, learned and then filtered.

Data (the ``reproduce`` extra, offline): the daily returns of the 20 S&P 500 stocks that skfolio ships,
1990-2022; the series is their equally weighted portfolio's return r_t, in percent. The state is the
log of the 20-day realised volatility, v_t = log sqrt(mean of r_t-19..t squared), and the observation
of day t is the next day's return, read on a scale that grows like its logarithm in the tails,
y_t = asinh(r_t+1 / c) with c the median absolute return of the training days (a fixed monotone map:
the law of the return given v is a fan, narrow at low volatility and wide at high, which one
lengthscale in y resolves badly; after the map its width varies far less). On the first ``--train``
days both are known, and the model is learned from pairs:

    tau(v' | v)    from the pairs (v_t, v_t-1),       omega(y | v)    from the pairs (y_t, v_t),

each by ``tune_psd_conditional`` (a 4 x 4 grid of lengthscales, in units of each variable's standard
deviation, chosen by the held-out least-squares conditional loss; ``--centres-tau`` and ``--centres``
centres). On the days after, the filter sees only the returns: p(v_t | y_..t) is filtered from the returns alone,
each belief compressed onto ``--grid`` fixed points, and the one-step predictive law of the next
return comes in closed form (its density in r: that of y times dy/dr = 1 / sqrt(r^2 + c^2)).

Figures on the test days: the filtered mean of v against the realised v (correlation and RMSE) and
the coverage of the filtered 90% band. The filter is never given v; v_t is a function of the last 20
returns, which it has seen (and its belief at t has seen r_t+1 too), so this measures how well the
learned model reads the volatility off the returns, not the recovery of an unobservable state. Then
the predictive law of each return scored by its log density (normalised), beside two plug-in normal
laws: N(0, the realised variance of the last 20 returns seen), and N(0, the training days' mean
square). Writes a figure (``--figure``) and ``bench/results/psd_filter_returns.json``.

    cd bench && python psd_filter_returns.py [--train 6000] [--centres-tau 60] [--centres 40] [--grid 60]
        [--figure ../docs/figures/psd_filter_returns.png]
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import jdlcore  # noqa: F401  (first: it sets OpenBLAS's idle-thread wait)
import numpy as np

from _common import write_json
from jdlcore import GaussianPSDModel, PSDFilter, tune_psd_conditional

WINDOW = 20  # days of the realised volatility
MULTIPLIERS = (0.1, 0.2, 0.4, 0.8)  # the lengthscales tried, in standard deviations of each variable
FIT = dict(regs=[1e-7], tol=1e-7, max_iter=4000)
FIGURE = Path(__file__).resolve().parents[1] / "docs/figures/psd_filter_returns.png"


def series() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dates (T,), r (T,) the portfolio's returns in percent, v (T,) log realised volatility, NaN for
    the first WINDOW - 1 days)."""
    from experiments.data import daily_returns

    dates, returns, _ = daily_returns()
    r = 100.0 * returns.mean(axis=1)
    squares = np.convolve(r**2, np.ones(WINDOW) / WINDOW, mode="full")[: r.size]
    v = 0.5 * np.log(squares)
    v[: WINDOW - 1] = np.nan
    return dates, r, v


def learn(first: np.ndarray, state: np.ndarray, centres: int) -> tuple[GaussianPSDModel, dict]:
    """tau or omega from pairs (first, state), its lengthscales chosen on the grid of multiples."""
    model, table = tune_psd_conditional(first, state, lengthscales_next=[k * first.std() for k in MULTIPLIERS],
                                        lengthscales=[k * state.std() for k in MULTIPLIERS], m=centres, **FIT)
    keys = ("chosen", "on_grid_edge", "validation_loss", "integral_mean", "integral_min", "integral_max",
            "iterations", "seconds")
    return model, {"grid": table, **{key: model.fit_info_[key] for key in keys}}


def normal_log_density(y: np.ndarray, variance: np.ndarray) -> np.ndarray:
    return -0.5 * (np.log(2.0 * np.pi * variance) + y**2 / variance)


def run_filter(ffilter: PSDFilter, ys: np.ndarray) -> dict[str, np.ndarray]:
    """Filter ys (T,) (``PSDFilter.run``): the filtered mean and 5% / 95% quantiles of v, and the
    normalised predictive log density of each y (the evidence less the log of the predictive law's mass,
    omega's y-integral under the prediction, about 1; the caller adds the map's log Jacobian for the
    density of r)."""
    result = ffilter.run(ys, levels=(0.05, 0.95))
    return {"mean": result.means[:, 0], "low": result.quantiles[:, 0, 0], "high": result.quantiles[:, 0, 1],
            "log_score": result.log_evidence - np.log(result.predicted_mass)}


def plot(path: Path, dates: np.ndarray, v: np.ndarray, filtered: dict[str, np.ndarray], r: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    vol = lambda values: np.exp(values) * np.sqrt(252.0)  # noqa: E731  (annualised volatility, percent)
    top.fill_between(dates, vol(filtered["low"]), vol(filtered["high"]), color="tab:blue", alpha=0.25,
                     label="filtered 90% band")
    top.plot(dates, vol(filtered["mean"]), color="tab:blue", lw=1, label="filtered (mean of log volatility)")
    top.plot(dates, vol(v), color="black", lw=0.8, label="realised 20-day volatility (not seen by the filter)")
    top.set_ylabel("annualised volatility, %")
    top.set_yscale("log")
    top.legend(loc="upper left", fontsize=8)
    bottom.plot(dates, r, color="grey", lw=0.5)
    bottom.set_ylabel("portfolio return, %")
    fig.suptitle("PSD filter of the volatility of daily returns, from the returns alone (test days)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=6000, help="days the models are learned on")
    parser.add_argument("--centres", type=int, default=40, help="of omega")
    parser.add_argument("--centres-tau", type=int, default=60, help="of tau (a narrow ridge along v' = v)")
    parser.add_argument("--grid", type=int, default=60)
    parser.add_argument("--figure", default=str(FIGURE))
    parser.add_argument("--out", default="psd_filter_returns", help="name of the JSON in bench/results/")
    args = parser.parse_args(argv)
    dates, r, v = series()
    train = np.arange(WINDOW, args.train)  # days t with v_t-1, v_t and r_t+1 inside the training span
    scale = float(np.median(np.abs(r[train + 1])))  # c of the map y = asinh(r / c)
    y = np.arcsinh(r / scale)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tau, tau_info = learn(v[train], v[train - 1], args.centres_tau)
        omega, omega_info = learn(y[train + 1], v[train], args.centres)
    fit_seconds = time.perf_counter() - started
    print(f"learned tau (lengthscales {tau_info['chosen']}) and omega ({omega_info['chosen']}) in {fit_seconds:.0f} s; "
          f"int tau dv' over the training v: {tau_info['integral_mean']:.3f}, int omega dy: "
          f"{omega_info['integral_mean']:.3f}", flush=True)
    test = np.arange(args.train, r.size - 1)  # filtered days t; each observes y_t = r_t+1
    low, high = np.quantile(v[train], [0.001, 0.999])
    span = high - low
    prior_sd = float(np.std(v[train]))
    prior = GaussianPSDModel(np.eye(1), np.array([[float(np.mean(v[train]))]]), np.sqrt(2.0) * prior_sd)
    ffilter = PSDFilter(tau, omega, prior, compress_to=np.linspace(low - 0.2 * span, high + 0.2 * span, args.grid))
    started = time.perf_counter()
    filtered = run_filter(ffilter, y[test + 1])
    filtered["log_score"] -= 0.5 * np.log(r[test + 1] ** 2 + scale**2)  # the density of r: times dy/dr
    step_seconds = (time.perf_counter() - started) / test.size
    truth = v[test]
    realised_variance = np.exp(2.0 * v[test])  # of r_t-19..t: known before r_t+1 is seen
    scores = {"psd_filter": float(np.mean(filtered["log_score"])),
              "normal_realised_variance": float(np.mean(normal_log_density(r[test + 1], realised_variance))),
              "normal_training_variance": float(np.mean(normal_log_density(r[test + 1], np.mean(r[train + 1] ** 2))))}
    days = {"train": [str(dates[train[0]]), str(dates[train[-1]])], "test": [str(dates[test[0]]), str(dates[test[-1]])],
            "test_days": int(test.size)}
    record = {
        "settings": vars(args), "days": days, "observation_scale": scale,
        "fit_seconds": fit_seconds, "tau": tau_info, "omega": omega_info, "step_seconds": step_seconds,
        "state_correlation": float(np.corrcoef(filtered["mean"], truth)[0, 1]),
        "state_rmse": float(np.sqrt(np.mean((filtered["mean"] - truth) ** 2))),
        "band_coverage_90": float(np.mean((filtered["low"] <= truth) & (truth <= filtered["high"]))),
        "mean_log_score": scores, "warnings": [str(w.message) for w in caught],
    }
    print(f"{test.size} test days ({record['days']['test'][0]} to {record['days']['test'][1]}), "
          f"{step_seconds * 1e3:.1f} ms a step: filtered log volatility against the realised one: correlation "
          f"{record['state_correlation']:.3f}, RMSE {record['state_rmse']:.3f}, 90% band coverage "
          f"{record['band_coverage_90']:.3f}")
    print("mean log predictive density of the next return: " + ", ".join(f"{k} {s:.4f}" for k, s in scores.items()))
    plot(Path(args.figure), dates[test], truth, filtered, r[test])
    print(f"-> {write_json(args.out, record)}, {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
