"""How the SDK talks HTTP: httpx, and for the ``yard`` program the standard library's
``http.client`` (issue 33: importing httpx and httpcore was ~48 ms of the ~120 ms of CPU a
`yard jobs` or `yard submit` took; ``http.client`` is ~13 ms of it).

``yard`` (the program: ``cli/main.py`` calls `for_the_program`) talks plain HTTP to a plain
``http://`` server on Linux with no proxy variable set; every request it can send as simply
as that (a method, a path, query parameters, a body of bytes, headers of printable ASCII)
goes over one ``http.client.HTTPConnection``, kept alive between the calls of one command.
Anything else (streams, ``json=``, a timeout of its own, TLS, a proxy, a header httpx would
encode, an address that is not a plain ``http://host:port``) goes to an httpx client made at
its first use, as every SDK caller's requests do. What it gives up: HTTP/1.1 only, no
compression (it asks for none), no redirects (the SDK follows none either).
"""

from __future__ import annotations

import http.client
import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

if TYPE_CHECKING:
    import httpx

# What httpx and httpcore import for uses the CLI never has: httpx's own command line (click,
# rich and pygments where installed: ~30 ms) and httpcore's async backends (trio, anyio: up to
# ~45 ms). The `yard` program loads them as missing (issue 33).
NOT_FOR_THE_CLI = ("httpx._main", "trio", "anyio")
# A plain address: http://, a host name or IPv4 address, a port; nothing httpx would read otherwise.
_PLAIN_ADDRESS = re.compile(r"http://([A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}))(?::([0-9]{1,5}))?(/[A-Za-z0-9._~/-]*)?",
                            re.ASCII)
_PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"  # what may stand in a URL's path as it is (RFC 3986)

_program = False


def for_the_program() -> None:
    """``yard`` is the program: its clients send what they can over `PlainHTTP`, and httpx is
    loaded without ``NOT_FOR_THE_CLI``."""
    global _program
    _program = True


def http_client(url: str, token: str | None, timeout: float) -> Any:
    """The client of ``Client._http``: an httpx client, or for the program a `PlainHTTP` where
    the address allows (httpx made only if a request needs it)."""
    base, headers = url + "/api/v1", {"Authorization": f"Bearer {token}"} if token else {}
    if _program and plain_address(url) and sys.platform.startswith("linux") and \
            not any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return PlainHTTP(base, headers, timeout)
    return _httpx_client(base, headers, timeout, needs_tls(url))


def plain_address(url: str) -> bool:
    """Whether ``url`` is ``http://HOST[:PORT][/PATH]`` in the plainest spelling, one that
    httpx reads the same (so httpx's own check of it can be skipped)."""
    found = _PLAIN_ADDRESS.fullmatch(url)
    return found is not None and (found.group(2) is None or 0 < int(found.group(2)) < 65536)


def needs_tls(url: str) -> bool:
    """Whether httpx must load its CA bundle (after imports, a `yard` command's costliest step):
    not for a plain-http server reached without a proxy (found as httpx finds them)."""
    if not url.lower().startswith("http://"):
        return True
    from urllib.request import getproxies  # loaded by httpx already

    return any(scheme in ("http", "all") for scheme in getproxies())


def _httpx_client(base: str, headers: dict[str, str], timeout: float, verify: bool) -> httpx.Client:
    import_httpx()
    import httpx

    return httpx.Client(base_url=base, headers=headers, timeout=timeout, verify=verify)


def import_httpx() -> None:
    """Import httpx and httpcore; in the program, without ``NOT_FOR_THE_CLI``: each is an
    ImportError while they load (both take that as not installed), and importable again after.
    Their sync client is unchanged; httpcore's async one is then unavailable in this process,
    which has no use for it. Nothing is done where either is loaded already."""
    if not _program or "httpx" in sys.modules or "httpcore" in sys.modules:
        return
    hidden = [name for name in NOT_FOR_THE_CLI if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # Python's marker: import fails
    try:
        import httpcore  # noqa: F401
        import httpx  # noqa: F401
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


class PlainTimeout(TimeoutError):
    """The server did not answer in time."""


class PlainUnreachable(ConnectionError):
    """No connection, a lost one, or an answer that is not HTTP/1.1."""


def failure(exc: BaseException) -> str | None:
    """What ``Client._sending`` makes of an exception from sending: ``"timeout"``,
    ``"unreachable"``, ``"usage"`` (a request that cannot be sent), or None (not a sending
    failure). httpx's are looked at only where httpx is loaded: else none can be one."""
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.TimeoutException) or isinstance(exc, PlainTimeout):
        return "timeout"
    if httpx is not None and isinstance(exc, httpx.TransportError) or isinstance(exc, PlainUnreachable):
        return "unreachable"
    if httpx is not None and isinstance(exc, (httpx.HTTPError, httpx.InvalidURL)) or \
            isinstance(exc, (TypeError, ValueError)):
        return "usage"
    return None


class Headers(dict[str, str]):
    """An answer's headers, by lower-case name; ``get`` takes a name in any case."""

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


