"""When two texts of one firing alert tell of the same problem (``monitor.alerts.same_problem``)."""

from __future__ import annotations

import pytest

from trainyard.monitor.alerts import same_problem

SAME = [
    ("the duration moves", "job 7 has run for 5d 0h01m, longer than 5 days",
     "job 7 has run for 6d 2h30m, longer than 5 days"),
    ("the mean moves", "job 7 holds 2 GPU(s) but used 3.0 % of them", "job 7 holds 2 GPU(s) but used 4.5 % of them"),
    ("the error count grows", "node g-12: GPU 0 has 2 uncorrected ECC error(s)",
     "node g-12: GPU 0 has 9 uncorrected ECC error(s)"),
    ("the disk fills", "node n1: disk 85.0 % full (over 80 %)", "node n1: disk 97.2 % full (over 80 %)"),
]
OTHER = [
    ("another GPU is missing", "node n1: GPU 1 missing", "node n1: GPU 2 missing"),
    ("a second problem", "node n1: GPU 1 missing", "node n1: GPU 1 missing; GPU 0 not answering"),
    ("another kind of failure", "node n1: not sampled for over 300 s", "node n1: GPU 0 not answering"),
    ("another pending reason", "job 3 has waited 0h31m: waits for 2 GPUs of VC a's quota",
     "job 3 has waited 0h32m: no node has 2 free GPUs"),
]


@pytest.mark.parametrize(("case", "before", "after"), SAME, ids=[c[0] for c in SAME])
def test_moving_figures_are_the_same_problem(case: str, before: str, after: str) -> None:
    assert same_problem(before, after)


@pytest.mark.parametrize(("case", "before", "after"), OTHER, ids=[c[0] for c in OTHER])
def test_a_different_text_is_another_problem(case: str, before: str, after: str) -> None:
    assert not same_problem(before, after)
