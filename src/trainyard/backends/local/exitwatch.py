"""The local backend's task ends, pushed (``TaskEndNotices``): a supervisor exits once it has
recorded its task's end (``supervisor``: ``exit.json``), so the exit of a supervisor this
server spawned is the moment the controller's next cycle should come, not its next tick.

One thread waits on a pidfd per supervisor (``epoll``: a descriptor added while it waits is
seen at once) and calls the callbacks when one becomes readable; it neither reaps nor
signals anything (``_reap`` still collects the exit status). Where the kernel has no pidfd
(before Linux 5.3) nothing is watched and the controller's tick finds every end, as before.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class ExitWatch:
    """Calls its callbacks when a watched process exits (from a thread of its own)."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._epoll: select.epoll | None = None
        self._watched = 0  # pidfds registered and not yet seen readable

    def on_exit(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def watch(self, pid: int) -> None:
        """Announce ``pid``'s exit, if anyone listens and the kernel can tell."""
        with self._lock:
            if not self._callbacks or not hasattr(os, "pidfd_open"):
                return
            try:
                fd = os.pidfd_open(pid)
            except OSError:  # gone already (the tick sees its end), or no pidfd here
                return
            if self._epoll is None:  # the thread runs while something is watched, and ends after
                self._epoll = select.epoll()
                threading.Thread(target=self._run, args=(self._epoll,), name="trainyard-task-exits",
                                 daemon=True).start()
            self._epoll.register(fd, select.EPOLLIN)
            self._watched += 1

    def _run(self, epoll: select.epoll) -> None:
        while True:
            ready = epoll.poll()
            for fd, _ in ready:
                epoll.unregister(fd)
                os.close(fd)
            with self._lock:
                callbacks = tuple(self._callbacks)
                self._watched -= len(ready)
                done = self._watched == 0
                if done:  # nothing left to wait for: no thread and no descriptor kept idle
                    self._epoll = None
                    epoll.close()
            if ready:
                for callback in callbacks:
                    try:
                        callback()
                    except Exception:  # noqa: BLE001 - one bad callback must not end the watch
                        log.exception("a task-exit callback failed")
            if done:
                return
