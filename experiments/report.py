"""Plots and the markdown report of the paper's experiments, from the result Datasets.

``write_report(datasets, path)`` writes the report and, next to it, one PNG per (experiment part,
metric) in the style of the paper's figures: the mean over replicates and the 5 %-95 % band against
n, one panel per d. Every statement of the report is computed from the data: the claims of the paper
are checked cell by cell, and the count of cells where each holds is printed next to it.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from .data import RETURNS_SOURCE

__all__ = ["STRUCTURAL", "structural_checks", "claims", "write_report"]

LABELS = {"jdl": "JDL", "jdl_tightening": "JDL tightening (33)", "jdl_pointwise": "JDL pointwise (29)",
          "jdl_grid": "JDL grid positivity", "jpdl": "JPDL",
          "cme": "CME", "cme_constrained": "CME (53)+(54)", "klr": "KLR"}
TITLES = {"loss": "loss", "normalization_error": "max normalization error", "psd_failure": "share of non-PSD matrices",
          "negative_share": "share of negative values", "fit_time": "fit time (s)", "query_time": "query time (s)"}
STRUCTURAL = {"normalization": 1e-10, "grid": -1e-12}


def _mean(dataset, metric: str, method: str):
    return dataset[metric].sel({"method": method}).mean("replicate", skipna=True)


def _cells(dataset, *means) -> list[tuple[int, int]]:
    """The (n, d) cells where every one of ``means`` (arrays over n, d) is finite: cells run."""
    return [(int(n), int(d)) for n in dataset.n.values for d in dataset.d.values
            if all(np.isfinite(float(m.sel(n=n, d=d))) for m in means)]


def _worst(parts: dict, metric: str, methods: list[str]) -> tuple[float, str]:
    """The largest value of ``metric`` over ``methods`` and all cells, and where it occurs."""
    best, where = -np.inf, ""
    for part, ds in parts.items():
        present = [m for m in methods if m in ds.method.values]  # datasets of earlier runs may lack a method
        if not present:
            continue
        values = ds[metric].sel({"method": present})
        if not np.isfinite(values).any():
            continue
        top = values.where(values == values.max(skipna=True), drop=True)
        if float(values.max(skipna=True)) > best:
            best = float(values.max(skipna=True))
            where = "" if best == 0 else (f" at {part}, {str(top.method.values[0])}, n = {int(top.n.values[0]):,}, "
                                          f"d = {int(top.d.values[0])}")
    return best, where


def structural_checks(datasets: dict) -> dict[str, tuple[bool, str]]:
    """The structural claims a smoke run asserts: name -> (holds, evidence)."""
    out = {}
    moments = {part: ds for (kind, part), ds in datasets.items() if kind == "moments"}
    if moments:
        worst = _worst(moments, "normalization_error", ["jdl", "jdl_tightening", "jdl_pointwise", "jdl_grid"])
        out["JDL normalization error < 1e-10"] = (worst[0] < STRUCTURAL["normalization"], f"worst {worst[0]:.2e}{worst[1]}")
        for method, name in (("jdl_tightening", "JDL with the tightening (33)"),
                             ("jdl_pointwise", "JDL with the pointwise bounds (29)")):
            worst = _worst(moments, "psd_failure", [method])
            if np.isfinite(worst[0]):
                out[f"{name}: no non-PSD second-moment matrix at test x"] = (
                    worst[0] == 0.0, f"largest share {worst[0]:g}{worst[1]}")
        worst = _worst(moments, "negative_share", ["jdl_pointwise"])
        if np.isfinite(worst[0]):
            out["JDL with the pointwise bounds (29): no negative 1 + h at test x"] = (
                worst[0] == 0.0, f"largest share {worst[0]:g}{worst[1]}")
        for method, name in (("jdl_tightening", "JDL with the tightening (33)"),
                             ("jdl_pointwise", "JDL with the pointwise bounds (29)"), ("jdl_grid", "grid-positivity JDL")):
            measured = [ds.sel({"method": method}) for ds in moments.values() if method in ds.method.values]
            measured = [m for m in measured if np.isfinite(m["grid_minimum"]).any()]
            if not measured:
                continue
            smallest = min(float(m["grid_minimum"].min(skipna=True)) for m in measured)
            out[f"{name}: 1 + h >= 0 on the training grid"] = (
                smallest >= STRUCTURAL["grid"], f"smallest 1 + h {smallest:.3g}")
            train_psd = max(float(m["grid_train_psd_failure"].max(skipna=True)) for m in measured)
            out[f"{name}: no non-PSD second-moment matrix at the training x"] = (
                train_psd == 0.0, f"largest share {train_psd:g}")
    return out


def _count(flags: list[bool]) -> str:
    return f"holds in {sum(flags)} of {len(flags)} (n, d) cells"


def claims(datasets: dict) -> list[str]:
    """The paper's findings, each with the count of (n, d) cells where it holds and the numbers."""
    lines = []
    gaussian = datasets.get(("moments", "gaussian"))
    if gaussian is not None:
        loss = {m: _mean(gaussian, "loss", m) for m in ("jpdl", "jdl", "cme")}
        cells = _cells(gaussian, *loss.values())
        order = [bool(loss["jpdl"].sel(n=n, d=d) <= loss["jdl"].sel(n=n, d=d) <= loss["cme"].sel(n=n, d=d))
                 for n, d in cells]
        jdl_cme = [bool(loss["jdl"].sel(n=n, d=d) <= loss["cme"].sel(n=n, d=d)) for n, d in cells]
        jpdl_jdl = [bool(loss["jpdl"].sel(n=n, d=d) <= loss["jdl"].sel(n=n, d=d)) for n, d in cells]
        lines.append(f"- **JPDL <= JDL <= CME in second-moment loss (Gaussian):** {_count(order)}; "
                     f"JDL <= CME {_count(jdl_cme)}; JPDL <= JDL {_count(jpdl_jdl)}.")
        cme_norm = float(gaussian["normalization_error"].sel({"method": "cme"}).max(skipna=True))
        jdl_norm = float(gaussian["normalization_error"].sel({"method": "jdl"}).max(skipna=True))
        jpdl_norm = float(gaussian["normalization_error"].sel({"method": "jpdl"}).max(skipna=True))
        lines.append(f"- **CME is not normalized, JDL and JPDL are:** worst normalization error CME {cme_norm:.3g}, "
                     f"unconstrained JDL {jdl_norm:.1e}, JPDL {jpdl_norm:.1e} (rounding: E[1 | x] is a ratio "
                     "of two sums that are equal in exact arithmetic).")
        ratios = {m: (_mean(gaussian, "loss", m) / loss["jdl"]).median().item()
                  for m in ("jdl_tightening", "jdl_pointwise") if m in gaussian.method.values}
        if ratios:
            lines.append("- **What positivity guarantees cost in loss (Gaussian; not a claim of the paper):** median "
                         "over (n, d) cells of the mean loss relative to the unconstrained JDL: "
                         + ", ".join(f"{LABELS[m]} {r:.1f}x" for m, r in ratios.items()) + ".")
        per_d = ", ".join(f"d={int(d)}: CME {float(_mean(gaussian, 'psd_failure', 'cme').sel(d=d).max()):.4f} vs "
                          f"JDL {float(_mean(gaussian, 'psd_failure', 'jdl').sel(d=d).max()):.4f}"
                          for d in gaussian.d.values)
        lines.append(f"- **CME yields non-PSD moment matrices, mostly in 3-D** (largest mean share over n): {per_d}.")
    for (kind, part), ds in sorted(datasets.items()):
        if kind == "moments" and np.isfinite(ds["psd_failure"].sel({"method": "jdl_grid"})).any():
            fresh = _mean(ds, "psd_failure", "jdl_grid")
            worst = fresh.where(fresh == fresh.max()).dropna("n", how="all").dropna("d", how="all")
            tightening = float(_mean(ds, 'psd_failure', 'jdl_tightening').max())
            pointwise = (f"; the pointwise bounds (29), which hold at every x, "
                         f"{float(_mean(ds, 'psd_failure', 'jdl_pointwise').max()):.3f}"
                         if "jdl_pointwise" in ds.method.values else "")
            if float(fresh.max()) > 0:
                lines.append(f"- **Grid positivity holds at the training x only ({part}):** at fresh test x the "
                             f"grid-positivity JDL's share of non-PSD matrices reaches {float(fresh.max()):.3f} "
                             f"(n = {int(worst.n.values[0]):,}, d = {int(worst.d.values[0])}); the tightening (33)'s "
                             f"mean share reaches {tightening:.3f} (its bound also uses the training x){pointwise}.")
            else:
                lines.append(f"- **Grid-positivity JDL at fresh test x ({part}):** no non-PSD matrix; the "
                             f"tightening (33) none either ({tightening:.3f}){pointwise}.")
    cauchy = datasets.get(("moments", "cauchy"))
    if cauchy is not None:
        shares = {m: float(_mean(cauchy, "negative_share", m).mean()) for m in ("jdl", "jpdl", "cme")}
        fewest = min(shares, key=shares.get)
        tightening = float(_mean(cauchy, "negative_share", "jdl_tightening").mean())
        lines.append("- **JDL has the fewest negative Radon-Nikodym values (Cauchy):** mean shares "
                     + ", ".join(f"{LABELS[m]} {v:.4f}" for m, v in shares.items())
                     + f": {'holds' if fewest == 'jdl' else 'does not hold'} for the unconstrained fits (fewest: "
                     f"{LABELS[fewest]}); JDL with the tightening (33) has {tightening:.4f}.")
    for level in ("0.01", "0.05"):
        events = datasets.get(("classification", level))
        if events is None:
            continue
        jdl_c, klr = _mean(events, "loss", "jdl_tightening"), _mean(events, "loss", "klr")
        cells = _cells(events, jdl_c, klr)
        ratio = [float(jdl_c.sel(n=n, d=d) / klr.sel(n=n, d=d)) for n, d in cells]
        on_par = [abs(r - 1) <= 0.05 or r < 1 for r in ratio]
        lines.append(f"- **Constrained JDL on par with KLR ({float(level):.0%} event):** loss ratio JDL (33) / KLR "
                     f"from {min(ratio):.3f} to {max(ratio):.3f}; within 5 % or better {_count(on_par)}.")
        neg = {m: float(_mean(events, "negative_share", m).mean()) for m in ("jdl", "jdl_tightening", "cme",
                                                                            "cme_constrained")}
        lines.append(f"- **Constraints drive negative probabilities down ({float(level):.0%} event):** mean share "
                     + ", ".join(f"{LABELS[m]} {v:.4f}" for m, v in neg.items()) + ".")
    return lines


