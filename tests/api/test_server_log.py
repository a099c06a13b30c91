"""The server's log never holds the query of a URL (api/serverlog.py): JupyterLab's
``?token=`` and other secrets travel in queries. The e2e test is tests/e2e/test_attack_misc_e2e.py."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import httpx
import pytest

from trainyard.api.serverlog import RedactingFormatter, configure_server_logging, redact_queries


@pytest.mark.parametrize(("line", "logged"), [
    ('HTTP Request: GET http://10.0.0.5:4000/sessions/7/lab?token=SECRET "HTTP/1.1 200 OK"',
     'HTTP Request: GET http://10.0.0.5:4000/sessions/7/lab?… "HTTP/1.1 200 OK"'),
    ("unexpected error on GET /proxy/jobs/1/main/0/8000/x?token=SECRET&a=b", "unexpected error on GET "
     "/proxy/jobs/1/main/0/8000/x?…"),
    ("ws://node:1/api/kernels/k/channels?session_id=SECRET#frag", "ws://node:1/api/kernels/k/channels?…#frag"),
    ("url='https://hooks.example.com/x?key=SECRET'", "url='https://hooks.example.com/x?…'"),
    ("is TRAINYARD_URL right? yes/no?", "is TRAINYARD_URL right? yes/no?"),  # prose keeps its question marks
    ("GET /jobs/1", "GET /jobs/1"),
])
def test_the_query_of_every_url_and_absolute_path_is_redacted(line: str, logged: str) -> None:
    assert redact_queries(line) == logged


@pytest.fixture
def server_logging() -> Iterator[io.StringIO]:
    """configure_server_logging on the root logger, writing to a buffer; undone after."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, {n: logging.getLogger(n).level for n in ("httpx", "httpcore")})
    buffer = io.StringIO()
    root.handlers = [logging.StreamHandler(buffer)]
    configure_server_logging()
    yield buffer
    root.handlers, root.level = saved[0], saved[1]
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


def test_a_request_httpx_makes_is_not_logged_and_a_traceback_is_redacted_too(server_logging: io.StringIO) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with httpx.Client(transport=transport) as client:
        client.get("http://127.0.0.1:9/lab?token=SECRET1")  # httpx logs each request at INFO
    try:
        raise ValueError("GET http://127.0.0.1:9/lab?token=SECRET2 failed")
    except ValueError:
        logging.getLogger("trainyard").exception("forwarding /sessions/3/lab?token=SECRET3")
    written = server_logging.getvalue()
    assert "SECRET" not in written and "forwarding /sessions/3/lab?…" in written
    assert "GET http://127.0.0.1:9/lab?… failed" in written  # the traceback's last line
    assert isinstance(logging.getLogger().handlers[0].formatter, RedactingFormatter)


def test_a_jobs_string_in_a_log_line_reaches_the_admins_terminal_escaped(server_logging: io.StringIO) -> None:
    """The attack round: a job's secret named "\\x1b]0;PWNED\\x07" was logged raw by both
    backends ("no file for secret(s) …") to a foreground `yard up`'s terminal."""
    logging.getLogger("trainyard").warning("no file for secret(s) %s", "\x1b]0;PWNED\x07\u202e")
    written = server_logging.getvalue()
    assert "\x1b" not in written and "\x07" not in written and "\u202e" not in written
    assert "no file for secret(s) \\x1b]0;PWNED\\x07\\u202e" in written
