"""``yard up`` holds its home: a second server on the same store is refused, with who holds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.api.server import StartupError, hold_home


def test_a_second_server_on_the_same_home_is_refused_until_the_first_stops(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = hold_home(home, "http://127.0.0.1:8642")
    with pytest.raises(StartupError, match=r"another `yard up` serves .*home \(pid \d+, http://127.0.0.1:8642\)"):
        hold_home(home, "http://127.0.0.1:8643")
    assert hold_home(tmp_path / "other", "http://127.0.0.1:8643")  # another home is free
    first.close()
    hold_home(home, "http://127.0.0.1:8643").close()
