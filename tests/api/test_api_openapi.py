"""The OpenAPI document tells the truth, and /docs works without the internet."""

from __future__ import annotations

import re

import yaml
from api.harness import Api

from trainyard.api.openapi import SWAGGER_UI
from trainyard.spec.models import JobSpec

ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}


def operations(doc: dict):
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield f"{method.upper()} {path}", op


def test_the_bearer_scheme_is_declared_and_every_operation_but_healthz_requires_it(api: Api) -> None:
    doc = api.client().get("/api/v1/openapi.json").json()
    scheme = doc["components"]["securitySchemes"]["HTTPBearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer") and "yard token create" in scheme["description"]
    for name, op in operations(doc):
        if name == "GET /api/v1/healthz":
            assert "security" not in op and set(op["responses"]) == {"200"}
        else:
            assert op["security"] == [{"HTTPBearer": []}], name
            assert "401" in op["responses"], name


def test_every_error_status_is_declared_with_the_body_trainyard_sends(api: Api) -> None:
    doc = api.client().get("/api/v1/openapi.json").json()
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    error = doc["components"]["schemas"]["ErrorBody"]
    assert set(error["required"]) == {"detail", "errors"}
    for name, op in operations(doc):
        for status, response in op["responses"].items():
            if int(status) >= 400:
                assert response["content"] == {"application/json": {"schema": ERROR_BODY}}, (name, status)
    admin_only = {"GET /api/v1/users", "POST /api/v1/users", "POST /api/v1/vcs", "GET /api/v1/quotas"}
    for name, op in operations(doc):
        assert ("403" in op["responses"]) >= (name in admin_only), name

    response = api.user.get("/api/v1/users")  # what a 403 really looks like
    assert response.status_code == 403 and set(response.json()) == {"detail", "errors"}


def test_post_jobs_declares_the_job_file_schema_as_json_and_yaml(api: Api) -> None:
    doc = api.client().get("/api/v1/openapi.json").json()
    body = doc["paths"]["/api/v1/jobs"]["post"]["requestBody"]
    ref = {"$ref": "#/components/schemas/JobSpec"}
    assert body["content"] == {"application/json": {"schema": ref}, "application/yaml": {"schema": ref}}
    declared = doc["components"]["schemas"]["JobSpec"]
    assert declared["required"] == JobSpec.model_json_schema()["required"]
    assert set(declared["properties"]) == set(JobSpec.model_fields)
    assert {"TaskRole", "ResourcePerInstance"} <= set(doc["components"]["schemas"])

    job = {"name": "from-schema", "taskRoles": {"main": {"commands": ["true"]}}}
    as_yaml = api.user.post("/api/v1/jobs", content=yaml.safe_dump(job), headers={"content-type": "application/yaml"})
    assert as_yaml.status_code == 201, as_yaml.text


def test_docs_are_served_from_the_package_without_any_outside_url(api: Api) -> None:
    page = api.client().get("/docs")
    assert page.status_code == 200
    urls = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(r"url: '([^']+)'", page.text)
    assert urls and all(u.startswith("/") for u in urls), urls
    assert "/api/v1/openapi.json" in urls
    for url in urls:
        assert api.client().get(url).status_code == 200, url
    bundle = api.client().get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.content == (SWAGGER_UI / "swagger-ui-bundle.js").read_bytes()
    assert "5.35.0" in (SWAGGER_UI / "README.md").read_text() and (SWAGGER_UI / "LICENSE").exists()
    assert api.client().get("/redoc").status_code == 404  # ReDoc would load from a CDN
