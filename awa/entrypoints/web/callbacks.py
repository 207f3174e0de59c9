"""The callback receiver: external systems complete, fail or heartbeat a waiting job.

``POST {prefix}/{callback_id}/complete {payload}``, ``/fail {error}`` and ``/heartbeat
{timeout_seconds}`` answer ``{id, callback_id, state}``. With a secret configured every
request needs ``X-Awa-Signature`` (``awa.callback_contract``), compared in constant time;
a missing or wrong one gets 401 and changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from awa.callback_contract import (
    DEFAULT_HEARTBEAT_TIMEOUT_SECS,
    REQUEST_SIGNATURE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify,
)
from awa.callback_contract import verify_callback_request as verify_request
from awa.entrypoints.web import params
from awa.entrypoints.web.errors import ApiError, api_error_response, bad_request
from awa.entrypoints.web.state import WebState, web_state

log = logging.getLogger("awa.web.callbacks")

ACTIONS = ("complete", "fail", "heartbeat")
#: A heartbeat may push the timeout at most this far (a year) into the future.
MAX_TIMEOUT_SECS = 365 * 24 * 3600


def check_signature(secret: bytes | None, callback_id: str, signature: str | None) -> None:
    """Raise 401 unless ``signature`` signs ``callback_id`` (no secret: accept)."""
    if secret is None:
        return
    if not signature:
        raise ApiError(401, f"missing {SIGNATURE_HEADER} header")
    if not verify(secret, callback_id, signature):
        raise ApiError(401, f"invalid {SIGNATURE_HEADER}")


async def authenticate(request: Request, web: WebState, callback_id: str, action: str) -> None:
    """Raise 401 unless the request is signed as the configuration demands."""
    config = web.config
    secret = config.callback_secret
    if secret is None:
        return
    stamp = request.headers.get(TIMESTAMP_HEADER)
    signature = request.headers.get(REQUEST_SIGNATURE_HEADER)
    if stamp is None and signature is None:
        if config.callback_require_request_signature:
            raise ApiError(
                401,
                f"missing {TIMESTAMP_HEADER} and {REQUEST_SIGNATURE_HEADER} headers "
                "(this receiver refuses signatures over the callback id alone)",
            )
        check_signature(secret, callback_id, request.headers.get(SIGNATURE_HEADER))
        return
    if not stamp or not signature:
        raise ApiError(401, f"{TIMESTAMP_HEADER} and {REQUEST_SIGNATURE_HEADER} go together")
    now, window = web.clock(), config.callback_replay_window
    body = await request.body()
    if not verify_request(
        secret, callback_id, action, body, stamp, signature, now=now, window=window
    ):
        raise ApiError(
            401,
            f"invalid {REQUEST_SIGNATURE_HEADER}, or {TIMESTAMP_HEADER} is not integer "
            f"Unix seconds within {window:g} s of the server's clock",
        )
    if not web.seen_signatures.first_use(signature, int(stamp) + window, now):
        raise ApiError(401, f"{REQUEST_SIGNATURE_HEADER} was already used (a replay)")


async def receive(request: Request) -> Response:
    try:
        return await _receive(request)
    except Exception as exc:
        return await api_error_response(request, exc)


async def _receive(request: Request) -> Response:
    web = web_state(request)
    callback_id = request.path_params["callback_id"]
    action = request.path_params["action"]
    if action not in ACTIONS:
        raise ApiError(404, f"unknown callback action {action!r} (one of {', '.join(ACTIONS)})")
    await authenticate(request, web, callback_id, action)
    await web.guard.require_writable()
    doc = await params.body(request)
    client = web.client
    job: Any
    if action == "complete":
        payload = doc.get("payload")
        if payload is not None and not isinstance(payload, dict):
            raise bad_request("payload must be a JSON object")
        job = await client.complete_external(callback_id, payload)
    elif action == "fail":
        error = doc.get("error")
        if not isinstance(error, str) or not error:
            raise bad_request("error must be a non-empty string")
        job = await client.fail_external(callback_id, error)
    else:
        timeout = doc.get("timeout_seconds", DEFAULT_HEARTBEAT_TIMEOUT_SECS)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_TIMEOUT_SECS
        ):
            raise bad_request(f"timeout_seconds must be a number in (0, {MAX_TIMEOUT_SECS}]")
        job = await client.heartbeat_callback(callback_id, float(timeout))
    await web.mutated()
    log.info("callback %s %s: job %s is now %s", callback_id, action, job.id, job.state)
    return JSONResponse({"id": job.id, "callback_id": callback_id, "state": str(job.state)})


def routes(prefix: str) -> list[BaseRoute]:
    return [Route(f"{prefix}/{{callback_id}}/{{action}}", receive, methods=["POST"])]
