"""Errors a service raises for a caller to act on; the API maps each to one HTTP status."""

from __future__ import annotations


class ServiceError(Exception):
    status = 400

    def __init__(self, message: str, *, details: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class NotFound(ServiceError):
    status = 404


class Forbidden(ServiceError):
    status = 403


class Conflict(ServiceError):
    status = 409


class Invalid(ServiceError):
    """The request is well-formed but cannot be accepted (e.g. a job that can never fit)."""

    status = 422


class TooMany(ServiceError):
    """The caller holds as many of something as an admin allows (e.g. waiting jobs)."""

    status = 429
