"""``yard sim``'s progress bar: drawn on a terminal only, throttled, erased at the end."""

from __future__ import annotations

import io

from trainyard.cli.progress import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def screen(written: str) -> str:
    """What a terminal shows on the current line after ``written`` (each \\r returns to column 0)."""
    line = ""
    for part in written.split("\r"):
        line = part + line[len(part) :]
    return line.rstrip()


def test_on_a_terminal_the_bar_shows_the_share_done_the_time_and_an_estimate() -> None:
    term, clock = Terminal(), Clock()
    bar = ProgressBar(stream=term, clock=clock)
    bar.update("replaying", 0.0)
    assert screen(term.getvalue()) == "replaying [------------------------------]   0%  0 s"
    clock.now += 30
    bar.update("replaying", 0.25)
    assert screen(term.getvalue()) == "replaying [########----------------------]  25%  30 s, about 1 min 30 s left"
    bar.close()
    assert screen(term.getvalue()) == ""


def test_redraws_are_throttled_but_the_end_is_always_drawn() -> None:
    term, clock = Terminal(), Clock()
    bar = ProgressBar(stream=term, clock=clock)
    bar.update("placing", 0.0)
    for k in range(1, 100):  # 99 new percents within 50 ms: no redraw
        clock.now += 0.0005
        bar.update("placing", k / 100)
    assert term.getvalue().count("\r") == 1
    bar.update("placing", 1.0)
    assert term.getvalue().count("\r") == 2 and "100%" in screen(term.getvalue())
    clock.now += 5
    bar.update("placing", 1.0)  # the same percent, seconds later: redrawn for its clock
    assert screen(term.getvalue()).endswith("100%  5 s")


def test_a_new_phase_is_drawn_at_once_with_its_own_clock() -> None:
    term, clock = Terminal(), Clock()
    bar = ProgressBar(stream=term, clock=clock)
    bar.update("replaying 10 jobs", 0.5)
    clock.now += 60
    bar.update("each of 3 VCs alone", 0.0)
    assert screen(term.getvalue()) == "each of 3 VCs alone [------------------------------]   0%  0 s"


def test_a_note_is_printed_above_the_bar_which_is_drawn_again_under_it() -> None:
    term = Terminal()
    bar = ProgressBar(stream=term, clock=Clock())
    bar.update("placing", 0.5)
    bar.note("seed 42: 100 pods")
    *above, current = term.getvalue().split("\n")
    assert screen("\n".join(above)) == "seed 42: 100 pods"
    assert screen(current).startswith("placing [###############---------------]  50%")


def test_off_a_terminal_or_with_json_nothing_is_drawn_and_notes_are_plain_lines() -> None:
    log = io.StringIO()  # a pipe or a file: isatty() is False
    bar = ProgressBar(stream=log, clock=Clock())
    bar.update("replaying", 0.5)
    bar.note("seed 42: 100 pods")
    bar.close()
    assert log.getvalue() == "seed 42: 100 pods\n"
    term = Terminal()
    with ProgressBar(enabled=False, stream=term, clock=Clock()) as quiet:  # --json
        quiet.update("replaying", 0.5)
    assert term.getvalue() == ""
