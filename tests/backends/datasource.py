"""A real HTTP source of datasets on 127.0.0.1 for the cache's tests and benchmark: serves
named bodies, counts requests, can hold a request until released, cut a body short,
throttle its bytes per second, or redirect a path elsewhere."""

from __future__ import annotations

import io
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def tar_gz(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Source:
    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.cut_short: set[str] = set()
        self.unsized: set[str] = set()  # paths answered without a Content-Length (to the connection's close)
        self.bytes_per_second = 0.0
        self.redirects: dict[str, str] = {}  # path -> the URL a 302 names
        self.errors: dict[str, int] = {}  # path -> the HTTP error it is answered with
        self.url = ""

    def add(self, path: str, body: bytes) -> str:
        self.bodies[path] = body
        return self.url + path


@contextmanager
def serving(host: str = "127.0.0.1") -> Iterator[Source]:
    """A source listening on ``host`` (a Slurm node reaches this machine at its bridge's address)."""
    source = Source()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            source.requests.append(self.path)
            source.hold.wait()
            if self.path in source.redirects:
                self.send_response(302)
                self.send_header("Location", source.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = source.bodies.get(self.path)
            if self.path in source.errors:
                self.send_error(source.errors[self.path])
                return
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            if self.path not in source.unsized:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.path in source.cut_short:
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                self.connection.close()
                return
            step = 64 << 10
            for at in range(0, len(body), step):
                self.wfile.write(body[at:at + step])
                if source.bytes_per_second:
                    time.sleep(step / source.bytes_per_second)  # the throttle the benchmark measures against

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)

    def handle_error(request: object, address: object) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):  # a fetch that gave up
            ThreadingHTTPServer.handle_error(server, request, address)

    server.handle_error = handle_error  # type: ignore[method-assign]
    server.daemon_threads = True
    source.url = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield source
    finally:
        source.hold.set()
        server.shutdown()
        server.server_close()
