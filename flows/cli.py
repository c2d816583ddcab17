"""The ``jdl`` command line. Errors print as one line on stderr with a non-zero exit code."""
from __future__ import annotations

import argparse
import os
import sys


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    report = run_demo(n=args.rows, seed=args.seed)
    print("\n".join(report.lines()))
    return 0


def _columns(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one column")
    return names


def _stage(args: argparse.Namespace) -> int:
    from pipeline.staging import open_staged, stage

    out = stage(args.source, args.out, args.x, args.y, chunk_size=args.chunk_size, overwrite=args.overwrite)
    group = open_staged(out)
    print(f"staged {group.attrs['n_samples']:,} rows: x {group.attrs['x_features']}, y {group.attrs['y_features']} -> {out}")
    return 0


_SCHEDULER_HELP = ("where to run: auto (default: an embedded Dask cluster above 200,000 rows), memory, local "
                   "(embedded Dask cluster) or tcp://HOST:PORT; environment variable JDL_SCHEDULER")


def _progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def _fit(args: argparse.Namespace) -> int:
    from pipeline.fitting import fit_store

    path, model = fit_store(
        args.data, args.out, lengthscale_x=args.lengthscale_x, lengthscale_y=args.lengthscale_y, reg=args.reg,
        tol=args.tol, constraints=args.constraints, positivity=args.positivity, pivoting=args.pivoting,
        seed=args.seed, scheduler=args.scheduler, overwrite=args.overwrite, progress=_progress,
    )
    d = model.diagnostics_
    print(f"fitted n = {model.n_samples_:,}: m_X = {d['rank_x']}, m_Y = {d['rank_y']}, objective {d['objective']:.6g}, "
          f"fit {d['fit_seconds']:.1f}s, write {d['write_seconds']:.1f}s -> {path}")
    return 0


def _score(args: argparse.Namespace) -> int:
    from pipeline.scoring import score_store

    path = score_store(args.model, args.data, args.out, args.function, overwrite=args.overwrite,
                       scheduler=args.scheduler, progress=_progress)
    print(f"scored {', '.join(args.function)} -> {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jdl", description="Adaptive joint distribution learning at scale.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="fit a JDL model to a synthetic heteroscedastic data set and report")
    demo.add_argument("--rows", type=int, default=20_000, help="number of samples (default 20000)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.set_defaults(run=_demo)
    stage = commands.add_parser("stage", help="validate a CSV/Parquet/NumPy/NetCDF/zarr table into a zarr data store")
    stage.add_argument("source", help="source file (.csv, .parquet, .npy, .npz, .nc, .zarr)")
    stage.add_argument("--x", type=_columns, required=True, help="comma-separated input columns (numbers for .npy)")
    stage.add_argument("--y", type=_columns, required=True, help="comma-separated output columns")
    stage.add_argument("--out", required=True, help="the zarr store to write")
    stage.add_argument("--chunk-size", type=int, default=65_536, help="rows per chunk (default 65536)")
    stage.add_argument("--overwrite", action="store_true", help="replace an existing store")
    stage.set_defaults(run=_stage)
    fit = commands.add_parser("fit", help="fit a JDL model on a staged data store and write a model store")
    fit.add_argument("data", help="staged data store (from jdl stage)")
    fit.add_argument("--out", required=True, help="the model store to write")
    fit.add_argument("--lengthscale-x", type=float, required=True, help="Gaussian kernel lengthscale on x")
    fit.add_argument("--lengthscale-y", type=float, required=True, help="Gaussian kernel lengthscale on y")
    fit.add_argument("--reg", type=float, default=1e-4, help="regularisation lambda (default 1e-4)")
    fit.add_argument("--tol", type=float, default=1e-3, help="relative pivoted-Cholesky tolerance (default 1e-3)")
    fit.add_argument("--constraints", default="positivity", help="none | normalization | positivity (default)")
    fit.add_argument("--positivity", default="auto",
                     help="auto (default: grid up to 20,000 rows, tightening above) | grid | tightening | clip")
    fit.add_argument("--pivoting", default="random", help="random (default) | greedy")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--scheduler", default=os.environ.get("JDL_SCHEDULER", "auto"), help=_SCHEDULER_HELP)
    fit.add_argument("--overwrite", action="store_true", help="replace an existing store")
    fit.set_defaults(run=_fit)
    score = commands.add_parser("score", help="score a staged data store with a model store")
    score.add_argument("model", help="model store (from jdl fit)")
    score.add_argument("data", help="staged data store")
    score.add_argument("--out", required=True, help="the scores store to write")
    score.add_argument("--function", action="append", default=[], required=True,
                       help="mean | second_moment | cdf:t1,t2,... | quantile:l1,l2,... (repeatable)")
    score.add_argument("--scheduler", default=os.environ.get("JDL_SCHEDULER", "auto"), help=_SCHEDULER_HELP)
    score.add_argument("--overwrite", action="store_true", help="replace an existing store")
    score.set_defaults(run=_score)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, RuntimeError) as error:
        print(f"jdl {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
