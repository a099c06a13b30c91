"""The last N lines of a task's log, read from the end of the file whatever its size."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.backends.base import LogChunk, TaskKey, read_log_file
from trainyard.services.logs import read_log, read_tail

KEY = TaskKey(1, 0, "m", 0)


class OneLogBackend:
    """Just enough of a backend: every task's log is the one file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read_log(self, key: TaskKey, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        return read_log_file(self.path, offset, limit)


@pytest.mark.parametrize(("text", "lines", "expected"), [
    ("a\nb\nc\n", 2, "b\nc\n"),
    ("a\nb\nc", 2, "b\nc"),  # a last line without its newline is still a line
    ("a\nb\n", 5, "a\nb\n"),  # fewer lines than asked: all of them
    ("a\nb\n", 0, ""),
    ("", 3, ""),
])
def test_the_tail_is_the_last_lines_and_says_where_they_start(tmp_path: Path, text: str, lines: int,
                                                              expected: str) -> None:
    log = tmp_path / "output.log"
    log.write_text(text)
    chunk = read_tail(OneLogBackend(log), KEY, lines)  # type: ignore[arg-type]
    assert chunk.data.decode() == expected
    assert (chunk.offset, chunk.size) == (len(text) - len(expected), len(text))


def test_an_offset_reads_from_there_and_a_tail_wins_over_it(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("one\ntwo\n")
    backend = OneLogBackend(log)
    assert read_log(backend, KEY, offset=4, tail=None) == LogChunk(b"two\n", 4, 8)  # type: ignore[arg-type]
    assert read_log(backend, KEY, offset=4, tail=2) == LogChunk(b"one\ntwo\n", 0, 8)  # type: ignore[arg-type]
