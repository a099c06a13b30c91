"""The one knob for how long a test waits: ``TRAINYARD_TEST_TIME_FACTOR``.

Tests wait for events (a process's exit, a controller's wake, an answer); where a wait must
have a deadline, so that a broken build fails instead of hanging, that deadline is written
for a loaded 2-core CI machine and goes through ``scaled()``, which multiplies it by this
factor (default 1). On a slower or busier machine, ``TRAINYARD_TEST_TIME_FACTOR=3`` stretches
every deadline of the suite at once: the poll helpers' (``wait_until`` in
``tests/backends/conftest.py`` and ``tests/e2e/server.py``), subprocess and HTTP timeouts,
Playwright's, and pytest-timeout's per-test limit (``tests/conftest.py`` scales that one).

A deadline is never an assertion: no test asserts that something took less than so long
(timings are benchmarks, in ``benchmarks/``).
"""

from __future__ import annotations

import os


def _factor() -> float:
    text = os.environ.get("TRAINYARD_TEST_TIME_FACTOR", "1")
    try:
        factor = float(text)
    except ValueError:
        raise ValueError(f"TRAINYARD_TEST_TIME_FACTOR must be a number, not {text!r}") from None
    if not factor > 0:
        raise ValueError(f"TRAINYARD_TEST_TIME_FACTOR must be above 0, not {text!r}")
    return factor


FACTOR = _factor()


def scaled(seconds: float) -> float:
    """``seconds`` of deadline, stretched by ``TRAINYARD_TEST_TIME_FACTOR``."""
    return seconds * FACTOR


def scaled_ms(seconds: float) -> float:
    """The same deadline in milliseconds, as Playwright takes its timeouts."""
    return scaled(seconds) * 1000
