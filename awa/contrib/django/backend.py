"""``AwaBackend``: Django's task framework (``django.tasks``, Django 6) on Awa.

``TASKS = {"default": {"BACKEND": "awa.contrib.django.AwaBackend"}}`` makes every
``@task`` function enqueue as an Awa job of kind :data:`~awa.contrib.django._shape.KIND`
on the task's ``queue_name``, inserted through Django's own database connection, so inside
an open ``transaction.atomic()`` block the job commits or rolls back with it (ADR 0036).
``manage.py awa_worker`` runs them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote, urlencode

from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from awa.bridge import insert_job_sync
from awa.contrib.django import _shape
from awa.domain.errors import JobNotFound, ValidationError, ValidationTypeError
from awa.domain.job import DEFAULT_MAX_ATTEMPTS
from awa.domain.states import JobState
from awa.domain.validation import validate_max_attempts, validate_queue
from awa.entrypoints.client import Client, Job

#: The keys ``OPTIONS`` may hold; any other is refused, naming it.
OPTION_KEYS: Final = frozenset({"DATABASE", "DATABASE_URL", "MAX_ATTEMPTS", "RETRY_ON_ERROR"})

#: libpq parameters carried from a Django database's ``OPTIONS`` into the URL the worker
#: and the result reads connect with.
_LIBPQ_OPTIONS: Final = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "application_name",
        "connect_timeout",
        "options",
        "service",
        "passfile",
        "target_session_attrs",
    }
)

_clients: dict[str, Client] = {}
_clients_lock = threading.Lock()


def _reader(url: str) -> Client:
    """One blocking client per database for a process's result reads (it is thread
    safe; Django builds a backend per thread)."""
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = Client(url, max_connections=4)
        return client


def database_url_of(settings_dict: Mapping[str, Any]) -> str:
    """A libpq URL for a Django ``DATABASES`` entry (``postgresql`` engine)."""
    user = str(settings_dict.get("USER") or "")
    password = str(settings_dict.get("PASSWORD") or "")
    host = str(settings_dict.get("HOST") or "")
    port = str(settings_dict.get("PORT") or "")
    name = str(settings_dict.get("NAME") or "")
    query: dict[str, str] = {}
    auth = ""
    if user:
        auth = quote(user, safe="")
        if password:
            auth += ":" + quote(password, safe="")
        auth += "@"
    netloc = ""
    if host.startswith("/"):
        # A Unix-socket directory goes in the query: it cannot be a URL's host.
        query["host"] = host
    elif host:
        netloc = f"[{host}]" if ":" in host else host
    if port:
        if netloc:
            netloc += f":{port}"
        else:
            query["port"] = port
    for key, value in (settings_dict.get("OPTIONS") or {}).items():
        if key in _LIBPQ_OPTIONS and isinstance(value, str | int):
            query[key] = str(value)
    url = f"postgresql://{auth}{netloc}/{quote(name, safe='')}"
    return f"{url}?{urlencode(query)}" if query else url


def _json(field: str, value: Any) -> Any:
    """``value`` as Django normalizes task arguments, refused when it is not JSON."""
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise ValidationTypeError(
            field, f"must be JSON-serialisable (as Django's tasks require): {exc}"
        ) from None


class AwaBackend(BaseTaskBackend):  # type: ignore[misc]
    """A Django task backend storing tasks as Awa jobs.

    ``OPTIONS``:

    - ``DATABASE``: the Django database alias tasks are inserted through (default
      ``"default"``; its engine must be PostgreSQL and its database hold Awa's schema);
    - ``DATABASE_URL``: where the worker and ``get_result`` connect (default: built from
      that alias's settings);
    - ``MAX_ATTEMPTS``: Awa's attempt budget per task, spent by rescues of attempts whose
      worker was lost and, with ``RETRY_ON_ERROR``, by exceptions (default 25);
    - ``RETRY_ON_ERROR``: retry a task that raised, with Awa's backoff, while attempts
      remain (default ``False``: as Django defines it, a task that raised has FAILED).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - OPTION_KEYS)
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(unknown)}; "
                f"the Awa backend takes {', '.join(sorted(OPTION_KEYS))}"
            )
        self.database: str = self.options.get("DATABASE", "default")
        if not isinstance(self.database, str):
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['DATABASE'] must be a str")
        url = self.options.get("DATABASE_URL")
        if url is not None and not isinstance(url, str):
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['DATABASE_URL'] must be a str")
        self._database_url: str | None = url
        try:
            self.max_attempts = validate_max_attempts(
                self.options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)
            )
        except ValidationError as exc:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS'] {exc}"
            ) from None
        retry = self.options.get("RETRY_ON_ERROR", False)
        if not isinstance(retry, bool):
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']['RETRY_ON_ERROR'] must be True or False"
            )
        self.retry_on_error: bool = retry

    @property
    def database_url(self) -> str:
        """Where the worker and the result reads connect."""
        if self._database_url is None:
            self._database_url = database_url_of(connections[self.database].settings_dict)
        return self._database_url

    # ------------------------------------------------------------------ Django's contract
    def validate_task(self, task: Task) -> None:
        """Django's rules, and a queue name Awa can store."""
        super().validate_task(task)
        try:
            validate_queue(task.queue_name)
        except ValidationError as exc:
            raise InvalidTask(f"queue_name {task.queue_name!r} is refused: {exc}") from None

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Insert the job through Django's connection ``DATABASE``: inside the caller's
        open transaction when there is one (it commits or rolls back with it), else
        committed at once."""
        self.validate_task(task)
        call_args = _json("args", list(args))
        call_kwargs = _json("kwargs", dict(kwargs))
        run_after = self._aware(task.run_after)
        row = insert_job_sync(
            connections[self.database],
            _shape.job_args(task.module_path, call_args, call_kwargs),
            kind=_shape.KIND,
            queue=task.queue_name,
            priority=_shape.awa_priority(task.priority),
            max_attempts=self.max_attempts,
            run_at=run_after,
            metadata={
                _shape.METADATA_KEY: {
                    "priority": task.priority,
                    "run_after": None if run_after is None else run_after.isoformat(),
                }
            },
        )
        result = TaskResult(
            task=task,
            id=str(row["id"]),
            status=TaskResultStatus.READY,
            enqueued_at=row["created_at"],
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=call_args,
            kwargs=call_kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result as the job stands now; ``TaskResultDoesNotExist`` when there
        is no such job (or it is not a Django task, or retention removed it)."""
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        reader = _reader(self.database_url)
        try:
            job = reader.get_job(job_id)
        except ValidationError:
            raise TaskResultDoesNotExist(result_id) from None
        except JobNotFound:
            # Finished and reclaimed: the stored result outlives the row (seven days).
            stored = reader.get_result(job_id)
            if not _shape.is_envelope(stored):
                raise TaskResultDoesNotExist(result_id) from None
            return self.result_from_envelope(job_id, stored)
        if job.kind != _shape.KIND:
            raise TaskResultDoesNotExist(result_id)
        stored = reader.get_result(job_id) if job.state is JobState.Completed else None
        return self.result_of(job, _shape.envelope_value(stored))

    def check(self, **kwargs: Any) -> list[Any]:
        """Django's system check: the insert connection must be PostgreSQL."""
        errors: list[Any] = list(super().check(**kwargs))
        if self.database not in connections:
            errors.append(
                Error(
                    f"the Awa task backend {self.alias!r} inserts through database "
                    f"{self.database!r}, which DATABASES does not define",
                    hint="set OPTIONS['DATABASE'] to a PostgreSQL alias of DATABASES",
                    id="awa.E001",
                )
            )
        elif connections[self.database].vendor != "postgresql":
            errors.append(
                Error(
                    f"the Awa task backend {self.alias!r} needs a PostgreSQL database; "
                    f"{self.database!r} is {connections[self.database].vendor}",
                    hint="point OPTIONS['DATABASE'] at the database holding Awa's schema",
                    id="awa.E002",
                )
            )
        return errors

    # ------------------------------------------------------------------ reading a job back
    def _aware(self, when: datetime | None) -> datetime | None:
        if when is None or timezone.is_aware(when):
            return when
        # USE_TZ = False: a naive time is in the project's time zone.
        aware: datetime = timezone.make_aware(when, timezone.get_default_timezone())
        return aware

    def task_of(self, job: Job[Any]) -> Task:
        """The ``Task`` a job runs, with the priority, queue and ``run_after`` it was
        enqueued with."""
        path, _, _ = _shape.task_call(job.args)
        extra = job.metadata.get(_shape.METADATA_KEY) or {}
        return self._task(path, extra.get("priority"), job.queue, extra.get("run_after"))

    def _task(self, path: str, priority: Any, queue: str, run_after: Any) -> Task:
        found = import_string(path)
        if not isinstance(found, Task):
            raise ValueError(f"{path!r} is not a Django task")
        return found.using(
            priority=found.priority if priority is None else priority,
            queue_name=queue,
            run_after=None if run_after is None else datetime.fromisoformat(run_after),
            backend=self.alias,
        )

    def envelope_facts(self, result: TaskResult) -> dict[str, Any]:
        """What the stored result of a successful task keeps of it besides its value."""

        def iso(when: datetime | None) -> str | None:
            return None if when is None else when.isoformat()

        return {
            "task": result.task.module_path,
            "args": result.args,
            "kwargs": result.kwargs,
            "queue": result.task.queue_name,
            "priority": result.task.priority,
            "run_after": iso(result.task.run_after),
            "enqueued_at": iso(result.enqueued_at),
            "started_at": iso(result.started_at),
            "finished_at": iso(result.finished_at),
            "attempts": result.attempts,
            "errors": [
                {"exception_class_path": e.exception_class_path, "traceback": e.traceback}
                for e in result.errors
            ],
        }

    def result_from_envelope(self, job_id: int, stored: dict[str, Any]) -> TaskResult:
        """The ``TaskResult`` of a successful task whose job row is gone, from its stored
        result (:meth:`envelope_facts`)."""

        def when(key: str) -> datetime | None:
            text = stored.get(key)
            return None if text is None else datetime.fromisoformat(text)

        result = TaskResult(
            task=self._task(
                stored["task"], stored.get("priority"), stored["queue"], stored.get("run_after")
            ),
            id=str(job_id),
            status=TaskResultStatus.SUCCESSFUL,
            enqueued_at=when("enqueued_at"),
            started_at=when("started_at"),
            finished_at=when("finished_at"),
            last_attempted_at=when("started_at"),
            args=stored.get("args", []),
            kwargs=stored.get("kwargs", {}),
            backend=self.alias,
            errors=[TaskError(**entry) for entry in stored.get("errors", [])],
            worker_ids=_shape.worker_ids(int(stored.get("attempts", 1))),
        )
        object.__setattr__(result, "_return_value", stored.get("value"))
        return result

    def result_of(self, job: Job[Any], return_value: Any = None) -> TaskResult:
        """Django's ``TaskResult`` of an Awa job (``return_value`` for a completed one)."""
        record = job.record
        _, args, kwargs = _shape.task_call(record.args)
        status = TaskResultStatus(_shape.STATUS_OF_STATE[record.state])
        finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
        errors = [
            TaskError(**entry)
            for entry in _shape.task_errors(
                record.state, list(record.errors), _shape.recorded_errors(record.progress)
            )
        ]
        result = TaskResult(
            task=self.task_of(job),
            id=str(record.id),
            status=status,
            enqueued_at=record.created_at,
            started_at=record.attempted_at,
            last_attempted_at=record.attempted_at,
            finished_at=record.finalized_at if finished else None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=_shape.worker_ids(record.attempt),
        )
        if status is TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", return_value)
        return result
