"""Django's documented task-backend contract, on Awa: enqueue / aenqueue, get_result and
refresh, priorities, run_after, the status of successful and failed tasks, their errors,
the rules of ``validate_task``, and enqueueing inside the caller's transaction.

A worker (``manage.py awa_worker``) runs in a subprocess for the module; the queues
``held`` and ``ordered`` are not served by it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.base import TaskResult
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_enqueued
from django.test import SimpleTestCase, TransactionTestCase
from django.utils import timezone

import awa
from awa.contrib.django import AwaBackend

from . import tasks

PROJECT = Path(__file__).resolve().parents[1]
# The repository's test helpers (this project runs from its own directory and venv).
sys.path.append(str(PROJECT.parents[1]))
from tests.support.waits import until, until_sync  # noqa: E402

#: The longest a task may take to finish once due; a healthy run needs well under a
#: second, a loaded CI host a few.
FINISH_WITHIN = 60.0


def start_worker(*options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "awa_worker", "--shutdown-timeout-ms", "5000", *options],
        cwd=PROJECT,
        env=os.environ.copy(),
        text=True,
    )


def stop_worker(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=60)


def wait_finished(result: TaskResult) -> TaskResult:
    """Refresh ``result`` until its task finished (bounded by :data:`FINISH_WITHIN`)."""

    def finished() -> bool:
        result.refresh()
        return result.is_finished

    if not result.is_finished:
        until_sync(finished, f"task {result.id} finished", timeout=FINISH_WITHIN)
    return result


def awa_job(result: TaskResult) -> Any:
    """The Awa job behind a task result, read with Awa's own client."""
    backend = task_backends[result.backend]
    assert isinstance(backend, AwaBackend)
    with awa.Client(backend.database_url, max_connections=1) as client:
        return client.get_job(int(result.id))


def jobs_in_database() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa.jobs")
        row = cursor.fetchone()
    return int(row[0])


workers: list[subprocess.Popen[str]] = []


def setUpModule() -> None:
    workers.append(start_worker("--queue", "default", "--queue", "emails:4"))
    workers.append(start_worker("--backend", "retrying"))


def tearDownModule() -> None:
    codes = [stop_worker(process) for process in workers]
    assert codes == [0, 0], f"workers exited with {codes}"


class BackendFlags(SimpleTestCase):
    def test_the_backend_supports_every_optional_feature(self) -> None:
        for alias in ("default", "retrying"):
            backend = task_backends[alias]
            self.assertIsInstance(backend, AwaBackend)
            self.assertTrue(backend.supports_defer)
            self.assertTrue(backend.supports_async_task)
            self.assertTrue(backend.supports_get_result)
            self.assertTrue(backend.supports_priority)


