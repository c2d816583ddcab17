"""The line each ``jdl`` command prints when its flow has run: what was written, read back from the
store (``result``: the flow's ``StageResult``; ``args``: the command's arguments)."""
from __future__ import annotations

import argparse

__all__ = ["staged", "tuned", "fitted", "scored", "compressed"]


def staged(args: argparse.Namespace, result: dict) -> str:
    from pipeline.staging import categorical_levels, open_staged

    group = open_staged(result["path"])
    levels = categorical_levels(group)
    categorical = ("; categorical: " + ", ".join(f"{name} ({len(known)} levels)" for name, known in levels.items())
                   if levels else "")
    dropped = group.attrs.get("dropped_missing_y")
    dropped = f" ({dropped:,} rows with a missing y left out)" if dropped else ""
    gaps = dict(group.attrs.get("missing_x") or {})
    gaps = ("; missing x values: " + ", ".join(f"{name} ({count:,} rows)" for name, count in gaps.items())
            if gaps else "")
    y = f"y {group.attrs['y_features']}" if group.attrs["y_features"] else "no y (a batch to score)"
    return (f"staged {group.attrs['n_samples']:,} rows{dropped}: x {group.attrs['x_features']}, "
            f"{y}{categorical}{gaps} -> {result['path']}")


def tuned(args: argparse.Namespace, result: dict) -> str:
    import json

    from pipeline.tuning import load_tuning, scored_candidates, tuned_summaries

    table = load_tuning(result["path"])
    best = json.loads(table.attrs["best"])
    setting = ", ".join(f"{name} = {numbers(best[name])}" for name in ("lengthscale_x", "lengthscale_y", "reg"))
    size, scored = table["validation_loss"].size, scored_candidates(table)
    count = f"{size}" if scored == size else f"{scored} of {size}"
    folds = int(table.attrs.get("folds", 1))
    on = f"{table.attrs['rows_used']:,} rows" + (f" ({folds} folds)" if folds > 1 else "")
    summaries = tuned_summaries(table)
    alone = " alone (no x column)" if table.attrs.get("summaries_alone", False) else ""
    standardised = (", y standardised by the median and spread" if table.attrs.get("summaries_standardise_y", False)
                    else "")
    with_summaries = f" with x summaries {', '.join(summaries)}{alone}{standardised}" if summaries else ""
    return (f"tuned {count} candidates on {on}{with_summaries}: best {setting}, "
            f"validation {table.attrs['criterion']} {best['score']:.5g} -> {result['path']}")


def numbers(value: float | list[float]) -> str:
    """A number, or a list of them (one per feature), to 4 significant digits."""
    return "[" + ", ".join(f"{v:.4g}" for v in value) + "]" if isinstance(value, list) else f"{value:.4g}"


def fitted(args: argparse.Namespace, result: dict) -> str:
    """The fit's line, then a warning line per degeneracy the fit recorded."""
    from pipeline.model_store import load_model

    model = load_model(result["path"])
    d = model.diagnostics_
    ranks = ", ".join(f"m_{side.upper()} = {d[f'rank_{side}']}" for side in ("x", "y") if f"rank_{side}" in d)
    objective = f", objective {d['objective']:.6g}" if "objective" in d else ""
    law = f", law {d['law']} on M = {d['support_size']} support atoms" if "support_size" in d else ""
    version = f" (version {model.store_version_})" if model.store_version_ else ""
    line = (f"fitted {args.method} on n = {model.n_samples_:,}: {ranks}{objective}{law}, fit {d['fit_seconds']:.1f}s "
            f"-> {result['path']}{version}")
    return "\n".join([line] + [f"warning: {kind}: {message}" for kind, message in d.get("degeneracies", {}).items()])


def evaluated(args: argparse.Namespace, result: dict) -> str:
    from pipeline.evaluation import open_evaluation

    ds = open_evaluation(result["path"])
    coverage = ", ".join(f"{nominal:.0%} -> {observed:.1%}"
                         for nominal, observed in zip(ds["nominal"].values, ds["coverage"].values))
    return (f"evaluated {ds.attrs['n_samples']:,} rows: CRPS {float(ds['crps_mean']):.4g}, "
            f"RMSE {float(ds['rmse']):.4g}, pinball {float(ds['pinball'].mean()):.4g} "
            f"(mean of {ds.sizes['level']} levels); coverage {coverage} "
            f"-> {result['path']} (figure {ds.attrs['figure']})")


def scored(args: argparse.Namespace, result: dict) -> str:
    import json

    from jdlcore.conditional.laws import FAILED, LEVELS
    from pipeline.scoring import open_scores

    attrs = open_scores(result["path"]).attrs
    version = attrs.get("model_version")
    scored = f"scored {', '.join(args.function)}{f' with model version {version}' if version else ''}"
    lines = [f"{scored} -> {result['path']}"]
    counts = {int(level): count for level, count in json.loads(attrs.get("projection_levels", "{}")).items()}
    if any(level < attrs.get("projection_full_level", 2) for level in counts):  # some row lost a moment
        total = sum(counts.values())
        lines.append("projection: " + ", ".join(f"{counts[level]:,} of {total:,} rows kept {LEVELS[level]}"
                                                for level in sorted(counts, reverse=True) if level > FAILED))
    if counts.get(FAILED):
        lines.append(f"warning: projection_failed: {counts[FAILED]:,} rows are at level {FAILED}: {LEVELS[FAILED]}; "
                     "they got the nearest probability vector at a lower level (docs/positivity.md)")
    return "\n".join(lines)


def compressed(args: argparse.Namespace, result: dict) -> str:
    from pipeline.compression import open_compressed

    c = open_compressed(result["path"]).attrs["compression"]
    return (f"compressed n = {c['n_data']:,} to m = {c['m']} with {c['method']}: {c['objective']} objective "
            f"{c['initial_value']:.6g} -> {c['value']:.6g} (reg {c['reg']:.3g}, {c['reg_from']}), AMCMD "
            f"{c['amcmd']:.4g} (random subsample {c['amcmd_random']:.4g}), {c['seconds']:.1f}s -> {result['path']}")
