"""JSON errors of the REST API: ``{"error": message}`` with the status each failure means."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse

from awa.domain.errors import (
    AwaError,
    CallbackNotFound,
    DatabaseError,
    SchemaNotMigrated,
    UniqueConflict,
    ValidationError,
)

log = logging.getLogger("awa.web")


class ApiError(Exception):
    """An error with its HTTP status, raised by handlers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


def status_of(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and message for an exception a handler let through."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        # A body read through a middleware's task group (a body over the limit) arrives
        # wrapped in a group of one.
        return status_of(exc.exceptions[0])
    if isinstance(exc, ApiError):
        return exc.status, exc.message
    if isinstance(exc, UniqueConflict):
        return 409, str(exc)
    if isinstance(exc, CallbackNotFound):
        return 404, str(exc)
    if isinstance(exc, ValidationError | ValueError | TypeError):
        return 400, str(exc)
    if isinstance(exc, SchemaNotMigrated):
        return 503, str(exc)
    if isinstance(exc, DatabaseError):
        return 500, f"database error: {exc}"
    if isinstance(exc, AwaError):
        return 400, str(exc)
    return 500, "internal error (see the server log)"


async def api_error_response(request: Request, exc: Exception) -> JSONResponse:
    status, message = status_of(exc)
    if status >= 500 and status != 503:
        log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
    return JSONResponse({"error": message}, status_code=status)