class EnqueueAndResults(TransactionTestCase):
    def test_enqueue_returns_a_ready_result_that_refreshes_to_success(self) -> None:
        seen: list[TaskResult] = []

        def receiver(sender: Any, task_result: TaskResult, **kwargs: Any) -> None:
            seen.append(task_result)

        task_enqueued.connect(receiver)
        try:
            result = tasks.add.enqueue(2, b=3)
        finally:
            task_enqueued.disconnect(receiver)
        self.assertEqual([r.id for r in seen], [result.id])
        self.assertEqual(result.args, [2])
        self.assertEqual(result.kwargs, {"b": 3})
        self.assertIsNotNone(result.enqueued_at)
        self.assertEqual(result.backend, "default")
        self.assertEqual(result.task.func, tasks.add.func)
        self.assertIn(result.status, (TaskResultStatus.READY, TaskResultStatus.RUNNING))
        held = tasks.add.using(queue_name="held").enqueue(0, 0)
        self.assertEqual(tasks.add.get_result(held.id).status, TaskResultStatus.READY)
        with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
            _ = held.return_value

        wait_finished(result)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 5)
        self.assertEqual(result.errors, [])
        self.assertEqual(result.attempts, 1)
        assert result.enqueued_at and result.started_at and result.finished_at
        self.assertLessEqual(result.enqueued_at, result.started_at)
        self.assertLessEqual(result.started_at, result.finished_at)
        self.assertEqual(result.last_attempted_at, result.started_at)

        fetched = tasks.add.get_result(result.id)
        self.assertEqual(fetched.id, result.id)
        self.assertEqual(fetched.return_value, 5)
        self.assertEqual(fetched.args, [2])
        self.assertEqual(default_task_backend.get_result(result.id).return_value, 5)

    def test_a_result_reads_in_full_after_the_job_row_is_gone(self) -> None:
        result = wait_finished(tasks.send_email.enqueue("b@example.com", subject="kept"))
        failed = wait_finished(tasks.explode.enqueue("gone"))
        # Queue storage reclaims finished jobs within minutes; the results stay 7 days.
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM awa.jobs WHERE id IN (%s, %s)", [int(result.id), int(failed.id)]
            )
        with self.assertRaises(awa.JobNotFound):
            awa_job(result)
        later = tasks.send_email.get_result(result.id)
        self.assertEqual(later.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(later.return_value, result.return_value)
        self.assertEqual((later.args, later.kwargs), (["b@example.com"], {"subject": "kept"}))
        self.assertEqual(later.task.queue_name, "emails")
        self.assertEqual(later.task.priority, 50)
        self.assertEqual(later.enqueued_at, result.enqueued_at)
        self.assertEqual(later.started_at, result.started_at)
        assert later.finished_at is not None and result.started_at is not None
        self.assertGreaterEqual(later.finished_at, result.started_at)
        self.assertEqual(later.attempts, 1)
        # A failed task stores no result: its row was all there was.
        with self.assertRaises(TaskResultDoesNotExist):
            tasks.explode.get_result(failed.id)

    def test_a_task_on_its_own_queue_with_keyword_arguments(self) -> None:
        result = wait_finished(tasks.send_email.enqueue("a@example.com", subject="hi"))
        self.assertEqual(result.task.queue_name, "emails")
        self.assertEqual(
            result.return_value, {"to": "a@example.com", "subject": "hi", "sent": True}
        )
        self.assertEqual(awa_job(result).queue, "emails")

    async def test_aenqueue_an_async_task_and_arefresh_it(self) -> None:
        result = await tasks.double.aenqueue(21)

        async def finished() -> bool:
            await result.arefresh()
            return result.is_finished

        await until(finished, f"task {result.id} finished", timeout=FINISH_WITHIN)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 42)
        fetched = await tasks.double.aget_result(result.id)
        self.assertEqual(fetched.return_value, 42)

    def test_a_task_that_raises_has_failed_with_its_exception_recorded(self) -> None:
        result = wait_finished(tasks.explode.enqueue("kaput"))
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            _ = result.return_value
        self.assertEqual(len(result.errors), 1)
        error = result.errors[0]
        self.assertEqual(error.exception_class_path, "tasksapp.tasks.Boom")
        self.assertIs(error.exception_class, tasks.Boom)
        self.assertIn("Boom: kaput", error.traceback)
        self.assertIn("raise Boom(message)", error.traceback)
        self.assertEqual(result.attempts, 1)
        self.assertIsNotNone(result.finished_at)
        # Not retried: Django's tasks fail when they raise (RETRY_ON_ERROR is off).
        self.assertEqual(str(awa_job(result).state), "failed")

    def test_a_return_value_that_is_not_json_fails_the_task(self) -> None:
        result = wait_finished(tasks.not_json.enqueue())
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class_path, "builtins.TypeError")

    def test_a_task_taking_its_context_sees_its_result_and_attempt(self) -> None:
        result = wait_finished(tasks.attempt_of.enqueue())
        self.assertEqual(result.return_value, {"attempt": 1, "id": result.id})

    def test_retry_on_error_runs_the_task_again_while_attempts_remain(self) -> None:
        result = wait_finished(tasks.flaky.enqueue())
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 2)
        self.assertEqual(result.attempts, 2)
        self.assertEqual(len(result.errors), 1)
        self.assertIn("first attempt", result.errors[0].traceback)

    def test_unknown_and_foreign_results(self) -> None:
        for unknown in ("999999999", "not-a-number", "-1", "99999999999999999999999"):
            with self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(unknown)
        result = tasks.add.using(queue_name="held").enqueue(1, 1)
        with self.assertRaises(TaskResultMismatch):
            tasks.double.get_result(result.id)


class Statuses(TransactionTestCase):
    def test_a_running_task_reads_running_until_it_finishes(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            gate = os.path.join(directory, "go")
            result = tasks.wait_for_file.enqueue(gate)
            try:

                def running() -> bool:
                    result.refresh()
                    return result.status == TaskResultStatus.RUNNING

                if result.status != TaskResultStatus.RUNNING:
                    until_sync(running, f"task {result.id} running", timeout=FINISH_WITHIN)
                self.assertFalse(result.is_finished)
                self.assertIsNotNone(result.started_at)
                self.assertIsNone(result.finished_at)
                self.assertEqual(result.attempts, 1)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    _ = result.return_value
            finally:
                Path(gate).touch()  # let the task end, whatever happened
            wait_finished(result)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, gate)

    def test_a_cancelled_task_has_failed(self) -> None:
        result = tasks.add.using(queue_name="held").enqueue(1, 1)
        backend = task_backends["default"]
        with awa.Client(backend.database_url, max_connections=1) as client:
            client.cancel(int(result.id))
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual([e.exception_class_path for e in result.errors], ["awa.JobCancelled"])
        self.assertIs(result.errors[0].exception_class, awa.JobCancelled)


