"""Plot crps_99 against the training rows, one panel per table, from the JSON of benchmark runs.

Reads any mix of ``bench/peers.py`` runs (rows with a ``table``) and ``bench/learning_curve.py`` runs
(the synthetic table with a known law; its oracle is drawn as a dashed line) and draws each model's
crps_99 per training size on a log axis.

    python bench/plot_learning_curves.py docs/results/peers.json docs/results/peers_large.json \
        docs/results/learning_curve.json docs/results/learning_curve_1e6.json \
        docs/results/peers_fine_tol.json docs/results/peers_200k_fine_tol.json \
        docs/results/peers_10k_100k_fine_tol.json docs/results/learning_curve_fine_tol.json \
        docs/results/learning_curve_1e6_fine_tol.json docs/results/peers_40k_auto.json \
        docs/results/peers_200k_auto.json docs/results/peers_large_auto.json \
        docs/results/learning_curve_auto.json docs/results/peers_40k_skew.json docs/results/peers_100k_skew.json \
        docs/results/peers_200k_skew.json docs/results/learning_curve_1e6_skew.json \
        --tables flights births "synthetic (known law)" --models jdl "jdl, columns alone" lightgbm qrf \
        --out docs/figures/learning_curves.png
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SYNTHETIC = "synthetic (known law)"


def curves(paths: list[str]) -> dict[str, dict[str, dict[int, float]]]:
    """{table: {model: {training rows: crps_99}}} over the runs' rows (a later run's figure wins)."""
    found: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        for row in json.loads(Path(path).read_text())["results"]:
            found[row.get("table", SYNTHETIC)][row["model"]][int(row["n_train"])] = float(row["crps_99"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="JSON files written by bench/peers.py or bench/learning_curve.py")
    parser.add_argument("--tables", nargs="+", help="the panels, in order (default: every table of the runs)")
    parser.add_argument("--models", nargs="+", help="the models drawn (default: all; the oracle is always drawn)")
    parser.add_argument("--out", default="docs/figures/learning_curves.png")
    args = parser.parse_args()
    found = curves(args.runs)
    tables = args.tables or sorted(found)
    figure, axes = plt.subplots(1, len(tables), figsize=(4.2 * len(tables), 3.6), squeeze=False)
    models = sorted({model for table in tables for model in found[table] if model != "oracle"})
    colours = {model: f"C{k}" for k, model in enumerate(models)}  # one colour per model in every panel
    for ax, table in zip(axes[0], tables):
        for model, points in sorted(found[table].items()):
            if args.models and model not in args.models and model != "oracle":
                continue
            if model == "oracle":
                ax.axhline(points[0], color="gray", linestyle="--", label="oracle (true quantiles)")
                continue
            sizes = sorted(points)
            if len(sizes) > 1:
                ax.plot(sizes, [points[n] for n in sizes], marker="o", label=model, color=colours[model],
                        linewidth=2.2 if model == "jdl" else 1.2)
        ax.set_xscale("log")
        ax.set_title(table, fontsize="medium")
        ax.set_xlabel("training rows")
        ax.set_ylabel("crps_99 on held-out rows")
        ax.legend(fontsize="small")
    figure.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
