"""``python -m nccldoctor.docs [--check] [--docs-dir DIR]``: write or verify the finding pages."""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

from nccldoctor.docs.build import DEFAULT_DOCS_DIR, catalogue, generate, stale_files, write_pages


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nccldoctor.docs",
        description="Write the field guide's finding pages (docs/findings/) from checks/.",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/ is out of date")
    parser.add_argument("--docs-dir", type=Path, default=DEFAULT_DOCS_DIR, help="the docs folder")
    args = parser.parse_args(argv)
    try:
        pages = generate(args.docs_dir, *catalogue())
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(f"nccldoctor.docs: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        stale = stale_files(args.docs_dir, pages)
        for path in stale:
            print(f"stale: {args.docs_dir / path}", file=sys.stderr)
        if stale:
            print("run `python -m nccldoctor.docs` and commit docs/", file=sys.stderr)
        return 1 if stale else 0
    for path in write_pages(args.docs_dir, pages):
        print(f"updated {args.docs_dir / path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
