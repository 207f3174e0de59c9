"""Input validation: refuse bad jobs before anything is written."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.flow_control import validate_job_key
from awa.domain.job import JobSpec
from awa.domain.stripes import is_stripe_name
from awa.domain.unique_conflict import conflict_mode_of

MIN_PRIORITY = 1
MAX_PRIORITY = 4
MIN_MAX_ATTEMPTS = 1
MAX_MAX_ATTEMPTS = 1000
MAX_NAME_LENGTH = 200
MAX_TAGS = 20
#: How deeply args and metadata may nest; deeper values (a list containing itself
#: included) are refused rather than recursed into.
MAX_JSON_DEPTH = 100

#: The instants both Python (``datetime``: years 1..9999) and Postgres round-trip, in UTC.
#: Postgres stores far more (4713 BC to 294276 AD, and +-infinity), but a row outside
#: this range cannot be read back into Python. The SQL check constraints of the run_at
#: columns (migration 0397) use the same two bounds.
MIN_RUN_AT = datetime.min.replace(tzinfo=UTC)
MAX_RUN_AT = datetime.max.replace(tzinfo=UTC)

#: The longest delay a handler may ask for (``RetryAfter``, ``Snooze``): 100 years.
#: Longer ones would put ``run_at`` past :data:`MAX_RUN_AT` within this millennium.
MAX_DELAY_SECONDS = 100 * 365.25 * 86400.0


def validate_priority(priority: Any, field: str = "priority") -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValidationError(field, f"must be an integer, got {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValidationError(
            field,
            f"must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority}",
            value=priority,
        )
    return priority


def validate_max_attempts(max_attempts: Any) -> int:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise ValidationError(
            "max_attempts", f"must be an integer, got {type(max_attempts).__name__}"
        )
    if not MIN_MAX_ATTEMPTS <= max_attempts <= MAX_MAX_ATTEMPTS:
        raise ValidationError(
            "max_attempts",
            f"must be between {MIN_MAX_ATTEMPTS} and {MAX_MAX_ATTEMPTS}, got {max_attempts}",
            value=max_attempts,
        )
    return max_attempts


def validate_name(field: str, value: Any) -> str:
    """Kind and queue names: non-empty text of at most 200 characters without NUL."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(field, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError(
            field, f"must be at most {MAX_NAME_LENGTH} characters, got {len(value)}"
        )
    _check_text(field, value)
    return value


#: Characters no kind or queue name may hold (Unicode 14 categories Cc, Cf, Zl, Zp):
#: control characters (newline, ``\x01``), format characters that reorder or hide text
#: (bidirectional overrides and isolates, zero-width characters, the soft hyphen) and
#: line or paragraph separators. Such a name prints as something it is not, or not at
#: all. ``awa.job_name_problem`` (SQL) refuses the same ranges; a test compares the two
#: over every code point.
UNPRINTABLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x0600, 0x0605),
    (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891),
    (0x08E2, 0x08E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E),
    (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x13438), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)  # fmt: skip
