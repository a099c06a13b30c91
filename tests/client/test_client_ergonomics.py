"""The SDK as a Python user guesses it: `from trainyard.client import Client`, `Client()`
configured as the CLI is, `submit()` of a path, a YAML string or a dict, a docstring on
every public method, and only Trainyard's own exceptions, whatever goes wrong."""

from __future__ import annotations

import inspect
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from api.harness import Api

from trainyard.client import (
    Client,
    ServerError,
    ServerUnreachable,
    TrainyardError,
    UsageError,
)

YAML = "name: guess\ntaskRoles:\n  m:\n    commands: ['true']\n"
AS_DICT = {"name": "guess", "taskRoles": {"m": {"commands": ["true"]}}}


def test_submit_takes_a_path_a_yaml_string_or_a_dict(api: Api, tmp_path: Path, monkeypatch) -> None:
    alice = api.sdk(api.user_token)
    (tmp_path / "job.yaml").write_text(YAML)
    (tmp_path / "job.json").write_text(json.dumps(AS_DICT))
    monkeypatch.chdir(tmp_path)
    for job in (tmp_path / "job.yaml", "job.yaml", str(tmp_path / "job.json"), YAML, YAML.encode(), AS_DICT):
        assert alice.submit(job).name == "guess", job
    assert alice.submit(AS_DICT, dry_run=True).job["name"] == "guess"
    assert len(alice.jobs().items) == 6
    # One line of JSON longer than a file name may be: the job's text, never an OSError.
    long = json.dumps({**AS_DICT, "description": "x" * 300})
    assert alice.submit(long, dry_run=True).job["name"] == "guess"


def test_a_job_file_that_cannot_be_read_is_a_usage_error_naming_it(api: Api, tmp_path: Path) -> None:
    alice = api.sdk(api.user_token)
    with pytest.raises(UsageError, match="cannot read job file '.*missing.yaml'"):
        alice.submit(str(tmp_path / "missing.yaml"))
    with pytest.raises(UsageError, match="cannot read job file"):
        alice.submit(tmp_path)  # a folder
    assert alice.jobs().items == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.submit(123), "a job file is a path, the file.s YAML or JSON text, or the job as a dict"),
        (lambda c: c.submit({"name": float("nan")}), "cannot be sent as JSON"),
        (lambda c: c.submit({"when": object()}), "cannot be sent as JSON"),
        (lambda c: c.job("12"), "a job id is a whole number"),
        (lambda c: c.stop(None), "a job id is a whole number"),
        (lambda c: c.clone(True), "a job id is a whole number"),
        (lambda c: c.create_vc("v", gpus=object()), "cannot send POST /vcs"),
    ],
)
def test_bad_arguments_are_usage_errors_not_httpx_type_errors(api: Api, call, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        call(api.sdk(api.user_token))
    assert isinstance(caught.value, TrainyardError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("url", ["localhost:8642", "ftp://example.org", "http://[::1", 8642])
def test_a_url_that_is_not_an_http_address_is_a_usage_error(url) -> None:
    with pytest.raises(UsageError, match="http"):
        Client(url, "ty_x")


def test_client_with_no_arguments_reads_the_clis_configuration(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("TRAINYARD_URL", raising=False)
    monkeypatch.delenv("TRAINYARD_TOKEN", raising=False)
    monkeypatch.setenv("TRAINYARD_HOME", str(tmp_path))
    (tmp_path / "client.json").write_text(json.dumps({"url": "http://10.0.0.5:8642", "token": "ty_from_file"}))
    with Client() as sdk:
        assert (sdk.url, sdk._http.headers["Authorization"]) == ("http://10.0.0.5:8642", "Bearer ty_from_file")
    monkeypatch.setenv("TRAINYARD_URL", "http://yard.example:9000/")
    monkeypatch.setenv("TRAINYARD_TOKEN", "ty_from_env")
    with Client() as sdk:
        assert (sdk.url, sdk._http.headers["Authorization"]) == ("http://yard.example:9000", "Bearer ty_from_env")
    with Client("http://other:1") as sdk:  # a server named by the caller never gets the configured token
        assert "Authorization" not in sdk._http.headers


def test_every_public_method_has_a_docstring() -> None:
    undocumented = [
        name
        for name, member in inspect.getmembers(Client, inspect.isfunction)
        if not name.startswith("_") and not inspect.getdoc(member)
    ]
    assert undocumented == []


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A socket that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_server_that_never_answers_is_server_unreachable_saying_so(silent_server: str) -> None:
    with (
        Client(silent_server, None, timeout=0.2) as sdk,
        pytest.raises(ServerUnreachable, match="did not answer in time"),
    ):
        sdk.jobs()


class _NotTrainyard(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        status = 503 if self.path.endswith("/healthz") else 200
        body, media = b"<html>a proxy's page</html>", "text/html"
        if "/jobs/" in self.path or self.path.endswith("/nodes"):  # another JSON API
            body, media = b'{"kind": "Pod", "items": "none"}', "application/json"
        self.send_response(status)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_service() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotTrainyard)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_answer_that_is_not_trainyards_is_a_trainyard_error_and_a_5xx_a_server_error(other_service: str) -> None:
    with Client(other_service, None) as sdk:
        with pytest.raises(UsageError, match="text/html, not as Trainyard does") as caught:
            sdk.jobs()
        assert caught.value.status == 200
        with pytest.raises(ServerError) as failed:
            sdk.healthz()
        assert failed.value.status == 503 and "a proxy's page" in failed.value.message


def test_json_of_another_shape_is_a_usage_error_not_pydantics(other_service: str) -> None:
    with Client(other_service, None) as sdk:
        with pytest.raises(UsageError, match="answered with a reply that Trainyard's SDK cannot read"):
            sdk.job(1)
        with pytest.raises(UsageError, match="a Trainyard server of the same version"):
            sdk.nodes()
