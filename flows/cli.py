"""The ``jdl`` command line. Errors print as one line on stderr with a non-zero exit code."""
from __future__ import annotations

import argparse
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
