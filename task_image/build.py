"""Build Epochal's default task image offline (cached by content hash).

    python -m task_image.build [--print-tag]

Prints the image's tag on its last line. See task_image/image.py for how.
"""

from __future__ import annotations

import argparse
import logging
import sys

from task_image import image as task_image


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m task_image.build",
                                description="Build Epochal's default task image offline.")
    p.add_argument("--print-tag", action="store_true",
                   help="print the tag this installation's task image has, build nothing")
    args = p.parse_args(argv)
    if args.print_tag:
        print(task_image.task_image_tag())
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        result = task_image.build(say=say)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    how = "already built" if result.cached else "built"
    say(f"{result.tag}: {how} in {result.seconds:.1f} s, {result.size_bytes / 1e6:.0f} MB")
    print(result.tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
