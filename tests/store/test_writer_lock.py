"""The SQLite writer's lock (``store/db.py``): the controller's transactions go first."""

from __future__ import annotations

import threading

from deadlines import scaled

from trainyard.store.db import _WriterLock, write_first, writer_wait_seconds


def test_a_thread_that_writes_first_goes_before_others_that_waited_longer() -> None:
    lock = _WriterLock()
    assert lock.acquire(timeout=scaled(10))  # a submit batch's transaction in progress
    order: list[str] = []
    waited: dict[str, float] = {}

    def write(name: str, first: bool) -> None:
        if first:
            write_first()
        before = writer_wait_seconds()
        assert lock.acquire(timeout=scaled(30))
        waited[name] = writer_wait_seconds() - before
        order.append(name)
        lock.release()

    submits = threading.Thread(target=write, args=("next batch", False))
    submits.start()
    assert lock.wait_for_waiting(1, scaled(10))
    controller = threading.Thread(target=write, args=("controller", True))
    controller.start()
    assert lock.wait_for_waiting(2, scaled(10))
    lock.release()
    for thread in (submits, controller):
        thread.join(scaled(10))
    assert order == ["controller", "next batch"]
    assert waited["controller"] > 0 and waited["next batch"] > 0  # each thread counts its own wait


def test_nobody_waits_for_a_free_lock_and_a_first_thread_that_gives_up_lets_the_others_go() -> None:
    lock = _WriterLock()
    assert lock.acquire(timeout=scaled(10))
    gave_up = threading.Event()

    def first_with_no_patience() -> None:
        write_first()
        if not lock.acquire(timeout=0):
            gave_up.set()

    thread = threading.Thread(target=first_with_no_patience)
    thread.start()
    thread.join(scaled(10))
    assert gave_up.is_set()
    lock.release()
    assert lock.acquire(timeout=0)  # free, and no first one left waiting
    lock.release()
