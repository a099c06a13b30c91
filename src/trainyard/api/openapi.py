"""The API's description of itself, kept true: the error body and the error statuses each
operation declares, the job-file schema of ``POST /jobs``, and ``/docs`` served from files
shipped in the package (no CDN), with the bearer-token "Authorize" button.

FastAPI infers the rest (paths, parameters, request and response models, and the bearer
scheme from `deps.bearer`). It would also declare a 422 of its own ``HTTPValidationError``
shape, which Trainyard never sends; declaring our 422 in `errors` replaces it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from trainyard.spec.models import JobSpec

SWAGGER_UI = Path(__file__).parent / "static" / "swagger-ui"
DOCS_ASSETS = "/docs/assets"

_COMPONENTS = "#/components/schemas/"


class ErrorItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    path: str = Field(description="Where: a field path such as taskRoles.worker.instances, a query "
                                  "parameter, '<line 3, column 7>', or '<document>' for the whole body")
    message: str = Field(description="What is wrong there")


class ErrorBody(BaseModel):
    """Every error Trainyard answers, whatever the status."""

    detail: str = Field(description="What is wrong and what to do, in one message")
    errors: list[ErrorItem] = Field(description="One entry per problem; may be empty")


_MEANINGS = {
    401: "No bearer token, or an invalid or revoked one",
    403: "The caller may not do this",
    404: "No such resource (another user's job counts as none)",
    409: "The resource already exists, or is in a state that forbids this",
    413: "The request body is too large",
    416: "The `Range` starts past the file's end (`Content-Range: bytes */SIZE` says its size)",
    422: "The request is invalid; `errors` names each field",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of an operation that can answer these error statuses."""
    declared: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        declared[status] = {"model": ErrorBody, "description": _MEANINGS[status]}
        if status == 401:
            declared[status]["headers"] = {
                "WWW-Authenticate": {"description": "Always `Bearer`", "schema": {"type": "string"}}}
    return declared


_JOB_FILE_CONTENT = {
    "application/yaml": {"schema": {"$ref": _COMPONENTS + "JobSpec"}},
    "application/json": {"schema": {"$ref": _COMPONENTS + "JobSpec"}},
}

JOB_FILE_BODY = {
    "requestBody": {
        "required": True,
        "content": _JOB_FILE_CONTENT,
        "description": "A job file (OpenPAI job protocol v2, relaxed and extended), as YAML or JSON. "
                       "At most 1 MiB.",
    }
}

CLONE_BODY = {
    "requestBody": {
        "required": False,
        "content": _JOB_FILE_CONTENT,
        "description": "Optional: a whole job file to run instead of the original, as YAML or JSON (at most "
                       "1 MiB); values it still shows masked (******) are filled from the original.",
    }
}


def _job_file_schemas() -> dict[str, Any]:
    schema = JobSpec.model_json_schema(ref_template=_COMPONENTS + "{model}")
    defs = schema.pop("$defs", {})
    return {**defs, "JobSpec": schema}


def _document(app: FastAPI, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = build()
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in _job_file_schemas().items():
        if name in schemas:
            raise RuntimeError(f"the job file's schema {name!r} clashes with an API model of that name")
        schemas[name] = schema
    # FastAPI adds these for its own 422 body, which no operation declares any more.
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    app.openapi_schema = doc
    return doc


def install(app: FastAPI) -> None:
    """Serve the corrected OpenAPI document and the offline ``/docs`` on ``app``."""
    build = app.openapi
    app.openapi = lambda: _document(app, build)  # type: ignore[method-assign]
    app.mount(DOCS_ASSETS, StaticFiles(directory=SWAGGER_UI), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "",
            title=f"{app.title} API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},  # the default asks an online validator
        )
