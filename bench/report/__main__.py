"""Command line: ``python -m bench.report SOURCE -o reports/NAME.html`` (or ``-o reports``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import HeadbenchError
from bench.report import build_report


def main(argv: list[str] | None = None) -> None:
    """Build one report."""
    description = "Build the self-contained HTML report of a results or multirun directory."
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=description)
    parser.add_argument("source", help="results dir (results.parquet/.csv) or a multirun dir")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        help="HTML file to write, or a directory to write <source name>.html in "
        "(default: reports/<source name>.html)",
    )
    parser.add_argument("--title", help="page title")
    args = parser.parse_args(argv)
    out = args.out or Path("reports")
    if args.out is None or out.is_dir():  # a directory, as `tables -o` takes: the default name
        out = out / f"{Path(args.source).name}.html"
    try:
        print(f"wrote {build_report(args.source, out, args.title)}")
    except (FileNotFoundError, HeadbenchError, ValueError) as err:  # names the file and why
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
