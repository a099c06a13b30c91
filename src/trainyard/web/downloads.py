"""A job's file as an HTTP answer, for the API and the portal alike: streamed from its open
descriptor a block at a time, whole (200) or one byte range (206, ``Content-Range``; 416 for
a range past its end), always as an attachment of type ``application/octet-stream`` with
``nosniff`` and a sandboxing CSP: whatever a job wrote (HTML, SVG) never runs as a page of
this server's origin, where an admin's session would run it."""

from __future__ import annotations

from urllib.parse import quote

from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from trainyard.services.job_files import OpenFile, Unsatisfiable, byte_range

DOWNLOAD_HEADERS = {
    "Accept-Ranges": "bytes",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "sandbox; default-src 'none'",
    "Cache-Control": "private, no-store",
}


def file_response(opened: OpenFile, range_header: str | None, name: str) -> Response:
    """``opened``'s bytes as asked by ``range_header``; the answer closes the descriptor."""
    headers = {**DOWNLOAD_HEADERS, "Content-Disposition": attachment(name)}
    try:
        wanted = byte_range(range_header, opened.size)
    except BaseException as exc:
        opened.close()
        if not isinstance(exc, Unsatisfiable):
            raise
        why = f"the range starts past the file's end: it has {opened.size} bytes"
        return JSONResponse({"detail": why, "errors": [{"path": "Range", "message": why}]}, status_code=416,
                            headers={**headers, "Content-Range": f"bytes */{opened.size}"})
    start, end = wanted if wanted is not None else (0, opened.size)
    headers["Content-Length"] = str(end - start)
    status = 200
    if wanted is not None:
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{opened.size}"
    return StreamingResponse(iterate_in_threadpool(opened.chunks(start, end)), status_code=status,
                             media_type="application/octet-stream", headers=headers)


def attachment(name: str) -> str:
    """A ``Content-Disposition`` naming the file, whatever characters its name holds."""
    plain = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name) or "file"
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"
