"""The proxy's kept checks (``Grants``) on a clock the test moves: a check that let a request
through is trusted for less than ``GRANT_SECONDS``, so a revoked credential is refused from
then on. The end-to-end test (``tests/e2e/test_proxy_e2e.py``) sees the refusal come on a
real server; how soon is proved here, where no machine's load can move it."""

from __future__ import annotations

from trainyard.services.task_access import GRANT_SECONDS, Grants

KEY = ("credential-hash", 7, "main", 0, 8080)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_check_is_trusted_for_less_than_grant_seconds_then_asked_again() -> None:
    clock = Clock()
    grants = Grants(clock)
    caller, target = object(), object()
    assert grants.get(KEY) is None  # never checked: the store is asked
    grants.keep(KEY, caller, target)  # type: ignore[arg-type]
    clock.now += GRANT_SECONDS - 0.001
    assert grants.get(KEY) == (caller, target)
    assert grants.get(KEY[:4] + (8081,)) is None  # another port is checked on its own
    clock.now += 0.001  # GRANT_SECONDS after the check: a revocation since then is seen
    assert grants.get(KEY) is None
    assert grants.get(KEY) is None  # and it is not kept any more