class Configuration(SimpleTestCase):
    def test_unknown_and_bad_options_are_refused_by_name(self) -> None:
        with self.assertRaisesMessage(ImproperlyConfigured, "unknown option(s) BOGUS"):
            AwaBackend("x", {"OPTIONS": {"BOGUS": 1}})
        with self.assertRaisesMessage(ImproperlyConfigured, "RETRY_ON_ERROR"):
            AwaBackend("x", {"OPTIONS": {"RETRY_ON_ERROR": "yes"}})
        with self.assertRaisesMessage(ImproperlyConfigured, "max_attempts"):
            AwaBackend("x", {"OPTIONS": {"MAX_ATTEMPTS": 0}})

    def test_the_system_check_wants_a_postgresql_alias(self) -> None:
        self.assertEqual(task_backends["default"].check(), [])
        errors = AwaBackend("x", {"OPTIONS": {"DATABASE": "missing"}}).check()
        self.assertEqual([e.id for e in errors], ["awa.E001"])

    def test_the_worker_command_refuses_what_it_cannot_serve(self) -> None:
        with self.assertRaisesMessage(CommandError, "not in TASKS['default']['QUEUES']"):
            call_command("awa_worker", "--queue", "elsewhere")
        with self.assertRaisesMessage(CommandError, "--backend 'nope'"):
            call_command("awa_worker", "--backend", "nope")
        with self.assertRaisesMessage(CommandError, "NAME:WORKERS"):
            call_command("awa_worker", "--queue", "default:many")


class PriorityAndDeferral(TransactionTestCase):
    def test_priorities_map_onto_awa_and_order_the_runs(self) -> None:
        low = tasks.started.using(priority=-100).enqueue("low")
        normal = tasks.started.enqueue("normal")
        high = tasks.started.using(priority=100).enqueue("high")
        self.assertEqual(
            [awa_job(r).priority for r in (high, normal, low)],
            [1, 2, 4],
        )
        self.assertEqual(tasks.started.get_result(low.id).task.priority, -100)
        # One worker slot: the queue runs its tasks one at a time, highest first.
        worker = start_worker("--queue", "ordered:1")
        try:
            done = [wait_finished(r) for r in (high, normal, low)]
        finally:
            self.assertEqual(stop_worker(worker), 0)
        starts = [r.started_at for r in done]
        assert all(starts)
        self.assertEqual(sorted(starts), starts)

    def test_run_after_defers_the_task(self) -> None:
        later = timezone.now() + timedelta(hours=1)
        deferred = tasks.add.using(run_after=later).enqueue(1, 2)
        self.assertEqual(deferred.task.run_after, later)
        soon_at = timezone.now() + timedelta(seconds=1)
        soon = tasks.add.using(run_after=soon_at).enqueue(3, 4)
        job = awa_job(deferred)
        self.assertEqual(str(job.state), "scheduled")
        self.assertEqual(job.record.run_at, later)

        wait_finished(soon)
        assert soon.started_at is not None
        self.assertGreaterEqual(soon.started_at, soon_at)
        self.assertEqual(soon.return_value, 7)
        # The other is still waiting for its time.
        deferred.refresh()
        self.assertEqual(deferred.status, TaskResultStatus.READY)
        self.assertEqual(tasks.add.get_result(deferred.id).task.run_after, later)


class Transactions(TransactionTestCase):
    def test_a_task_enqueued_in_a_rolled_back_transaction_never_existed(self) -> None:
        before = jobs_in_database()
        with self.assertRaises(RuntimeError), transaction.atomic():
            result = tasks.add.using(queue_name="held").enqueue(1, 1)
            raise RuntimeError("roll back")
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(result.id)
        self.assertEqual(jobs_in_database(), before)

    def test_a_task_enqueued_in_a_transaction_is_seen_when_it_commits(self) -> None:
        with transaction.atomic():
            result = tasks.add.using(queue_name="held").enqueue(2, 2)
            # Read on another connection: not there until the caller commits.
            with self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(result.id)
        self.assertEqual(default_task_backend.get_result(result.id).status, "READY")


def not_module_level() -> None:
    def inner() -> None:
        pass

    task(inner)


class ValidateTask(TransactionTestCase):
    def test_the_rules_of_validate_task(self) -> None:
        with self.assertRaisesMessage(InvalidTask, "module level"):
            not_module_level()
        with self.assertRaisesMessage(InvalidTask, "priority"):
            tasks.add.using(priority=101)
        with self.assertRaisesMessage(InvalidTask, "priority"):
            tasks.add.using(priority=-101)
        with self.assertRaisesMessage(InvalidTask, "context"):
            task(takes_context=True)(tasks.add.func)
        with self.assertRaisesMessage(InvalidTask, "not valid for backend"):
            tasks.add.using(queue_name="elsewhere")
        with self.assertRaisesMessage(InvalidTask, "aware"):
            tasks.add.using(run_after=timezone.now().replace(tzinfo=None))
        with self.assertRaises(TypeError):
            task(run_after=timezone.now())(tasks.add.func)

    def test_arguments_must_be_json(self) -> None:
        before = jobs_in_database()
        for bad_args, bad_kwargs in (((object(),), {}), ((), {"when": timezone.now()})):
            with self.assertRaises(TypeError):
                tasks.add.using(queue_name="held").enqueue(*bad_args, **bad_kwargs)
        self.assertEqual(jobs_in_database(), before)
        # Django normalizes what JSON has no type for: tuples become lists.
        result = tasks.add.using(queue_name="held").enqueue((1, 2), b={"k": (3,)})
        self.assertEqual(result.args, [[1, 2]])
        self.assertEqual(awa_job(result).args["kwargs"], {"b": {"k": [3]}})
