"""Reading query parameters and JSON bodies, with a 400 naming the bad field."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from starlette.requests import Request

from awa.domain.states import JobState
from awa.entrypoints.web.errors import bad_request


def clean(name: str, value: str) -> str:
    """``value``, refused with a 400 when Postgres could not store it (a NUL character)."""
    if "\x00" in value:
        raise bad_request(f"{name} must not contain NUL characters")
    return value


def text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return None if value is None or value == "" else clean(name, value)


def path_text(request: Request, name: str) -> str:
    return clean(name, str(request.path_params[name]))


def integer(request: Request, name: str, *, minimum: int | None = None) -> int | None:
    raw = text(request, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise bad_request(f"{name} must be >= {minimum}, got {value}")
    return value


def boolean(request: Request, name: str) -> bool:
    raw = (text(request, name) or "false").lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise bad_request(f"{name} must be true or false, got {raw!r}")


def timestamp(request: Request, name: str) -> datetime | None:
    raw = text(request, name)
    if raw is None:
        return None
    return parse_timestamp(name, raw)


def parse_timestamp(name: str, raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"{name} must be an RFC 3339 timestamp, got {raw!r}") from None
    if value.tzinfo is None:
        raise bad_request(f"{name} must carry a UTC offset, got {raw!r}")
    return value


def state(raw: str | None) -> JobState | None:
    if raw is None or raw == "":
        return None
    try:
        return JobState.parse(raw)
    except (ValueError, KeyError):
        names = ", ".join(str(s) for s in JobState)
        raise bad_request(f"unknown state {raw!r} (one of {names})") from None


def path_int(request: Request, name: str) -> int:
    raw = request.path_params[name]
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"{name} must be an integer, got {raw!r}") from None
    if not -(2**63) <= value < 2**63:
        raise bad_request(f"{name} is out of range: {raw}")
    return value


async def body(request: Request, *, required: bool = False) -> dict[str, Any]:
    """The JSON object body; ``{}`` when empty and not ``required``."""
    raw = await request.body()
    if not raw.strip():
        if required:
            raise bad_request("a JSON object body is required (it may be {})")
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise bad_request("body is nested too deeply") from None
    if not isinstance(value, dict):
        raise bad_request("body must be a JSON object")
    return value


def optional_str(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"{name} must be a string")
    return clean(name, value)


def optional_int(doc: dict[str, Any], name: str) -> int | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{name} must be an integer")
    return value


def optional_bool(doc: dict[str, Any], name: str) -> bool:
    value = doc.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be true or false")
    return value


def id_list(doc: dict[str, Any]) -> list[int]:
    ids = doc.get("ids")
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in ids
    ):
        raise bad_request("ids must be a list of job ids")
    if len(ids) > 1000:
        raise bad_request("at most 1000 ids per request")
    return list(dict.fromkeys(ids))
