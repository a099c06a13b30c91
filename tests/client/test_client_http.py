"""The `yard` program's own HTTP (client_http.py: the standard library's http.client, no
httpx to import, issue 33): against the real app behind uvicorn it answers what httpx answers, errors
included; against a server that speaks HTTP oddly (chunks, closed connections, a cut answer,
no answer) it reads what is there or fails as the SDK fails, and a header a caller gives
never splits into two. Everything the program does not send itself goes to httpx."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from api.harness import Api

from trainyard import client_http
from trainyard.client import AuthError, Client, ServerUnreachable, TrainyardError
from trainyard.client_http import PlainHTTP

JOB = "name: plain\ntaskRoles:\n  w:\n    commands: [echo hi]\n    resourcePerInstance: {gpu: 1}\n"


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # connections wait here until the server accepts: nothing to wait for
    return sock


@pytest.fixture
def served(api: Api) -> Iterator[str]:
    """The real app behind uvicorn on a real socket, in this process."""
    sock = _listening()
    server = uvicorn.Server(uvicorn.Config(api.app, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join()
    sock.close()


def _program(monkeypatch: pytest.MonkeyPatch, url: str, token: str | None, **options: float) -> Client:
    """A client as `yard` (the program) makes it."""
    monkeypatch.setattr(client_http, "_program", True)
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    client = Client(url, token, **options)
    monkeypatch.setattr(client_http, "_program", False)
    assert isinstance(client._http, PlainHTTP)
    return client


def test_the_program_reads_what_the_sdk_reads_from_the_real_server(
        served: str, api: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sdk, other = Client(served, api.user_token), Client(served, api.admin_token)
    plain = _program(monkeypatch, served, api.user_token)
    with sdk, other, plain:
        made = plain.submit(JOB, idempotency_key="key-1")
        assert plain.submit(JOB, idempotency_key="key-1").id == made.id  # its header reached the server
        sdk.submit(JOB, dependencies={"afterany": [made.id]})
        assert plain.jobs(state="WAITING,RUNNING", limit=5) == sdk.jobs(state="WAITING,RUNNING", limit=5)
        assert plain.jobs(name="pla in", order="oldest") == sdk.jobs(name="pla in", order="oldest")  # a space quoted
        assert plain.job(made.id) == sdk.job(made.id)
        project = tmp_path / "project"
        project.mkdir()
        (project / "train.py").write_bytes(bytes(range(256)) * 64)  # a folder sent (PUT), then found held
        sent, held = plain.upload_workdir(project), sdk.upload_workdir(project)
        assert (sent.digest, sent.sizeBytes, sent.files) == (held.digest, held.sizeBytes, held.files)
        assert plain._http._fallback is None  # all of it over its own socket
        for call in (lambda c: c.job(made.id + 100), lambda c: c.submit("name: [")):
            with pytest.raises(TrainyardError) as by_plain:
                call(plain)
            with pytest.raises(TrainyardError) as by_sdk:
                call(sdk)
            assert (by_plain.value.status, by_plain.value.message, by_plain.value.errors) == \
                   (by_sdk.value.status, by_sdk.value.message, by_sdk.value.errors)
        with pytest.raises(AuthError) as refused, _program(monkeypatch, served, "ty_not-a-token") as stranger:
            stranger.jobs()
        assert refused.value.status == 401
        # What it does not send itself (a JSON body, a timeout of its own, a stream) goes to httpx.
        with pytest.raises(AuthError):
            plain.create_user("mallory")
        assert plain._http._fallback is not None
        assert plain.job(made.id).id == made.id  # and its own socket still serves the rest


class Canned:
    """A real TCP server on 127.0.0.1 that answers each request with the next canned bytes
    (None: close the connection without an answer), and keeps what it was sent."""

    def __init__(self, *answers: bytes | None) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = _listening()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            while (head := b"".join(iter(reader.readline, b"\r\n"))):
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + b"\r\n" + reader.read(length))
                answer = self.answers.pop(0)
                if answer is None:
                    return
                conn.sendall(answer)
                if b"Connection: close" in answer or answer.startswith(b"HTTP/1.0"):
                    return

    def close(self) -> None:
        self.sock.close()


def _answer(body: bytes, *headers: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", "content-type: application/json", *headers]
    if not any(h.lower().startswith("transfer-encoding") for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_chunks_kept_alive_and_closed_connections_are_read_as_http_says(monkeypatch: pytest.MonkeyPatch) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4;ext=1\r\n[1, \r\n3\r\n2]\n\r\n0\r\nX-Trailer: t\r\n\r\n")
    server = Canned(_answer(b"[0]"), chunked, _answer(b"[3]", "Connection: close"), _answer(b"[4]"),
                    b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[5]", _answer(b"[6]"))
    with _program(monkeypatch, server.url, "ty_token") as client:
        got = [client._request("GET", "/things", params={"a": "x y", "b": True, "c": 3}).content for _ in range(6)]
    server.close()
    assert got == [b"[0]", b"[1, 2]\n", b"[3]", b"[4]", b"[5]", b"[6]"]
    # One connection for the first three, a new one after `Connection: close`, another after HTTP/1.0's end.
    assert server.connections == 3
    first = server.requests[0].decode()
    assert first.startswith("GET /api/v1/things?a=x+y&b=true&c=3 HTTP/1.1\r\n")
    assert "Authorization: Bearer ty_token\r\n" in first and f"Host: {server.url[7:]}\r\n" in first


def test_a_connection_the_server_closed_between_requests_is_not_used_again(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Canned(_answer(b"[1]"), _answer(b"[2]"))
    with _program(monkeypatch, server.url, None) as client:
        assert client._request("GET", "/a").content == b"[1]"
        first = client._http._conn
        assert first is not None and first.sock is not None
        first.sock.shutdown(socket.SHUT_RD)  # as when the server's FIN has arrived: readable, at its end
        assert client._request("POST", "/b", content=b"{}").content == b"[2]"
        assert client._http._conn is not first
    server.close()
    assert server.connections == 2
    assert b"\r\nContent-Length: 2\r\n" in server.requests[1] and server.requests[1].endswith(b"\r\n\r\n{}")


@pytest.mark.parametrize(("answer", "said"), [
    (None, "closed the connection without answering"),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 10\r\n\r\n[1]", "in the middle"),  # then closed
    (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not an HTTP/1.1 answer"),
])
def test_a_lost_or_foreign_answer_is_an_unreachable_server(monkeypatch: pytest.MonkeyPatch, answer: bytes | None,
                                                           said: str) -> None:
    server = Canned(answer)
    with _program(monkeypatch, server.url, None) as client, pytest.raises(ServerUnreachable) as lost:
        client._request("GET", "/a")
    server.close()
    assert said in lost.value.message and f"cannot reach the Trainyard server at {server.url}" in lost.value.message


def test_no_server_and_no_answer_in_time_are_said_as_the_sdk_says_them(monkeypatch: pytest.MonkeyPatch) -> None:
    nobody = _listening()
    url = f"http://127.0.0.1:{nobody.getsockname()[1]}"
    nobody.close()
    with _program(monkeypatch, url, None) as client, pytest.raises(ServerUnreachable) as refused:
        client.jobs()
    assert "Connection refused" in refused.value.message and "is `yard up` running" in refused.value.message
    silent = _listening()  # accepts (the backlog) and never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    with _program(monkeypatch, url, None, timeout=0.2) as client, pytest.raises(ServerUnreachable) as late:
        client.jobs()
    silent.close()
    assert "did not answer in time" in late.value.message


def test_a_header_a_caller_gives_never_becomes_two(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Canned(_answer(b"{}"), _answer(b"{}"))
    with _program(monkeypatch, server.url, None) as client:
        for value in ("k\r\nX-Evil: 1", "caf\u00e9 \r\nX-Evil: 1"):  # not plain printable ASCII: httpx's to send
            with pytest.raises(TrainyardError):  # as httpx refuses it
                client._request("POST", "/jobs", content=b"x", headers={"Idempotency-Key": value})
        assert client._request("GET", "/jobs", headers={"Idempotency-Key": "k-1"}).content == b"{}"
    server.close()
    assert not any(b"X-Evil" in request for request in server.requests)
    assert b"Idempotency-Key: k-1\r\n" in server.requests[-1]
