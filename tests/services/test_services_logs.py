"""A task's log served in pages of whole lines, and its last N lines found from the end of the
file whatever its size."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.backends.base import LogChunk, TaskKey, read_log_file
from trainyard.services.logs import read_log, read_page, tail_offset

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
    chunk = read_log(OneLogBackend(log), KEY, offset=None, tail=lines)  # type: ignore[arg-type]
    assert chunk.data.decode() == expected
    assert (chunk.offset, chunk.size) == (len(text) - len(expected), len(text))


def test_an_offset_reads_from_there_and_a_tail_wins_over_it(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("one\ntwo\n")
    backend = OneLogBackend(log)
    assert read_log(backend, KEY, offset=4, tail=None) == LogChunk(b"two\n", 4, 8)  # type: ignore[arg-type]
    assert read_log(backend, KEY, offset=4, tail=2) == LogChunk(b"one\ntwo\n", 0, 8)  # type: ignore[arg-type]


def test_the_tail_is_found_far_back_in_a_log_of_any_size_and_line_length(tmp_path: Path) -> None:
    """Lines far longer than any guess per line, and more of them than one read back holds."""
    lines = [f"{i} ".encode() + b"x" * (i * 997 % 5000) + b"\n" for i in range(3000)]
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(lines))
    backend = OneLogBackend(log)
    for wanted in (1, 7, 200, 2999, 3000, 5000):
        start = tail_offset(backend, KEY, wanted)  # type: ignore[arg-type]
        assert log.read_bytes()[start:] == b"".join(lines[-wanted:]), wanted


def test_pages_end_at_a_line_end_and_read_one_after_another_are_exactly_the_log(tmp_path: Path) -> None:
    text = b"".join(f"step {i} loss {1 / (i + 1):.6f}\n".encode() * (i % 3 + 1) for i in range(5000))
    text += b"a last line, still being written"
    log = tmp_path / "output.log"
    log.write_bytes(text)
    backend = OneLogBackend(log)
    pages, offset = [], 0
    while offset < len(text):
        page = read_page(backend, KEY, offset, 4096)  # type: ignore[arg-type]
        assert page.offset == offset and page.size == len(text) and 0 < len(page.data) <= 4096
        pages.append(page.data)
        offset += len(page.data)
    assert b"".join(pages) == text
    assert all(page.endswith(b"\n") for page in pages[:-1]) and pages[-1].endswith(b"being written")


def test_a_line_longer_than_a_page_is_cut_rather_than_never_read(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"y" * 10000 + b"\nend\n")
    page = read_page(OneLogBackend(log), KEY, 0, 4096)  # type: ignore[arg-type]
    assert page == LogChunk(b"y" * 4096, 0, 10005)


def test_every_task_s_lines_are_prefixed_whole_and_a_line_longer_than_a_page_is_cut_not_stuck(tmp_path: Path) -> None:
    from trainyard.services.all_logs import merged_page, prefix_lines
    from trainyard.services.logs import LogTarget, TaskLogs

    assert prefix_lines("w/0", b"a\nb") == b"[w/0] a\n[w/0] b\n" and prefix_lines("w/0", b"") == b""
    log = tmp_path / "output.log"
    log.write_bytes(b"y" * 10000 + b"\nrest")
    logs = TaskLogs(None, None, OneLogBackend(log))  # type: ignore[arg-type]
    running = LogTarget(1, None, "m", 0, None, KEY, False)  # type: ignore[arg-type]
    page = merged_page(logs, [running], None, limit=4096)
    assert page.data == b"[m/0] " + b"y" * 4096 + b"\n" and page.offsets == {"m/0": 4096} and not page.ended
    offsets = page.offsets
    while (page := merged_page(logs, [running], offsets, limit=4096)).data:
        offsets = page.offsets
    assert offsets == {"m/0": 10001}  # "rest" waits for its newline while the task runs
    done = merged_page(logs, [LogTarget(1, None, "m", 0, None, KEY, True)], offsets)  # type: ignore[arg-type]
    assert done.data == b"[m/0] rest\n" and done.ended
