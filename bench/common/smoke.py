"""`--smoke`: each bench's tiny size, which `make test` runs (tests/bench/), so a change that
breaks a bench fails CI. A smoke run goes through every step of the real one in seconds; its
figures mean nothing."""

from __future__ import annotations

import argparse
from typing import Any


def add_smoke_option(parser: argparse.ArgumentParser, **sizes: Any) -> None:
    """`--smoke` sets these options (by their dest names) whatever else was given."""
    shown = ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in sizes.items())
    parser.add_argument("--smoke", action="store_true",
                        help=f"a tiny run for CI ({shown}); its figures mean nothing")
    parser.set_defaults(smoke_sizes=sizes)


def parse_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    if args.smoke:
        for name, value in args.smoke_sizes.items():
            setattr(args, name, value)
    return args
