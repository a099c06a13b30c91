"""The exec WebSocket's first frame (``api/routers/taskexec.ExecRequest``): what it accepts,
the clear words it refuses the rest with, and the event each command becomes."""

from __future__ import annotations

import json

import pytest

from trainyard.api.routers.taskexec import MAX_ARGS, ExecRequest


def test_a_command_with_a_terminal_of_its_size_is_read_as_sent() -> None:
    request = ExecRequest.parse(json.dumps({"argv": ["nvidia-smi", "-L"], "tty": True, "rows": 30, "cols": 100}))
    assert request == ExecRequest(("nvidia-smi", "-L"), True, 30, 100)
    assert ExecRequest.parse("{}") == ExecRequest((), False, 24, 80)  # the task's shell, no terminal


@pytest.mark.parametrize(("frame", "words"), [
    ("not json", "must be JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"argv": "ls"}', "argv must be a list of strings"),
    ('{"argv": ["ls", 3]}', "argv must be a list of strings"),
    ('{"argv": ["a\\u0000b"]}', "NUL byte"),
    (json.dumps({"argv": ["x"] * (MAX_ARGS + 1)}), "argv is too long"),
    ('{"tty": "yes"}', "tty must be true or false"),
    ('{"rows": 0}', "rows must be a whole number from 1 to 10000"),
    ('{"cols": true}', "cols must be a whole number"),
    ('{"cwd": "/"}', "unknown field(s) in the first frame: cwd"),
])
def test_a_bad_first_frame_is_refused_with_what_is_wrong(frame: str, words: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        ExecRequest.parse(frame)
    assert words in str(refused.value)


def test_the_event_names_who_ran_what_where_quoted_and_cut() -> None:
    assert ExecRequest((), True, 24, 80).describe("alice", "main", 0) == "alice opened a shell in task main/0"
    ran = ExecRequest(("sh", "-c", "echo $HOME; ls"), False, 24, 80).describe("bob", "worker", 3)
    assert ran == "bob ran `sh -c 'echo $HOME; ls'` in task worker/3"
    long = ExecRequest(("echo", "x" * 500), True, 24, 80).describe("alice", "main", 0)
    assert long.endswith("…` in task main/0 (with a terminal)") and len(long) < 260
