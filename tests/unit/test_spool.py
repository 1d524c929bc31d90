"""harness.spool.SpoolQueue: FIFO across memory and disk, its bound, and its file."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.spool import SpoolQueue


def test_items_come_back_in_order_across_memory_and_disk(tmp_path: Path) -> None:
    queue = SpoolQueue(memory_items=3, max_bytes=10_000, directory=tmp_path, name="t")
    for i in range(10):
        assert queue.put({"i": i})
    assert len(queue) == 10 and queue.on_disk == 7
    assert list(tmp_path.iterdir())  # created when the first item spilled
    first = queue.peek(4)
    queue.drop(len(first))
    assert queue.put({"i": 10})  # queued behind what is on disk
    seen = [item["i"] for item in first]
    while len(queue):
        batch = queue.peek(4)
        seen += [item["i"] for item in batch]
        queue.drop(len(batch))
    assert seen == list(range(11))
    assert not list(tmp_path.iterdir())  # drained: the file is gone


def test_nothing_spills_while_memory_has_room(tmp_path: Path) -> None:
    queue = SpoolQueue(memory_items=5, max_bytes=0, directory=tmp_path)
    assert all(queue.put(i) for i in range(5))
    assert not queue.put(5)  # no disk allowed: the bound is reached
    assert queue.peek(10) == [0, 1, 2, 3, 4] and not list(tmp_path.iterdir())


def test_the_bound_counts_the_bytes_on_disk(tmp_path: Path) -> None:
    queue = SpoolQueue(memory_items=1, max_bytes=20, directory=tmp_path)
    assert queue.put("first")  # memory
    assert queue.put("x" * 10)  # 13 bytes of JSON line on disk
    assert not queue.put("y" * 10)  # 13 more would pass 20
    assert len(queue) == 2 and queue.disk_bytes == 13
    queue.drop(len(queue.peek(2)))
    assert queue.disk_bytes == 0 and queue.put("y" * 10)  # room again once read back


def test_the_file_is_private_and_close_removes_it(tmp_path: Path) -> None:
    queue = SpoolQueue(memory_items=1, max_bytes=1_000, directory=tmp_path / "spool")
    queue.put(1)
    queue.put(2)
    [path] = (tmp_path / "spool").iterdir()
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "spool").stat().st_mode & 0o777 == 0o700
    queue.close()
    assert not path.exists() and len(queue) == 0


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        SpoolQueue(memory_items=0, max_bytes=1)
