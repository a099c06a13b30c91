"""What ``yard`` prints is text a terminal may trust: control characters escaped.

Job messages, events, task faults and error details can hold text another user shaped (an
image's name and the registry's answer about it, a pull's error output, a value echoed back);
printed raw to an admin's terminal, an escape sequence in them drives it (retitles it, rewrites
what the screen shows, writes the clipboard by OSC 52), and bidirectional overrides reorder
what is read. While a command runs (``escaping``), every text written to stdout and stderr has
them escaped as Python writes them (``\\x1b``), newline, tab and carriage return (progress
lines) kept. Raw bytes — ``yard logs``, ``yard cp … -``, ``yard exec`` — go through the
streams' ``.buffer``, untouched, as ``kubectl logs`` prints a pod's; ``yard top`` escapes the
text of its frames itself (``shown``) and writes its own screen sequences.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from trainyard.core.printable import shown


class _Escaping:
    """A text stream whose writes are ``shown``; everything else is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(shown(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def escaping() -> Iterator[None]:
    """stdout and stderr escaped for the ``with`` block, as they were after it."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Escaping(out), _Escaping(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
