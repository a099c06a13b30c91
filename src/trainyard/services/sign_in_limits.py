"""The limit on sign-in tries: at most ``failures`` per user name and per client address
in a window of ``window`` seconds that begins at the first.

A try is counted *before* its password is checked, in the store, by one atomic update per
key (``store.queries.sign_ins``): thirty tries sent at once are thirty counts one after the
other, so the sixth and later are refused without a password check, and a restart of the
server forgets nothing. A try that succeeds is taken back (it was no failure) and clears
its user's count; the address's other failures stay counted, so that one account of one's
own does not reset the address between guesses at others'.

The user key is the name as sign-in looks it up (``sign_in_name``): ``"alice "`` and
``"alice"`` are one user and one count. A name no user can have shares one key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from trainyard.core.clock import Clock
from trainyard.core.names import USER_NAME
from trainyard.store.db import Database
from trainyard.store.queries import sign_ins

DEFAULT_FAILURES = 5
DEFAULT_WINDOW_SECONDS = 300.0
UNKNOWN_NAME_KEY = "user:?"  # every name that no user can have


def sign_in_name(typed: str) -> str:
    """The name a sign-in looks up for what was typed: the one normalisation that both the
    lookup and the limit's key use."""
    return typed.strip()


def keys_for(address: str, typed_name: str) -> tuple[str, ...]:
    """The keys a try counts against: its client address, and the user it names (if any)."""
    keys = [f"address:{address}"]
    name = sign_in_name(typed_name)
    if name:
        keys.append(f"user:{name}" if USER_NAME.fullmatch(name) else UNKNOWN_NAME_KEY)
    return tuple(sorted(keys))  # always locked in one order: two tries never wait on each other


@dataclass(frozen=True)
class Refusal:
    retry_after: float  # seconds


class SignInLimiter:
    def __init__(self, db: Database, clock: Clock, *, failures: int = DEFAULT_FAILURES,
                 window: float = DEFAULT_WINDOW_SECONDS) -> None:
        self._db = db
        self._clock = clock
        self.failures = failures
        self.window = window

    def try_sign_in(self, keys: tuple[str, ...]) -> Refusal | None:
        """Count a try against every key, before its password is checked; a Refusal (and
        nothing counted) when any key has had ``failures`` tries in its window."""
        now = self._clock.now()
        opened_after = now - timedelta(seconds=self.window)
        try:
            with self._db.session() as session:
                sign_ins.forget_closed_windows(session, opened_after)
                for key in keys:
                    if not sign_ins.count_try(session, key, now=now, window_start_after=opened_after,
                                              limit=self.failures):
                        raise _Limited((sign_ins.window_started(session, key) or now) - opened_after)
        except _Limited as limited:  # rolled back: what it counted against the other keys too
            return Refusal(max(limited.wait.total_seconds(), 1.0))
        return None

    def succeeded(self, keys: tuple[str, ...], user_name: str) -> None:
        """The try counted against ``keys`` signed ``user_name`` in: it was no failure, and
        that user's count starts again from nothing (the user signed in, not the name typed:
        a token's sign-in does not clear the count of a name typed beside it)."""
        with self._db.session() as session:
            for key in keys:
                sign_ins.uncount_try(session, key)
            sign_ins.clear_tries(session, f"user:{user_name}")


class _Limited(Exception):
    def __init__(self, wait: timedelta) -> None:
        self.wait = wait
