"""The importer's pieces that need no cluster: batches within the target's limits, the plain
progress lines CI gets without a terminal, and the command's refusals of bad options."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from cli.client import CliError
from cli.history_import import Bars, batches, prefetched
from cli.main import app


def test_batches_hold_at_most_count_items_and_about_size_bytes() -> None:
    items = [{"n": f"{i:03}", "pad": "x" * 100} for i in range(25)]
    by_count = list(batches(items, 10))
    assert [len(b) for b in by_count] == [10, 10, 5]
    assert [i for b in by_count for i in b] == items
    one = len(json.dumps(items[0], separators=(",", ":")))
    by_size = list(batches(items, 100, size=one * 3))
    assert {len(b) for b in by_size[:-1]} == {3}
    huge = [{"pad": "y" * 1000}]
    assert list(batches(huge, 10, size=10)) == [huge]  # an item above the size goes alone


def test_prefetched_keeps_the_order_and_hands_over_the_readers_error() -> None:
    assert list(prefetched(iter(range(100)), depth=2)) == list(range(100))

    def failing() -> Iterator[int]:
        yield 1
        raise CliError("the source failed")

    got = []
    with pytest.raises(CliError, match="the source failed"):
        for item in prefetched(failing()):
            got.append(item)
    assert got == [1]
    endless = prefetched(itertools.count())
    assert [next(endless) for _ in range(3)] == [0, 1, 2]
    endless.close()  # a consumer that stops early does not hang on the reader


def test_without_a_terminal_each_stage_says_a_line() -> None:
    out = io.StringIO()
    with Bars(out, every=3600) as bars:
        bars.start("users")
        bars.advance("users", 3)
        bars.finish("users")
        bars.start("experiments", 4)
        bars.advance("experiments", 4)
        bars.finish("experiments")
    assert out.getvalue().splitlines() == ["users: 3 done", "experiments: 4/4 done"]


@pytest.mark.parametrize(("args", "said"), [
    (["--since", "yesterday"], "--since 'yesterday' is not a time"),
    (["--since", "2026-01-01T00:00:00"], "has no time zone"),
    (["--parallel", "0"], "--parallel must be 1 to 16"),
    (["--master", "http://127.0.0.1:8080"], "the source and the target are the same master"),
])
def test_bad_options_are_refused_before_anything_is_read(args: list[str], said: str) -> None:
    argv = ["-m", "http://127.0.0.1:8080", "import", "determined"]
    if "--master" not in args:
        argv += ["--master", "http://127.0.0.1:1"]
    result = CliRunner().invoke(app, [*argv, *args], env={"DET_PASS": "x"})
    assert result.exit_code == 2, result.output
    assert said in result.output