class Response:
    """An answer, with the part of ``httpx.Response`` the SDK reads."""

    def __init__(self, status_code: int, reason_phrase: str, headers: Headers, content: bytes) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.headers = headers
        self.content = content

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        found = re.search(r"charset=([\w-]+)", self.headers.get("content-type", ""))
        try:
            return self.content.decode(found.group(1) if found else "utf-8", errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        import json

        return json.loads(self.content)


class PlainHTTP:
    """HTTP/1.1 to a plain ``http://`` server over one kept-alive socket; what it does not send
    itself goes to an httpx client made at its first use (``fallback``)."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        found = _PLAIN_ADDRESS.fullmatch(base_url)
        assert found is not None, base_url
        self._host, self._port = found.group(1), int(found.group(2) or 80)
        self._prefix = (found.group(3) or "").rstrip("/")
        self._base, self._timeout = base_url, timeout
        self.headers = headers
        self._conn: http.client.HTTPConnection | None = None
        self._fallback: httpx.Client | None = None

    def fallback(self) -> httpx.Client:
        if self._fallback is None:
            self._fallback = _httpx_client(self._base, self.headers, self._timeout, False)
        return self._fallback

    def __getattr__(self, name: str) -> Any:  # stream, get, …: httpx's
        if name.startswith("_"):  # not one of httpx's calls (and not set yet, before __init__ ends)
            raise AttributeError(name)
        return getattr(self.fallback(), name)

    def close(self) -> None:
        self._drop()
        if self._fallback is not None:
            self._fallback.close()

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                content: bytes | str | None = None, headers: Mapping[str, str] | None = None,
                **other: Any) -> Any:
        plain = self._plain(method, path, params, content, headers or {}) if not other else None
        if plain is None:  # not as simple as this client sends: httpx sends it
            return self.fallback().request(method, path, params=params, content=content, headers=headers, **other)
        target, sent = plain
        body = content.encode() if isinstance(content, str) else content or b""
        return self._exchange(method.upper(), target, body, sent)

    def _plain(self, method: str, path: str, params: Mapping[str, Any] | None, content: object,
               headers: Mapping[str, str]) -> tuple[str, dict[str, str]] | None:
        """The request's target and headers, or None where httpx would send something this does not."""
        if not (isinstance(content, (bytes, str)) or content is None) or not method.isalpha() or \
                any(c in path for c in "?#"):
            return None
        target = quote(self._prefix + path, safe=_PATH_SAFE)
        if params:
            pairs = []
            for name, value in params.items():
                values = value if isinstance(value, (list, tuple)) else [value]
                if not all(isinstance(v, (str, int, float)) for v in values):
                    return None  # httpx's own reading of None and the like
                pairs += [(name, ("true" if v else "false") if isinstance(v, bool) else str(v)) for v in values]
            target += "?" + urlencode(pairs)
        sent = {"Accept": "*/*", "Accept-Encoding": "identity", "User-Agent": "trainyard-yard", **self.headers,
                **headers}
        if not all(_token(k) and _value(v) for k, v in sent.items()):
            return None  # httpx's encoding of it, or its refusal
        return target, sent

    def _connection(self) -> http.client.HTTPConnection:
        """The kept-alive connection, new where there is none or the server closed it."""
        if self._conn is not None and self._conn.sock is not None and _readable(self._conn.sock):
            self._drop()  # closed by the server (or it spoke out of turn): not used again
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _exchange(self, method: str, target: str, body: bytes, headers: dict[str, str]) -> Response:
        connection = self._connection()
        try:
            connection.request(method, target, body=body, headers=headers)
            answer = connection.getresponse()
            content = answer.read()
        except TimeoutError as exc:
            self._drop()
            raise PlainTimeout(f"no answer in time: {exc}") from exc
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise PlainUnreachable(_said(exc)) from exc
        found = Headers()
        for name, value in answer.getheaders():
            key = name.lower()
            found[key] = f"{found[key]}, {value}" if key in found else value
        encoding = found.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "deflate"):
            import zlib

            content = zlib.decompress(content, 47)  # gzip or zlib, by its header
        elif encoding != "identity":
            raise PlainUnreachable(f"an answer in an encoding not asked for: {encoding[:40]!r}")
        return Response(answer.status, answer.reason, found, content)


def _said(exc: BaseException) -> str:
    """What went wrong in words, for ``ServerUnreachable``'s message."""
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without answering"
    if isinstance(exc, http.client.IncompleteRead):
        return "the server closed the connection in the middle of its answer"
    if isinstance(exc, http.client.BadStatusLine):
        return f"not an HTTP/1.1 answer: {str(exc)[:80]!r}"
    return str(exc) or type(exc).__name__


def _token(name: str) -> bool:
    return name.isascii() and name.isprintable() and name != "" and not any(c in name for c in ' :"(),/;<=>?@[\\]{}')


def _value(value: object) -> bool:
    return isinstance(value, str) and value.isascii() and value.isprintable()


def _readable(sock: Any) -> bool:
    """Whether a kept-alive connection has something to read before a request: the server
    closed it (or said something out of turn); it is not used again."""
    import select

    poll = select.poll()  # not select(): any descriptor number
    poll.register(sock, select.POLLIN)
    return bool(poll.poll(0))
