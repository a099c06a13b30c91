from __future__ import annotations

import pytest
from worlds import World


@pytest.fixture
def world(make_world) -> World:
    """The usual world (``tests/worlds.py``): four simulated GPUs, the system's clock, alice.
    A file whose tests need another defines its own ``world`` from ``make_world``."""
    return make_world()