def _plot(dataset, metric: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = dataset.d.values
    figure, axes = plt.subplots(1, len(ds), figsize=(4.2 * len(ds), 3.4), squeeze=False)
    for axis, d in zip(axes[0], ds):
        for method in dataset.method.values:
            values = dataset[metric].sel({"method": method, "d": d})
            if not np.isfinite(values).any():
                continue
            n = dataset.n.values
            with warnings.catch_warnings():  # cells not run are all-NaN columns: left as gaps
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = values.mean("replicate", skipna=True)
                low, high = (values.quantile(q, "replicate", skipna=True) for q in (0.05, 0.95))
            axis.plot(n, mean, marker="o", label=LABELS.get(str(method), str(method)))
            axis.fill_between(n, low, high, alpha=0.15)
        axis.set(xscale="log", title=f"d = {int(d)}", xlabel="n")
        if metric in ("loss", "fit_time", "query_time") and np.nanmin(dataset[metric].values) > 0:
            axis.set_yscale("log")
    axes[0][0].set_ylabel(TITLES.get(metric, metric))
    axes[0][-1].legend(fontsize=7)
    figure.suptitle(f"{dataset.attrs['kind']} ({dataset.attrs['part']}): {TITLES.get(metric, metric)}, "
                    "mean and 5-95 % band")
    width = 4.2 * len(ds)  # margins in inches (tight_layout measured every tick label: a third of the report's time)
    figure.subplots_adjust(left=0.9 / width, right=1 - 0.15 / width, bottom=0.16, top=0.8, wspace=0.3)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _table(dataset, metric: str, reducer: str = "mean") -> list[str]:
    n_values = [int(n) for n in dataset.n.values]
    lines = []
    for d in dataset.d.values:
        lines += [f"d = {int(d)}", "", "| method | " + " | ".join(f"n = {n:,}" for n in n_values) + " |",
                  "|---|" + "---|" * len(n_values)]
        for method in dataset.method.values:
            values = dataset[metric].sel({"method": method, "d": d})
            cells = []
            for n in dataset.n.values:
                row = values.sel(n=n).values
                row = row[np.isfinite(row)]
                if row.size == 0:
                    cells.append("-")
                    continue
                centre = float(np.max(row) if reducer == "max" else np.median(row) if reducer == "median" else np.mean(row))
                cells.append(f"{centre:.3g} [{np.quantile(row, 0.05):.3g}, {np.quantile(row, 0.95):.3g}]"
                             if row.size > 1 and reducer == "mean" else f"{centre:.3g}")
            lines.append(f"| {LABELS.get(str(method), str(method))} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _cell_table(dataset) -> list[str]:
    """Per n: replicates run, cell wall time (median and total over d and replicates) and, where the
    cells record them, the factorisation ranks and the relative trace error they reached."""
    total = float(np.nansum(dataset["cell_time"].values))
    header = "| n | replicates | median cell time | total cell time |"
    ranked = "rank_x" in dataset and np.isfinite(dataset["rank_x"].values).any()
    if ranked:
        header += " ranks m_X / m_Y (median) | largest factor error |"
    lines = [f"{total:.0f} s of cell time in all.", "", header,
             "|" + "---|" * (header.count("|") - 1)]
    for n in dataset.n.values:
        times = dataset["cell_time"].sel(n=n).values
        run = np.isfinite(times)
        if not run.any():
            continue
        row = (f"| {int(n):,} | {int(run.sum(axis=1).max())} | {np.median(times[run]):.2f} s | "
               f"{np.sum(times[run]):.0f} s |")
        if ranked:
            ranks = [dataset[k].sel(n=n).values for k in ("rank_x", "rank_y")]
            errors = dataset["factor_error"].sel(n=n).values
            row += (" - |" if not np.isfinite(ranks[0]).any() else
                    f" {np.nanmedian(ranks[0]):.0f} / {np.nanmedian(ranks[1]):.0f} |")
            row += f" {np.nanmax(errors):.2g} |" if np.isfinite(errors).any() else " - |"
        lines.append(row)
    return lines + [""]


def write_report(datasets: dict, path: str | Path, command: str = "") -> Path:
    """Write the markdown report and its PNGs (next to it, in ``<stem>_figures/``); returns the path."""
    path = Path(path)
    figures = path.parent / f"{path.stem}_figures"
    figures.mkdir(parents=True, exist_ok=True)
    lines = ["# Reproducing Filipović, Multerer & Schneider, Sec. 5", "",
             f"Generated by `{command or 'jdl reproduce'}` from the result datasets (dims method, n, d, replicate). "
             "Tables show the mean over replicates with the 5 %-95 % range in brackets (max for normalization "
             "errors, median for times); `-` marks a cell not run.", ""]
    checks = structural_checks(datasets)
    if checks:
        lines += ["## Structural checks", ""]
        lines += [f"- {'PASS' if ok else 'FAIL'}: {name} ({evidence})" for name, (ok, evidence) in checks.items()]
        lines.append("")
    found = claims(datasets)
    if found:
        lines += ["## The paper's findings, checked", ""] + found + [""]
    for (kind, part), dataset in sorted(datasets.items()):
        lines += [f"## {kind}: {part}", ""]
        lines += _cell_table(dataset)
        if kind == "classification":
            lines += [f"Data: {RETURNS_SOURCE.get('content', '')} from `{RETURNS_SOURCE.get('package', '')}` "
                      f"({RETURNS_SOURCE.get('licence', '')}); {RETURNS_SOURCE.get('caveat', '')}", ""]
        metrics = [m for m in TITLES if m in dataset and np.isfinite(dataset[m].values).any()]
        for metric in metrics:
            figure = figures / f"{kind}-{part}-{metric}.png"
            _plot(dataset, metric, figure)
            reducer = "max" if metric == "normalization_error" else "median" if metric.endswith("_time") else "mean"
            lines += [f"### {TITLES[metric]}", "", f"![{kind} {part} {metric}]({os.path.relpath(figure, path.parent)})", ""]
            lines += _table(dataset, metric, reducer)
    path.write_text("\n".join(lines) + "\n")
    return path