#: The printable spaces a name may hold inside but neither begin nor end with.
SPACE_RANGES: tuple[tuple[int, int], ...] = (
    (0x0020, 0x0020), (0x00A0, 0x00A0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)  # fmt: skip
#: Characters a queue name may not hold: ``/`` splits the URL paths of the admin UI and
#: REST API (``/queues/{queue}``), and ``#`` names a stripe of a queue (``queue#N``).
QUEUE_FORBIDDEN = "/#"
#: Queue names a URL path cannot carry (browsers and proxies resolve them away).
QUEUE_DOT_NAMES = (".", "..")


def _in(ranges: tuple[tuple[int, int], ...], char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in ranges)


@functools.lru_cache(maxsize=4096)
def name_problem(field: str, value: str) -> str | None:
    """Why ``value`` cannot be a kind (``field="kind"``) or queue name, or ``None``.

    Both: no unprinted characters (:data:`UNPRINTABLE_RANGES`), not blank, no space at
    either end. Queue names also: no ``/`` or ``#``, not ``.`` or ``..``.

    Remembered per name: every insert asks it of its kind and queue, and a process uses
    few of either (the scan cost about a tenth of a single insert's client CPU)."""
    for char in value:
        if _in(UNPRINTABLE_RANGES, char):
            return (
                f"must not contain control, format or bidirectional characters "
                f"(found U+{ord(char):04X}): such a name does not print as itself"
            )
    if all(_in(SPACE_RANGES, c) for c in value):
        return "must not be blank"
    if _in(SPACE_RANGES, value[0]) or _in(SPACE_RANGES, value[-1]):
        return "must not begin or end with a space"
    if field == "queue":
        for char in QUEUE_FORBIDDEN:
            if char in value:
                why = "it splits URL paths" if char == "/" else "it names a stripe (queue#N)"
                return f"must not contain {char!r}: {why}"
        if value in QUEUE_DOT_NAMES:
            return f"must not be {value!r}: a URL path cannot carry it"
    return None


def validate_kind(value: Any) -> str:
    """A job kind: :func:`validate_name` and :func:`name_problem`."""
    validate_name("kind", value)
    problem = name_problem("kind", value)
    if problem is not None:
        raise ValidationError("kind", problem, value=value)
    return str(value)


def validate_queue(value: Any, *, stripe: bool = False) -> str:
    """A queue name a producer may use: :func:`validate_name` and :func:`name_problem`.

    ``stripe``: ``value`` may be a stripe the engine derived (``queue#N``); the name
    before the suffix must then pass."""
    validate_name("queue", value)
    base = value
    if stripe and is_stripe_name(value):
        base = value.rpartition("#")[0]
    problem = name_problem("queue", base) if base else "must not be empty"
    if problem is not None:
        raise ValidationError("queue", problem, value=value)
    return str(value)


#: Job ids are ``bigint``.
MIN_JOB_ID = -(2**63)
MAX_JOB_ID = 2**63 - 1


def validate_job_id(value: Any) -> int:
    """A job id: an ``int`` (not ``bool``) that fits a ``bigint`` (``0`` or a negative
    one is simply no job). Raises :class:`ValidationTypeError` (also a ``TypeError``)
    for another type."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationTypeError(
            "job_id", f"must be an integer, got {type(value).__name__} {value!r:.40}"
        )
    if not MIN_JOB_ID <= value <= MAX_JOB_ID:
        raise ValidationError("job_id", f"must fit in a signed 64-bit integer, got {value}")
    return value


def validate_text(field: str, value: Any) -> str:
    """A text argument Postgres can take (a filter, a queue to pause): a string without
    NUL or lone surrogates."""
    if not isinstance(value, str):
        raise ValidationTypeError(field, f"must be a string, got {type(value).__name__}")
    _check_text(field, value)
    return value


def validate_tags(tags: Iterable[Any]) -> tuple[str, ...]:
    """A list of at most 20 storable strings. A bare string is refused: iterating it
    would make one tag per letter."""
    if isinstance(tags, str | bytes | bytearray | memoryview | dict):
        raise ValidationError(
            "tags", f"must be a list of strings, got {type(tags).__name__} {tags!r:.60}"
        )
    try:
        result = tuple(tags)
    except TypeError:
        raise ValidationError(
            "tags", f"must be a list of strings, got {type(tags).__name__}"
        ) from None
    if len(result) > MAX_TAGS:
        raise ValidationError("tags", f"at most {MAX_TAGS} tags are allowed, got {len(result)}")
    for tag in result:
        if not isinstance(tag, str):
            raise ValidationError("tags", f"every tag must be a string, got {type(tag).__name__}")
        _check_text("tags", tag)
        if len(tag) > MAX_NAME_LENGTH:
            raise ValidationError("tags", f"a tag must be at most {MAX_NAME_LENGTH} characters")
    return result


def validate_json(field: str, value: Any) -> Any:
    """JSON-serialisable, finite numbers only, string-keyed objects, no NUL anywhere."""
    _check_json(field, value, depth=0)
    return value


def _check_json(field: str, value: Any, depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise ValidationError(field, f"is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(field, f"contains a non-finite number ({value})")
        return
    if isinstance(value, str):
        _check_text(field, value)
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json(field, item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(field, f"object keys must be strings, got {key!r}")
            _check_text(field, key)
            _check_json(field, item, depth + 1)
        return
    raise ValidationError(field, f"is not JSON-serialisable ({type(value).__name__})")


def is_storable_text(value: str) -> bool:
    """Text Postgres can store: no NUL (``text`` and ``jsonb`` refuse it) and valid
    Unicode (a lone surrogate cannot be encoded as UTF-8)."""
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _check_text(field: str, value: str) -> None:
    if is_storable_text(value):
        return
    if "\x00" in value:
        raise ValidationError(field, "must not contain NUL bytes")
    raise ValidationError(field, "must be valid Unicode text (it holds a lone surrogate)")


def storable_text(text: str) -> str:
    """``text`` made storable, for messages the runtime writes on a user's behalf
    (exception messages, cancel reasons): NUL becomes ``\\x00`` and a lone surrogate its
    ``\\udXXX`` escape, so the real message is recorded instead of failing the write."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


#: ``unique_opts.by_period`` goes into the key material as a signed 64-bit integer.
MAX_PERIOD_BUCKET = 2**63 - 1


def validate_period_bucket(value: Any) -> int | None:
    """``unique_opts.by_period``: ``None`` or an integer from 0 that fits in 64 signed
    bits (a time bucket: a negative one is a mistake, such as a sign slip)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationTypeError("unique_opts.by_period", "must be an integer period bucket")
    if not 0 <= value <= MAX_PERIOD_BUCKET:
        raise ValidationError(
            "unique_opts.by_period",
            f"must be between 0 and {MAX_PERIOD_BUCKET}, got {value}",
            value=value,
        )
    return value


def validate_unique_states(mask: Any) -> int:
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask <= 0xFF:
        raise ValidationError("unique_opts.states", "must be an 8-bit integer mask (0..255)")
    return mask


def validate_spec(spec: JobSpec) -> JobSpec:
    """Check every field of a spec; raise ``ValidationError`` naming the first bad one."""
    validate_kind(spec.kind)
    validate_queue(spec.queue, stripe=True)
    validate_priority(spec.priority)
    validate_max_attempts(spec.max_attempts)
    validate_json("args", spec.args)
    if not isinstance(spec.metadata, dict):
        raise ValidationError("metadata", "must be a JSON object")
    validate_json("metadata", spec.metadata)
    validate_tags(spec.tags)
    if spec.unique_states is not None:
        validate_unique_states(spec.unique_states)
    if spec.unique_key is not None and not isinstance(spec.unique_key, bytes):
        raise ValidationError("unique_key", "must be bytes")
    if spec.ordering_key is not None and not isinstance(spec.ordering_key, bytes):
        raise ValidationError("ordering_key", "must be bytes")
    validate_job_key(spec.metadata, spec.ordering_key)
    conflict_mode_of(spec.metadata)
    if spec.run_at is not None:
        validate_run_at(spec.run_at)
    return spec


def validate_run_at(value: datetime, field: str = "run_at") -> datetime:
    """A timezone-aware instant between :data:`MIN_RUN_AT` and :data:`MAX_RUN_AT` in UTC.

    ``datetime.min`` at +05:00 is 1 BC in UTC and ``datetime.max`` at -05:00 is year
    10000: Postgres would store both, but no read could turn them back into a
    ``datetime``."""
    if not isinstance(value, datetime):
        raise ValidationError(field, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(field, "must be timezone-aware")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValidationError(
            field,
            f"must lie between {MIN_RUN_AT.isoformat()} and {MAX_RUN_AT.isoformat()} "
            f"in UTC, got {value.isoformat()}",
            value=value,
        ) from None
    return value


def validate_number(
    field: str,
    value: Any,
    *,
    positive: bool = False,
    maximum: float | None = None,
    allow_infinity: bool = False,
) -> float:
    """A finite number ``>= 0`` (``> 0`` with ``positive``), at most ``maximum``;
    ``allow_infinity`` also accepts ``+inf`` ("no limit").

    ``TypeError`` for a non-number, :class:`ValidationError` (a ``ValueError``) naming
    ``field`` for NaN, infinities and values out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{field} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if isinstance(value, float):
        shown = f"{value:.6g}"
    else:
        shown = (
            str(value) if abs(value) <= 10**15 else f"an integer of {len(str(abs(value)))} digits"
        )
    bound = "> 0" if positive else ">= 0"
    if allow_infinity and number == math.inf:
        return number
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ValidationError(field, f"must be a finite number {bound}, got {shown}", value=value)
    if maximum is not None and number > maximum:
        raise ValidationError(field, f"must be at most {maximum:.0f}, got {shown}", value=value)
    return number


def validate_delay(seconds: Any, field: str = "seconds") -> float:
    """A delay a handler asks for (``RetryAfter``, ``Snooze``): 0 to 100 years in seconds.

    Checked where the handler builds the value, so ``Snooze(3e11)`` raises there and that
    error is what the attempt records, instead of a timestamp no table can hold."""
    return validate_number(field, seconds, maximum=MAX_DELAY_SECONDS)


def json_dumps(field: str, value: Any) -> str:
    """Serialise validated JSON compactly; failures become :class:`ValidationError`."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(field, f"is not JSON-serialisable: {exc}") from exc


#: The queue-storage schema the migrations own; its ring sizes are fixed.
DEFAULT_QUEUE_STORAGE_SCHEMA = "awa"
#: The longest schema name Postgres keeps (NAMEDATALEN - 1 bytes); it cuts longer ones, so
#: the schema built would not be the one named.
MAX_SCHEMA_NAME_LENGTH = 63
#: A plain SQL identifier in ASCII: the form ``awa.storage_prepare`` accepts.
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def schema_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a queue-storage schema, or ``None`` when it can.

    The one rule for the client, the CLI, the storage transition and the engines: an ASCII
    letter or underscore, then ASCII letters, digits or underscores, at most
    :data:`MAX_SCHEMA_NAME_LENGTH` in all. Case is kept (every statement quotes the name),
    and the SQL side (``awa.storage_prepare``) refuses anything else."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not _SCHEMA_NAME.fullmatch(name):
        return (
            f"must be a plain SQL identifier (an ASCII letter or underscore, then ASCII "
            f"letters, digits or underscores), got {name!r}"
        )
    if len(name) > MAX_SCHEMA_NAME_LENGTH:
        return (
            f"must be at most {MAX_SCHEMA_NAME_LENGTH} characters (Postgres cuts longer "
            f"names), got {len(name)}"
        )
    return None


def validate_schema_name(name: Any, field: str = "schema") -> str:
    """``name`` if it names a schema (:func:`schema_name_problem`), else
    :class:`ValidationError` naming ``field``."""
    problem = schema_name_problem(name)
    if problem is not None:
        if not isinstance(name, str):
            raise ValidationTypeError(field, problem, value=name)
        raise ValidationError(field, problem, value=name)
    return str(name)


#: The default ring sizes: queue slots, lease slots and claim slots (the migrations build
#: the default schema ``awa`` with these).
QUEUE_SLOT_COUNT = 16
LEASE_SLOT_COUNT = 8
CLAIM_SLOT_COUNT = 8
DEFAULT_SLOT_COUNTS = {
    "queue_slot_count": QUEUE_SLOT_COUNT,
    "lease_slot_count": LEASE_SLOT_COUNT,
    "claim_slot_count": CLAIM_SLOT_COUNT,
}


def validate_slot_counts(schema: str | None, counts: dict[str, int], *, prefix: str = "") -> None:
    """Ring sizes other than the defaults need their own schema: the default schema
    ``awa`` is built by the migrations with 16 queue, 8 lease and 8 claim slots."""
    if schema not in (None, DEFAULT_QUEUE_STORAGE_SCHEMA):
        return
    for name, value in counts.items():
        default = DEFAULT_SLOT_COUNTS[name]
        if value != default:
            raise ValidationError(
                prefix + name,
                f"the default schema 'awa' keeps {default}; install queue storage into "
                f"another schema to use {value}",
                value=value,
            )
