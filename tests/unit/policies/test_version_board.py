from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

from policies.version_board import VersionBoard


def _raise_many(path: str, start: int) -> None:
    board = VersionBoard(Path(path))
    for version in range(start, 400, 2):
        board.raise_to(version)


def test_a_new_board_is_private_and_reads_zero(tmp_path: Path) -> None:
    board = VersionBoard(tmp_path / "p" / "policy.db-version")
    assert board.version() == 0
    assert stat.S_IMODE(os.stat(board.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(board.path.parent).st_mode) == 0o700


def test_a_raise_is_seen_at_once_through_another_mapping_and_never_lowers(tmp_path: Path) -> None:
    one, two = VersionBoard(tmp_path / "b"), VersionBoard(tmp_path / "b")
    one.raise_to(5)
    assert two.version() == 5
    two.raise_to(3)  # an older change published late
    assert one.version() == two.version() == 5
    assert VersionBoard(tmp_path / "b").version() == 5  # a process opening it later


def test_processes_raising_at_once_leave_the_highest(tmp_path: Path) -> None:
    path = str(tmp_path / "b")
    VersionBoard(Path(path))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_raise_many, args=(path, start)) for start in (1, 2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert VersionBoard(Path(path)).version() == 399


def test_settle_lowers_only_the_value_it_saw(tmp_path: Path) -> None:
    board = VersionBoard(tmp_path / "b")
    board.raise_to(9)
    board.settle(seen=8, stored=4)  # someone raised it to 9 after the 8 was read: keep it
    assert board.version() == 9
    board.settle(seen=9, stored=4)  # the store really went back to 4
    assert board.version() == 4
