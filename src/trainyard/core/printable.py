"""Text another user may have shaped, made safe for a terminal: its control characters escaped.

``yard``'s output (``cli/terminal.py``) and the server's log lines (``api/serverlog.py``) go
through it: a job's reason, an event, an error or a name echoed back must not drive the screen
of the admin who reads them (an escape sequence retitles the terminal, rewrites what it shows,
writes the clipboard by OSC 52; bidirectional overrides reorder what is read).
"""

from __future__ import annotations

import re

# C0 but tab, newline and carriage return; DEL and C1; the bidirectional embeddings,
# overrides and isolates ("Trojan Source").
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """``text`` with its control characters escaped as Python writes them (``\\x1b``, ``\\u202e``)."""
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], text)
