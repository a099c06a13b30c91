"""``yard exec ID [OPTIONS] -- CMD…``: everything after the first ``--`` is the command, its
own options and ``--`` included; yard's options come before it."""

from __future__ import annotations

import pytest

from trainyard.cli.main import _parse, build_parser


@pytest.mark.parametrize(("argv", "task", "tty", "command"), [
    (["exec", "3", "--", "ls", "-la"], None, False, ["ls", "-la"]),
    (["exec", "3", "--task", "worker/1", "-t", "--", "sh", "-c", "echo --task"], "worker/1", True,
     ["sh", "-c", "echo --task"]),
    (["exec", "3", "--", "--task", "--", "x"], None, False, ["--task", "--", "x"]),
    (["exec", "3", "nvidia-smi"], None, False, ["nvidia-smi"]),
])
def test_the_command_after_the_double_dash_is_never_yards_own(argv, task, tty, command) -> None:
    args = _parse(build_parser(), argv)
    assert (args.command, args.id, args.task, args.tty, args.argv) == ("exec", 3, task, tty, command)


def test_other_commands_parse_as_before() -> None:
    args = _parse(build_parser(), ["shell", "4", "--task", "main/0"])
    assert (args.command, args.id, args.task) == ("shell", 4, "main/0")
    assert _parse(build_parser(), ["logs", "5", "--task", "main/0"]).task == "main/0"
