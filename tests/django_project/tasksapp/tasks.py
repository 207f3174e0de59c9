"""The tasks the test project enqueues, declared with Django's ``@task`` only."""

from __future__ import annotations

import os
import time
from typing import Any

from django.tasks import TaskContext, task


class Boom(Exception):
    """What :func:`explode` raises."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=50)
def send_email(to: str, *, subject: str) -> dict[str, Any]:
    return {"to": to, "subject": subject, "sent": True}


@task
async def double(value: int) -> int:
    return value * 2


@task
def explode(message: str) -> None:
    raise Boom(message)


@task
def not_json() -> object:
    return object()


@task(takes_context=True)
def attempt_of(context: TaskContext) -> dict[str, Any]:
    return {"attempt": context.attempt, "id": context.task_result.id}


@task(queue_name="ordered")
def started(label: str) -> str:
    return label


@task(backend="retrying", queue_name="retrying", takes_context=True)
def flaky(context: TaskContext) -> int:
    """Fails on its first attempt, succeeds on the second."""
    if context.attempt < 2:
        raise Boom("first attempt")
    return context.attempt


@task
def wait_for_file(path: str) -> str:
    """Runs until ``path`` exists (at most a minute): a task a test can see running."""
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.02)
    return path
