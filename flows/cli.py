"""The ``jdl`` command line. Errors print as one line on stderr with a non-zero exit code."""
from __future__ import annotations

import argparse
import sys


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    report = run_demo(n=args.rows, seed=args.seed)
    print("\n".join(report.lines()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jdl", description="Adaptive joint distribution learning at scale.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="fit a JDL model to a synthetic heteroscedastic data set and report")
    demo.add_argument("--rows", type=int, default=20_000, help="number of samples (default 20000)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.set_defaults(run=_demo)
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
