"""Every leaf command of Determined 0.38.1's `det`, read from the client's own argparse tree.

docs/DETERMINED_USERS.md gives each `det` command a status; the tree comes from the real client,
not a copy, so a command the client has and the table lacks is found. Determined's packages must
not be imported into Epochal's environment, so `command_tree` runs this same file with the
Determined venv's python, where `_main` builds the parser the way `determined.cli.cli.main` does.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
from pathlib import Path


def command_tree(det_bin: Path) -> list[str]:
    """Leaf command paths ("experiment set gc-policy"), sorted, of the `det` in `det_bin`."""
    done = subprocess.run([str(det_bin / "python"), "-I", __file__], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"walking det's parser failed ({done.returncode}):\n{done.stderr}")
    return done.stdout.splitlines()


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[str]:
    """Leaf command paths under `parser`, each under its primary name.

    argparse files a subparser under its name and then each alias, all as the same parser object,
    so the first name seen for a parser is the primary one. The `help` subcommand that
    Determined's `add_args` puts in every group is argparse plumbing, not a command.
    """
    subactions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subactions:
        return [" ".join(prefix)]
    leaves: list[str] = []
    seen: set[int] = set()
    for action in subactions:
        for name, sub in action.choices.items():
            if name == "help" or id(sub) in seen:
                continue
            seen.add(id(sub))
            leaves.extend(leaf_commands(sub, (*prefix, name)))
    return leaves


def _main() -> None:
    """In the Determined venv: print the leaves of the parser `det` builds (not `det deploy`'s
    own tree, which `det` loads only for `deploy` and which needs Determined's deployment extras).
    """
    det_cli = importlib.import_module("determined.cli.cli")
    parser = det_cli.make_parser()
    importlib.import_module("determined.cli").add_args(parser, det_cli.all_args_description)
    print("\n".join(sorted(leaf_commands(parser))))


if __name__ == "__main__":
    _main()
