"""The OpenAPI 3.0 document served at ``/api/openapi.json``.

Written by hand next to the routes it describes; a schemathesis run in the test suite
checks every response against it.
"""

from __future__ import annotations

import functools
from typing import Any

from awa.callback_contract import DEFAULT_PATH_PREFIX, SIGNATURE_HEADER
from awa.domain.states import JobState

STATES = [str(s) for s in JobState]
ERRORS = {
    "400": "invalid input",
    "401": "authentication required, or a bad callback signature",
    "403": "cross-site request, or missing CSRF token",
    "404": "not found",
    "409": "unique-key conflict, or a batch operation that has already finished",
    "503": "read-only mode (mutations are disabled), or the schema is not migrated",
}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(name: str) -> dict[str, Any]:
    return {"allOf": [_ref(name)], "nullable": True}


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


INT = {"type": "integer"}
STR = {"type": "string"}
NSTR = {"type": "string", "nullable": True}
NINT = {"type": "integer", "nullable": True}
BOOL = {"type": "boolean"}
ANY_OBJ = {"type": "object", "additionalProperties": True}

SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": STR}, ["error"]),
    "Job": _obj(
        {
            "id": INT,
            "kind": STR,
            "queue": STR,
            "state": {"type": "string", "enum": STATES},
            "priority": INT,
            "original_priority": INT,
            "attempt": INT,
            "max_attempts": INT,
            "run_lease": INT,
            "run_at": NSTR,
            "created_at": NSTR,
            "finalized_at": NSTR,
            "tags": _array(STR),
            "errors": _array(ANY_OBJ),
        },
        ["id", "kind", "queue", "state", "priority", "attempt", "max_attempts"],
    ),
    "JobDocument": _obj(
        {
            "job": _ref("Job"),
            "summary": ANY_OBJ,
            "timeline": _array(ANY_OBJ),
            "dlq": {**ANY_OBJ, "nullable": True},
        },
        ["job", "summary", "timeline"],
    ),
    "Queue": _obj(
        {
            "queue": STR,
            **{state: INT for state in STATES},
            "total_queued": INT,
            "completed_last_hour": INT,
            "lag_seconds": {"type": "number", "nullable": True},
            "paused": BOOL,
            "dlq_depth": INT,
        },
        ["queue", "total_queued", "paused", "dlq_depth", *STATES],
    ),
    "QueueRuntime": _obj(
        {
            "queue": STR,
            "instance_count": INT,
            "in_flight": INT,
            "config_mismatch": BOOL,
            "instances": _array(ANY_OBJ),
        },
        ["queue", "config_mismatch"],
    ),
    "Kind": _obj(
        {"kind": STR, "job_count": INT, "queue_count": INT, "completed_last_hour": INT},
        ["kind", "job_count", "queue_count", "completed_last_hour"],
    ),
    "DlqEntry": _obj(
        {"job": _ref("Job"), "reason": STR, "dlq_at": NSTR, "original_run_lease": INT},
        ["job", "reason", "dlq_at"],
    ),
    "DlqDepth": _obj(
        {"total": INT, "by_queue": _array(_obj({"queue": STR, "count": INT}))},
        ["total", "by_queue"],
    ),
    "Stats": {"type": "object", "additionalProperties": INT},
    "Bucket": _obj(
        {"bucket": STR, "state": {"type": "string", "enum": STATES}, "count": INT},
        ["bucket", "state", "count"],
    ),
    "Capabilities": _obj(
        {
            "read_only": BOOL,
            "read_only_reason": NSTR,
            "poll_interval_ms": INT,
            "instance_name": NSTR,
            "instance_color": NSTR,
            "peers": _array(_obj({"name": STR, "url": STR})),
            "features": {"type": "object", "additionalProperties": BOOL},
        },
        ["read_only", "poll_interval_ms", "peers"],
    ),
    "Runtime": _obj(
        {
            "total": INT,
            "live": INT,
            "stale": INT,
            "healthy": INT,
            "leader": INT,
            "instances": _array(ANY_OBJ),
        },
        ["total", "live", "stale", "healthy", "leader", "instances"],
    ),
    "Ok": _obj({"ok": BOOL}, ["ok"]),
    "Drained": _obj({"drained": INT}, ["drained"]),
    "Count": _obj({"count": INT}, ["count"]),
    "CallbackResult": _obj(
        {"id": INT, "callback_id": STR, "state": {"type": "string", "enum": STATES}},
        ["id", "state"],
    ),
}

