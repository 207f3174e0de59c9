"""The OpenAPI 3.0 document served at ``/api/openapi.json``.

Written by hand next to the routes it describes; a schemathesis run in the test suite
checks every response against it.
"""

from __future__ import annotations

import functools
from typing import Any

from awa.callback_contract import DEFAULT_PATH_PREFIX, SIGNATURE_HEADER
from awa.entrypoints.job_graph import MAX_KEY_LIMIT
from awa.entrypoints.web.openapi_schemas import (
    ANY_OBJ,
    BOOL,
    INT,
    OP_KINDS,
    SCHEMAS,
    STATES,
    STR,
    array,
    nullable,
    obj,
    ref,
)

ERRORS = {
    "400": "invalid input, or a Host header this server does not answer",
    "401": "authentication required, or a bad callback signature",
    "403": "cross-site request, or missing CSRF token",
    "404": "not found",
    "409": "unique-key conflict, or a batch operation that has already finished",
    "413": "request body larger than the server's limit",
    "429": "too many wrong tokens from this client: wait Retry-After seconds",
    "503": "read-only mode (mutations are disabled), or the schema is not migrated",
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


BATCH_BODY = obj(
    {
        "op_kind": {"type": "string", "enum": OP_KINDS},
        "spec": ANY_OBJ,
        "filter": ANY_OBJ,
        "submitted_by": STR,
        "all": BOOL,
    },
    ["op_kind"],
)
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
            "content": {"application/json": {"schema": ref("Error")}},
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


FILTER_BODY = obj({"kind": STR, "queue": STR, "tag": STR, "all": BOOL})


@functools.cache
def openapi_document(callback_prefix: str = DEFAULT_PATH_PREFIX) -> dict[str, Any]:
    """The API description (the callback routes under ``callback_prefix``)."""
    api = "/api"
    paths: dict[str, Any] = {
        f"{api}/capabilities": {"get": _op("Server identity and mode", ref("Capabilities"))},
        f"{api}/jobs": {
            "get": _op(
                "Jobs, newest first",
                array(ref("Job")),
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
                ref("JobDocument"),
                parameters=[JOB_ID],
            )
        },
        f"{api}/jobs/{{job_id}}/relations": {
            "get": _op(
                "A job's parents and children with their states, its stored result and, "
                "for a batch's callback, the batch's progress",
                ref("JobRelations"),
                parameters=[JOB_ID],
            )
        },
        f"{api}/jobs/{{job_id}}/graph": {
            "get": _op(
                "The workflow graph around a job: connected jobs and their edges",
                ref("WorkflowGraph"),
                parameters=[JOB_ID],
            )
        },
        f"{api}/batches/{{batch_id}}": {
            "get": _op(
                "A batch's progress: how many of its jobs completed, failed, were cancelled "
                "and are pending, and its callback's state (404 for an id of no batch)",
                ref("BatchProgress"),
                parameters=[{**JOB_ID, "name": "batch_id"}],
            )
        },
        f"{api}/jobs/{{job_id}}/retry": {
            "post": _op("Retry a job", nullable("Job"), parameters=[JOB_ID])
        },
        f"{api}/jobs/{{job_id}}/cancel": {
            "post": _op("Cancel a job", nullable("Job"), parameters=[JOB_ID])
        },
        f"{api}/jobs/bulk-retry": {
            "post": _op(
                "Retry jobs by id",
                array(ref("Job")),
                body=obj({"ids": array(INT)}, ["ids"]),
                body_required=True,
            )
        },
        f"{api}/jobs/bulk-cancel": {
            "post": _op(
                "Cancel jobs by id",
                array(ref("Job")),
                body=obj({"ids": array(INT)}, ["ids"]),
                body_required=True,
            )
        },
        f"{api}/stats": {"get": _op("Jobs per state", ref("Stats"))},
        f"{api}/stats/timeseries": {
            "get": _op(
                "Jobs finalized per minute and state",
                array(ref("Bucket")),
                parameters=[_query("minutes", {"type": "integer", "minimum": 1, "maximum": 1440})],
            )
        },
        f"{api}/stats/kinds": {"get": _op("Distinct kinds", array(STR))},
        f"{api}/stats/queues": {"get": _op("Distinct queues", array(STR))},
        f"{api}/queues": {"get": _op("Queue overviews", array(ref("Queue")))},
        f"{api}/queues/runtime": {
            "get": _op("Queue capacity across runtimes", array(ref("QueueRuntime")))
        },
        f"{api}/queues/{{queue}}": {
            "get": _op("One queue", ref("Queue"), parameters=[_path("queue")])
        },
        f"{api}/queues/{{queue}}/keys": {
            "get": _op(
                "A queue's concurrency keys (running and waiting per key) and its limits",
                ref("QueueKeys"),
                parameters=[
                    _path("queue"),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_KEY_LIMIT}),
                ],
            )
        },
        f"{api}/queues/{{queue}}/pause": {
            "post": _op(
                "Pause a queue",
                ref("Ok"),
                parameters=[_path("queue")],
                body=obj({"paused_by": STR}),
                body_required=True,
            )
        },
        f"{api}/queues/{{queue}}/resume": {
            "post": _op("Resume a queue", ref("Ok"), parameters=[_path("queue")])
        },
        f"{api}/queues/{{queue}}/drain": {
            "post": _op(
                "Cancel a queue's pending jobs", ref("Drained"), parameters=[_path("queue")]
            )
        },
        f"{api}/kinds": {"get": _op("Kind overviews", array(ref("Kind")))},
        f"{api}/dlq": {
            "get": _op(
                "DLQ entries, newest first",
                array(ref("DlqEntry")),
                parameters=[
                    *FILTER,
                    _query("before_id", INT),
                    _query("before_dlq_at", {"type": "string", "format": "date-time"}),
                    LIMIT,
                ],
            )
        },
        f"{api}/dlq/depth": {"get": _op("DLQ depth", ref("DlqDepth"))},
        f"{api}/dlq/{{job_id}}": {
            "get": _op(
                "One DLQ entry (null when absent)", nullable("DlqEntry"), parameters=[JOB_ID]
            ),
            "delete": _op("Purge one DLQ entry", ref("Count"), parameters=[JOB_ID]),
        },
        f"{api}/dlq/{{job_id}}/retry": {
            "post": _op(
                "Retry a DLQ entry",
                nullable("Job"),
                parameters=[JOB_ID],
                body=obj(
                    {
                        "run_at": {"type": "string", "format": "date-time"},
                        "priority": {"type": "integer", "minimum": 0, "maximum": 4},
                        "queue": {"type": "string", "minLength": 1},
                    }
                ),
            )
        },
        f"{api}/dlq/bulk-retry": {
            "post": _op("Retry matching DLQ entries", ref("Count"), body=FILTER_BODY)
        },
        f"{api}/dlq/bulk-purge": {
            "post": _op("Purge matching DLQ entries", ref("Count"), body=FILTER_BODY)
        },
        f"{api}/dlq/bulk-move": {
            "post": _op(
                "Move failed jobs into the DLQ",
                ref("Count"),
                body=obj({"kind": STR, "queue": STR, "reason": STR, "all": BOOL}),
            )
        },
        f"{api}/cron": {
            "get": _op(
                "Stored schedules with next_fire_at (null while paused)",
                array(ref("CronSchedule")),
            )
        },
        f"{api}/cron/{{name}}/trigger": {
            "post": _op(
                "Enqueue a schedule's job now (even while paused)",
                ref("Job"),
                parameters=[_path("name")],
            )
        },
        f"{api}/cron/{{name}}/pause": {
            "post": _op(
                "Pause a schedule",
                ref("Ok"),
                parameters=[_path("name")],
                body=obj({"paused_by": STR}),
            )
        },
        f"{api}/cron/{{name}}/resume": {
            "post": _op("Resume a schedule", ref("Ok"), parameters=[_path("name")])
        },
        f"{api}/batch-ops/preview": {
            "post": _op(
                "Preview a batch operation",
                ref("BatchPreview"),
                body=BATCH_BODY,
                body_required=True,
            )
        },
        f"{api}/batch-ops": {
            "get": _op(
                "Batch operations, newest first",
                array(ref("BatchOperation")),
                parameters=[_query("state", STR), LIMIT],
            ),
            "post": _op(
                "Submit a batch operation",
                ref("BatchOperation"),
                body=BATCH_BODY,
                body_required=True,
            ),
        },
        f"{api}/batch-ops/{{operation_id}}": {
            "get": _op(
                "One batch operation", ref("BatchOperation"), parameters=[_path("operation_id")]
            ),
            "patch": _op(
                "Cancel a batch operation",
                ref("BatchOperation"),
                parameters=[_path("operation_id")],
                body=obj({"state": STR}),
                body_required=True,
            ),
        },
        f"{api}/runtime": {"get": _op("Worker runtimes", ref("Runtime"))},
        f"{api}/storage": {
            "get": _op("Storage transition status", ANY_OBJ, parameters=[_query("history", BOOL)])
        },
        f"{callback_prefix}/{{callback_id}}/{{action}}": {
            "post": _op(
                "Resolve or heartbeat an external callback",
                ref("CallbackResult"),
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
                body=obj(
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
