"""What the SDK is given, checked before anything is sent: a job file (a path, the file's
text, or the job as a mapping) turned into a request's bytes and media type, a client's
URL, token and timeout (a ValueError says what is wrong and what to give), and a call's
arguments turned into query parameters."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from trainyard.client_errors import UsageError
from trainyard.client_http import import_httpx, plain_address

# A job file as `Client.submit` takes it: a path (a ``Path``, or a one-line string naming an
# existing file or ending in .yaml/.yml/.json), the file's YAML or JSON text (or bytes), or
# the job as a mapping.
JobFile = str | bytes | os.PathLike[str] | Mapping[str, Any]
JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def job_file_body(job: object, content_type: str | None = None) -> tuple[bytes, str]:
    """The bytes to send for ``job`` (a `JobFile`), and their media type (``content_type``
    if given; else JSON for a mapping or a .json file, YAML otherwise)."""
    if isinstance(job, Mapping):
        try:
            return json.dumps(dict(job), allow_nan=False).encode(), content_type or "application/json"
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the job mapping cannot be sent as JSON: {exc}") from exc
    path = path_named(job)
    if path is not None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read job file {str(path)!r}: {exc.strerror or exc}") from exc
        return data, content_type or ("application/json" if path.suffix == ".json" else "application/yaml")
    if isinstance(job, str):
        return job.encode(), content_type or "application/yaml"
    if isinstance(job, bytes):
        return job, content_type or "application/yaml"
    raise ValueError("a job file is a path, the file's YAML or JSON text, or the job as a dict "
                     f"(got {type(job).__name__})")


def path_named(job: object) -> Path | None:
    """The file ``job`` names, if it is a path rather than a job file's text."""
    if isinstance(job, os.PathLike):
        return Path(job)
    if not isinstance(job, str) or "\n" in job or "\x00" in job:
        return None  # a job file's text has more than one line
    path = Path(job).expanduser()
    if job.strip().endswith(JOB_FILE_SUFFIXES):
        return path
    try:
        return path if path.is_file() else None
    except OSError:  # e.g. a one-line JSON job longer than a file name may be: text, not a path
        return None


# What a job waits for, as `Client.submit` takes it: Slurm's text ("afterok:12:13,afterany:14")
# or a mapping of condition to job ids ({"afterok": [12, 13]}); the job file's ``dependencies``.
Dependencies = str | Mapping[str, Sequence[int]]


def with_dependencies(job: object, dependencies: Dependencies, content_type: str | None = None) -> dict[str, Any]:
    """The job (a `JobFile`) as a mapping, ``dependencies`` added to those its file names;
    the server checks them (unknown conditions and ids are its 422, at the field path)."""
    import yaml  # a job file's reader: not for the calls that send none (issue 33)

    body, _ = job_file_body(job, content_type)
    try:
        document = yaml.safe_load(body)
    except yaml.YAMLError as exc:
        raise ValueError(f"the job file cannot be read to add dependencies to it: {exc}") from exc
    if not isinstance(document, dict):
        raise ValueError("the job file is not a mapping of fields (name, taskRoles, ...)")
    merged = _dependency_map(document.get("dependencies"))
    for condition, ids in _dependency_map(dependencies).items():
        listed = merged.setdefault(condition, [])
        listed += [i for i in ids if i not in listed]
    return {**document, "dependencies": merged}


def _dependency_map(value: object) -> dict[str, list[Any]]:
    if value is None:
        return {}
    if isinstance(value, str):
        parsed: dict[str, list[Any]] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            condition, _, ids = part.partition(":")
            parsed.setdefault(condition.strip(), []).extend(i.strip() for i in ids.split(":") if i.strip())
        return {k: [int(i) if i.isdigit() else i for i in v] for k, v in parsed.items()}
    if isinstance(value, Mapping):
        return {str(k): list(v) if isinstance(v, Sequence) and not isinstance(v, str) else [v]
                for k, v in value.items()}
    raise ValueError(f"dependencies are Slurm's text (afterok:12:13,afterany:14) or a mapping of condition to "
                     f"job ids (got {type(value).__name__})")


def path_segment(name: str) -> str:
    """A name as one URL path segment: a '/' or '?' in it cannot reach another route."""
    return quote(name, safe="@")


def checked_id(value: object, what: str = "job") -> int:
    """A job's (or another thing's) id as the SDK sends it: a whole number, not a bool."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"a {what} id is a whole number, like 12 (got {value!r})")
    return value


def check_client_arguments(url: object, token: object, timeout: object) -> None:
    """Refuse, with a ValueError saying what to give, what httpx would fail on obscurely."""
    if not isinstance(url, str):
        raise ValueError(f"url is the server's address, like http://127.0.0.1:8642 (got {url!r})")
    if token is not None and (not isinstance(token, str) or not token.isascii() or not token.isprintable()):
        raise ValueError("token is the API token's text (ty_…), as `yard token create` prints it")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout is a number of seconds above 0 (got {timeout!r})")
    if plain_address(url):  # http://HOST:PORT, read by httpx as it reads it here: not imported for it
        return
    import_httpx()
    import httpx

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{url!r} is not a URL ({exc}); give the server's, like http://127.0.0.1:8642") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{url!r} is not an http(s) address; give the server's, like http://127.0.0.1:8642")


Moment = str | datetime | timedelta | None  # a window's bound, see ``Client.job_metrics``


def new_key() -> str:
    """A new random Idempotency-Key: a UUID 4's text, as ``str(uuid.uuid4())`` (without the
    ``uuid`` module, which imports ``platform``: a few ms of every `yard submit`, issue 33)."""
    value = bytearray(os.urandom(16))
    value[6], value[8] = value[6] & 0x0F | 0x40, value[8] & 0x3F | 0x80  # version 4, RFC 4122's variant
    text = value.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def given(**values: Any) -> dict[str, Any]:
    """The values that are not None: the parameters a call was given."""
    return {k: v for k, v in values.items() if v is not None}


def window(since: Moment, until: Moment) -> dict[str, str]:
    """The query parameters of a window's bounds."""
    params = {}
    for name, bound in (("since", since), ("until", until)):
        if isinstance(bound, timedelta):
            params[name] = f"{bound.total_seconds():g}s"
        elif isinstance(bound, datetime):
            params[name] = bound.isoformat()
        elif bound is not None:
            params[name] = str(bound)
    return params
