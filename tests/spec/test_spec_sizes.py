"""Issue 27, finding 7, in process: rendering is bounded as it goes, and a task's log stops at
its cap with the cap's line while the writer reads on."""

from __future__ import annotations

import os
import threading

import pytest

from trainyard.backends.local.supervisor import copy_capped, log_cap_line
from trainyard.spec.checks import rendered_size_errors
from trainyard.spec.loading import parse_job
from trainyard.spec.placeholders import RenderBudget, RenderTooLarge, render_with


def test_rendering_stops_as_soon_as_the_budget_is_passed_not_after_building_it_all() -> None:
    budget = RenderBudget(10_000)
    context = {"parameters": {"blob": "x" * 1000}}
    with pytest.raises(RenderTooLarge):
        render_with(" ".join(["<% $parameters.blob %>"] * 20_000), context, budget)
    assert budget.used <= 10_000


def test_a_role_over_the_cap_is_reported_at_the_field_that_passed_it() -> None:
    spec = parse_job("""
name: big
parameters: {blob: "%s"}
taskRoles:
  main:
    commands: ["echo small", "echo <%% $parameters.blob %%> <%% $parameters.blob %%>"]
    env: {A: "<%% $parameters.blob %%>"}
""" % ("y" * 3000))
    assert rendered_size_errors(spec, 1 << 20) == []
    errors = rendered_size_errors(spec, 4096, "job_rendered_max_kb")
    assert [e.path for e in errors] == ["taskRoles.main.commands[1]"]
    assert "more than 4 KiB" in errors[0].message and "job_rendered_max_kb" in errors[0].message
    errors = rendered_size_errors(spec, 8000)  # the commands fit; the env passes it
    assert [e.path for e in errors] == ["taskRoles.main.env.A"]


def test_the_log_writer_keeps_the_cap_writes_its_line_and_drains_the_rest(tmp_path) -> None:
    log = tmp_path / "output.log"
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    read_fd, write_fd = os.pipe()
    capped = []

    def flood() -> None:  # more than a pipe holds: the writer must read past the cap
        for _ in range(64):
            os.write(write_fd, b"y\n" * 8192)
        os.close(write_fd)

    writer = threading.Thread(target=flood)
    writer.start()
    assert copy_capped(read_fd, log_fd, 100_001, on_cap=lambda: capped.append(1)) == 3
    writer.join()
    data = log.read_bytes()
    assert data[:100_001] == (b"y\n" * 60_000)[:100_001]
    assert data[100_001:] == b"\n" + log_cap_line(100_001) and capped == [1]
