"""How the API and the portal read the bytes of a request, in one place: the limits on a
body and on an id, a bounded, hostile-proof JSON reader that answers unreadable bodies with
a 4xx, and the type of a name in a URL path.

The request models themselves (strict: a boolean is not a number) are in
``trainyard.schemas``; this module is what stands between the socket and them.

FastAPI parses JSON bodies with ``json.loads``, which raises a bare ``ValueError`` for an
integer literal of more than 4,300 digits and ``RecursionError`` for deep nesting; FastAPI
then answers "There was an error parsing the body" without saying where. `BodyRoute` reads
the body itself: bounded in size, such integers kept as a marker that validation rejects by
field path, and every unreadable body answered 413 or 422 in Trainyard's error format.
JSON also lets through lone UTF-16 surrogates (``"\\ud800"``), which no UTF-8 answer, log or
PostgreSQL text can hold: a body with one, in any key or value, is refused here at its path,
so that no route answers 500 for one (a node label's key once did).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import HTTPException, Path, Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from trainyard.schemas.requests import NO_NUL
from trainyard.spec.plaindata import OversizedNumber

MAX_JSON_BODY_BYTES = 64 * 1024
MAX_JOB_FILE_BYTES = 1 << 20  # a job file, as the API takes it (YAML or JSON) and the Submit page
# Longer integer literals are kept as `OversizedNumber` markers (the job-file loader's own):
# Python refuses to convert more than 4,300 digits, and no field of ours holds a number
# anywhere near this long.
MAX_INTEGER_DIGITS = 100

_SURROGATE = re.compile("[\ud800-\udfff]")

MAX_ID = 2**31 - 1  # ids are 32-bit integers in PostgreSQL

# A name in a URL path (user, group, virtual cluster, node).
PathName = Annotated[str, Path(max_length=255, pattern=NO_NUL)]


class BodyError(HTTPException):
    """A body that cannot be read as JSON at all; carries Trainyard's ``errors`` list."""

    def __init__(self, status: int, message: str, path: str = "<body>") -> None:
        super().__init__(status, message)
        self.errors = [{"path": path, "message": message}]


def _parse_int(literal: str) -> int | OversizedNumber:
    digits = len(literal.lstrip("-"))
    return int(literal) if digits <= MAX_INTEGER_DIGITS else OversizedNumber(digits)


def load_json_body(body: bytes) -> Any:
    """The parsed body, or a `BodyError` saying what is wrong and where."""
    try:
        data = json.loads(body, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise BodyError(422, f"the body is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                        f"<line {exc.lineno}, column {exc.colno}>") from None
    except UnicodeDecodeError:
        raise BodyError(422, "the body is not UTF-8 text") from None
    except RecursionError:
        raise BodyError(422, "the body nests arrays or objects too deeply") from None
    _refuse_lone_surrogates(data)
    return data


def printable(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate written as its escape (``\\ud800``)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _refuse_lone_surrogates(data: Any) -> None:
    """Raise a 422 `BodyError` at the first key or string of ``data`` holding a lone surrogate.

    Walked with a stack, not recursion: ``json.loads`` already bounded the depth, and the
    body's size (64 KiB) bounds the work."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            _check_text(value, path or "<body>")
        elif isinstance(value, dict):
            for key, item in value.items():
                child = f"{path}.{printable(key)}" if path else printable(key)
                _check_text(key, child)
                stack.append((child, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))


def _check_text(text: str, path: str) -> None:
    if (match := _SURROGATE.search(text)) is not None:
        raise BodyError(422, f"{path}: contains a lone UTF-16 surrogate (\\u{ord(match.group()):04x} at character "
                             f"{match.start()}), which is not text; write the character itself, or a surrogate "
                             "pair for one beyond U+FFFF", path)


def too_large(limit: int, what: str = "the request body") -> HTTPException:
    return HTTPException(413, f"{what} is larger than {limit // 1024} KiB")


class BodyRequest(Request):
    """A request whose ``json()`` is `load_json_body` over a size-bounded ``body()``."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            declared = self.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_JSON_BODY_BYTES:
                raise too_large(MAX_JSON_BODY_BYTES)
            chunks = bytearray()
            async for chunk in self.stream():
                chunks += chunk
                if len(chunks) > MAX_JSON_BODY_BYTES:
                    raise too_large(MAX_JSON_BODY_BYTES)
            self._body = bytes(chunks)
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = load_json_body(await self.body())
        return self._json


class BodyRoute(APIRoute):
    """An API route that reads JSON bodies through `BodyRequest`.

    FastAPI turns any other exception raised while reading the body into a 400; a client
    that went away is no client error, so `ClientDisconnect` is raised again as itself.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_with_bounds(request: Request) -> Response:
            try:
                return await handler(BodyRequest(request.scope, request.receive))
            except StarletteHTTPException as exc:  # FastAPI raises Starlette's, not its own subclass
                if isinstance(exc.__cause__, ClientDisconnect):
                    raise exc.__cause__ from None
                raise

        return read_with_bounds
