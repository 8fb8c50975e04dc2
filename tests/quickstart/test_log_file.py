"""The quickstart's log files are bounded: ``RotatingLogFile`` at its limit, one over it, across
restarts, with text UTF-8 cannot encode, and under concurrent writers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from appliance.quickstart.log_file import RotatingLogFile


def test_a_write_that_reaches_the_limit_exactly_stays_in_the_file(tmp_path: Path) -> None:
    with RotatingLogFile(tmp_path / "runner.log", max_bytes=10) as log:
        log.write("12345\n")
        log.write("abc\n")  # 10 bytes: at the limit, not past it
        log.flush()
        assert log.rotations == 0
    assert (tmp_path / "runner.log").read_text() == "12345\nabc\n"
    assert not (tmp_path / "runner.log.1").exists()


def test_one_byte_over_the_limit_starts_a_new_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    with RotatingLogFile(tmp_path / "runner.log", max_bytes=10) as log:
        log.write("12345\n")
        log.write("abcd\n")  # 11 bytes: would pass the limit
        assert log.rotations == 1
    assert (tmp_path / "runner.log.1").read_text() == "12345\n"
    assert (tmp_path / "runner.log").read_text() == "abcd\n"


def test_only_one_predecessor_is_kept_so_the_disk_used_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "worker.log"
    with RotatingLogFile(path, max_bytes=100) as log:
        for i in range(1_000):
            log.write(f"line {i:04d}\n")  # 10 bytes each
        assert log.rotations == 99
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker.log", "worker.log.1"]
    assert path.read_text().splitlines()[-1] == "line 0999"
    assert (tmp_path / "worker.log.1").read_text().splitlines()[-1] == "line 0989"
    assert path.stat().st_size <= 100 and (tmp_path / "worker.log.1").stat().st_size <= 100


def test_a_write_larger_than_the_limit_goes_whole_into_a_file_of_its_own(tmp_path: Path) -> None:
    big = "x" * 25 + "\n"
    with RotatingLogFile(tmp_path / "runner.log", max_bytes=10) as log:
        log.write(big)  # an empty file takes it: nothing to rotate away
        log.write("after\n")
    assert (tmp_path / "runner.log.1").read_text() == big
    assert (tmp_path / "runner.log").read_text() == "after\n"


def test_a_resumed_log_counts_what_it_already_holds(tmp_path: Path) -> None:
    path = tmp_path / "runner.log"
    path.write_text("from the last run\n")  # 18 bytes
    with RotatingLogFile(path, max_bytes=20) as log:
        log.write("more\n")  # 23 bytes in all: rotates though this run wrote only 5
        assert log.rotations == 1
    assert (tmp_path / "runner.log.1").read_text() == "from the last run\n"
    assert path.read_text() == "more\n"


def test_a_lone_surrogate_is_written_escaped_not_dropped(tmp_path: Path) -> None:
    text = '{"output": "a' + "\ud83d" + ' b"}\n'  # the first half of an emoji, alone
    with RotatingLogFile(tmp_path / "runner.log", max_bytes=1_000) as log:
        assert log.write(text) == len(text)
    assert (tmp_path / "runner.log").read_text() == '{"output": "a\\ud83d b"}\n'


def test_concurrent_writers_never_split_or_lose_a_line(tmp_path: Path) -> None:
    path = tmp_path / "runner.log"
    with RotatingLogFile(path, max_bytes=4_096) as log:

        def writer(name: str) -> None:
            for i in range(500):
                log.write(f"{name} {i:03d}\n")

        threads = [threading.Thread(target=writer, args=(f"t{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10.0)
        rotated = log.rotations
    kept = (tmp_path / "runner.log.1").read_text() + path.read_text()
    lines = kept.splitlines()
    assert rotated > 0 and all(len(line.split(" ")) == 2 for line in lines)
    # What is kept is the newest stretch of all writes: for each writer with lines in it, a
    # run of its own lines without a gap, ending with its last.
    for n in range(4):
        numbers = [int(line.split(" ")[1]) for line in lines if line.startswith(f"t{n} ")]
        if numbers:
            assert numbers == list(range(numbers[0], 500)), n
    assert len(kept.encode()) > 4_096 - len("t0 000\n")  # the older file was full


def test_a_closed_log_refuses_a_write_with_a_value_error(tmp_path: Path) -> None:
    log = RotatingLogFile(tmp_path / "runner.log", max_bytes=10)
    log.close()
    log.flush()  # a late flush is harmless
    with pytest.raises(ValueError, match="closed"):
        log.write("late\n")


def test_the_limit_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        RotatingLogFile(tmp_path / "runner.log", max_bytes=0)