JOB_ID = {
    "name": "job_id",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 1, "maximum": 2**62},
}


def _path(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "pattern": "^[A-Za-z0-9_.:-]+$"},
    }


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


LIMIT = _query("limit", {"type": "integer", "minimum": 1, "maximum": 500})
FILTER = [_query(n, STR) for n in ("kind", "queue", "tag")]


def _op(
    summary: str,
    response: dict[str, Any] | None,
    *,
    parameters: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    body_required: bool = False,
) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {
            "description": "OK",
            "content": {
                "application/json": {"schema": response if response else {"nullable": True}}
            },
        }
    }
    for code, text in ERRORS.items():
        responses[code] = {
            "description": text,
            "content": {"application/json": {"schema": _ref("Error")}},
        }
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": body}},
        }
    return op


FILTER_BODY = _obj({"kind": STR, "queue": STR, "tag": STR, "all": BOOL})


@functools.cache
def openapi_document(callback_prefix: str = DEFAULT_PATH_PREFIX) -> dict[str, Any]:
    """The API description (the callback routes under ``callback_prefix``)."""
    api = "/api"
    paths: dict[str, Any] = {
        f"{api}/capabilities": {"get": _op("Server identity and mode", _ref("Capabilities"))},
        f"{api}/jobs": {
            "get": _op(
                "Jobs, newest first",
                _array(_ref("Job")),
                parameters=[
                    _query("state", {"type": "string", "enum": STATES}),
                    *FILTER,
                    _query("before_id", INT),
                    LIMIT,
                ],
            )
        },
        f"{api}/jobs/{{job_id}}": {
            "get": _op(
                "One job with summary, timeline and DLQ block",
                _ref("JobDocument"),
                parameters=[JOB_ID],
            )
        },
        f"{api}/jobs/{{job_id}}/retry": {
            "post": _op("Retry a job", _nullable("Job"), parameters=[JOB_ID])
        },
        f"{api}/jobs/{{job_id}}/cancel": {
            "post": _op("Cancel a job", _nullable("Job"), parameters=[JOB_ID])
        },
        f"{api}/jobs/bulk-retry": {
            "post": _op(
                "Retry jobs by id",
                _array(_ref("Job")),
                body=_obj({"ids": _array(INT)}, ["ids"]),
                body_required=True,
            )
        },
        f"{api}/jobs/bulk-cancel": {
            "post": _op(
                "Cancel jobs by id",
                _array(_ref("Job")),
                body=_obj({"ids": _array(INT)}, ["ids"]),
                body_required=True,
            )
        },
        f"{api}/stats": {"get": _op("Jobs per state", _ref("Stats"))},
        f"{api}/stats/timeseries": {
            "get": _op(
                "Jobs finalized per minute and state",
                _array(_ref("Bucket")),
                parameters=[_query("minutes", {"type": "integer", "minimum": 1, "maximum": 1440})],
            )
        },
        f"{api}/stats/kinds": {"get": _op("Distinct kinds", _array(STR))},
        f"{api}/stats/queues": {"get": _op("Distinct queues", _array(STR))},
        f"{api}/queues": {"get": _op("Queue overviews", _array(_ref("Queue")))},
        f"{api}/queues/runtime": {
            "get": _op("Queue capacity across runtimes", _array(_ref("QueueRuntime")))
        },
        f"{api}/queues/{{queue}}": {
            "get": _op("One queue", _ref("Queue"), parameters=[_path("queue")])
        },
        f"{api}/queues/{{queue}}/pause": {
            "post": _op(
                "Pause a queue",
                _ref("Ok"),
                parameters=[_path("queue")],
                body=_obj({"paused_by": STR}),
                body_required=True,
            )
        },
        f"{api}/queues/{{queue}}/resume": {
            "post": _op("Resume a queue", _ref("Ok"), parameters=[_path("queue")])
        },
        f"{api}/queues/{{queue}}/drain": {
            "post": _op(
                "Cancel a queue's pending jobs", _ref("Drained"), parameters=[_path("queue")]
            )
        },
        f"{api}/kinds": {"get": _op("Kind overviews", _array(_ref("Kind")))},
        f"{api}/dlq": {
            "get": _op(
                "DLQ entries, newest first",
                _array(_ref("DlqEntry")),
                parameters=[
                    *FILTER,
                    _query("before_id", INT),
                    _query("before_dlq_at", {"type": "string", "format": "date-time"}),
                    LIMIT,
                ],
            )
        },
        f"{api}/dlq/depth": {"get": _op("DLQ depth", _ref("DlqDepth"))},
        f"{api}/dlq/{{job_id}}": {
            "get": _op(
                "One DLQ entry (null when absent)", _nullable("DlqEntry"), parameters=[JOB_ID]
            ),
            "delete": _op("Purge one DLQ entry", _ref("Count"), parameters=[JOB_ID]),
        },
        f"{api}/dlq/{{job_id}}/retry": {
            "post": _op(
                "Retry a DLQ entry",
                _nullable("Job"),
                parameters=[JOB_ID],
                body=_obj(
                    {
                        "run_at": {"type": "string", "format": "date-time"},
                        "priority": {"type": "integer", "minimum": 0, "maximum": 4},
                        "queue": {"type": "string", "minLength": 1},
                    }
                ),
            )
        },
        f"{api}/dlq/bulk-retry": {
            "post": _op("Retry matching DLQ entries", _ref("Count"), body=FILTER_BODY)
        },
        f"{api}/dlq/bulk-purge": {
            "post": _op("Purge matching DLQ entries", _ref("Count"), body=FILTER_BODY)
        },
        f"{api}/dlq/bulk-move": {
            "post": _op(
                "Move failed jobs into the DLQ",
                _ref("Count"),
                body=_obj({"kind": STR, "queue": STR, "reason": STR, "all": BOOL}),
            )
        },
        f"{api}/cron": {"get": _op("Cron schedules", _array(ANY_OBJ))},
        f"{api}/cron/{{name}}/trigger": {
            "post": _op("Fire a schedule now", ANY_OBJ, parameters=[_path("name")])
        },
        f"{api}/cron/{{name}}/pause": {
            "post": _op(
                "Pause a schedule",
                _ref("Ok"),
                parameters=[_path("name")],
                body=_obj({"paused_by": STR}),
            )
        },
        f"{api}/cron/{{name}}/resume": {
            "post": _op("Resume a schedule", _ref("Ok"), parameters=[_path("name")])
        },
        f"{api}/batch-ops/preview": {
            "post": _op("Preview a batch operation", ANY_OBJ, body=ANY_OBJ, body_required=True)
        },
        f"{api}/batch-ops": {
            "get": _op(
                "Batch operations", _array(ANY_OBJ), parameters=[_query("state", STR), LIMIT]
            ),
            "post": _op("Submit a batch operation", ANY_OBJ, body=ANY_OBJ, body_required=True),
        },
        f"{api}/batch-ops/{{operation_id}}": {
            "get": _op("One batch operation", ANY_OBJ, parameters=[_path("operation_id")]),
            "patch": _op(
                "Cancel a batch operation",
                ANY_OBJ,
                parameters=[_path("operation_id")],
                body=_obj({"state": STR}),
                body_required=True,
            ),
        },
        f"{api}/runtime": {"get": _op("Worker runtimes", _ref("Runtime"))},
        f"{api}/storage": {
            "get": _op("Storage transition status", ANY_OBJ, parameters=[_query("history", BOOL)])
        },
        f"{callback_prefix}/{{callback_id}}/{{action}}": {
            "post": _op(
                "Resolve or heartbeat an external callback",
                _ref("CallbackResult"),
                parameters=[
                    {
                        "name": "callback_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "format": "uuid"},
                    },
                    {
                        "name": "action",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": ["complete", "fail", "heartbeat"]},
                    },
                    {"name": SIGNATURE_HEADER, "in": "header", "required": False, "schema": STR},
                ],
                body=_obj(
                    {
                        "payload": ANY_OBJ,
                        "error": STR,
                        "timeout_seconds": {
                            "type": "number",
                            "exclusiveMinimum": True,
                            "minimum": 0,
                        },
                    }
                ),
            )
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "Awa admin API", "version": "1"},
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": paths,
    }
