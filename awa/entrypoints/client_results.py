"""Waiting on a job's result (``client.wait_for``), for the tasks that store results."""

from __future__ import annotations

import math
from typing import Any

import anyio

from awa.domain import results as result_rules
from awa.domain.errors import ValidationError
from awa.domain.job import JobRecord
from awa.domain.results import JobCancelled, JobFailed
from awa.domain.states import JobState
from awa.domain.validation import validate_job_id
from awa.entrypoints import payloads
from awa.entrypoints.client_core import ClientCore, not_found
from awa.ports.results import ResultStore

#: What :meth:`ResultsMixin._answer` returns while the job has not finished.
_PENDING: Any = object()


def _last_error(record: JobRecord) -> str | None:
    if not record.errors:
        return None
    error = record.errors[-1].get("error")
    return None if error is None else str(error)


def _timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValidationError("timeout", f"must be a number of seconds, got {timeout!r}")
    if not math.isfinite(timeout) or timeout < 0:
        raise ValidationError("timeout", f"must be a finite number >= 0, got {timeout!r}")
    return float(timeout)


class ResultsMixin(ClientCore):
    """The results the tasks that opt in (``@client.task(Args, store_result=True)``)
    store, kept for ``awa.domain.results.RESULT_RETENTION`` (seven days) after the
    attempt stored them, whatever happens to the job row meanwhile."""

    async def wait_for(
        self,
        job_id: int,
        *,
        timeout: float | None = None,
        result_type: type[Any] | None = None,
    ) -> Any:
        """Wait until job ``job_id`` finishes and return its stored result (as
        ``result_type`` when given: a dataclass, attrs class or pydantic model rebuilt
        from the stored JSON; else the JSON value). A completed job with no stored result
        (its task does not store results, or the retention passed) gives ``None``.

        Raises :class:`~awa.JobFailed` when the job failed or was moved to the
        dead-letter queue, :class:`~awa.JobCancelled` when it was cancelled,
        :class:`~awa.JobNotFound` when there is no such job (and no result kept for it),
        and ``TimeoutError`` when ``timeout`` seconds pass first (``None``: no limit).

        The waiter is woken by a notification when the job finishes (``LISTEN`` on a
        dedicated connection) and re-reads the job every second as well, so it also
        works behind a transaction-mode pooler (polling only) and sees an operator's
        cancel."""
        job_id = validate_job_id(job_id)
        limit = _timeout(timeout)
        results = (await self._control()).results
        # Every wait is measured on the store's clock (ADR 0025).
        clock = results.clock
        deadline = None if limit is None else clock.monotonic() + limit
        # Subscribe before the first read, so a finish between them is not missed.
        subscription = await results.subscribe_finished(job_id)
        try:
            while True:
                answer = await self._answer(job_id, results)
                if answer is not _PENDING:
                    return self._typed(answer, result_type)
                wait = result_rules.WAIT_POLL_SECONDS
                if deadline is not None:
                    remaining = deadline - clock.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"job {job_id} did not finish within {limit} s")
                    wait = min(wait, remaining)
                if subscription is None:
                    await clock.sleep(wait)
                    continue
                fired: set[str] = set()
                with clock.move_on_after(wait):
                    fired = await subscription.wait(math.inf)
                if result_rules.completed_channel(job_id) in fired:
                    # Announced after its completion committed: only the result is read.
                    return self._typed(await self._completed_result(job_id, results), result_type)
        finally:
            if subscription is not None:
                with anyio.CancelScope(shield=True):
                    await subscription.close()

    async def get_result(self, job_id: int, *, result_type: type[Any] | None = None) -> Any:
        """The stored result of job ``job_id`` now, without waiting: its value (as
        ``result_type`` when given, as :meth:`wait_for` converts it), or ``None`` when
        none is stored (the job has not completed, its task does not store results, or
        the retention passed). It reads ``awa.job_results`` only, so it also answers for
        a job whose row was pruned; read the job itself (:meth:`get_job`) for its state."""
        job_id = validate_job_id(job_id)
        stored = await (await self._control()).results.get_result(job_id)
        if stored is None:
            return None
        return self._typed(stored.value, result_type)

    @staticmethod
    def _typed(answer: Any, result_type: type[Any] | None) -> Any:
        if result_type is not None and payloads.is_structured_type(result_type):
            return payloads.from_json_value(result_type, answer)
        return answer

    @staticmethod
    async def _completed_result(job_id: int, results: ResultStore) -> Any:
        """The answer for a job whose completion is committed: its stored result."""
        stored = await results.get_result(job_id)
        return None if stored is None else stored.value

    async def _answer(self, job_id: int, results: ResultStore) -> Any:
        """The result of the finished job, its failure raised, or ``_PENDING``."""
        engine = await self._engine()
        record = await engine.get_job(job_id)
        if record is None:
            entry = await engine.get_dlq(job_id)
            if entry is not None:
                raise JobFailed(job_id, _last_error(entry.job), where="dead-letter queue")
            stored = await results.get_result(job_id)
            if stored is None:
                raise not_found(job_id)
            # The result outlives the job's row until its own retention.
            return stored.value
        if record.state is JobState.Completed:
            return await self._completed_result(job_id, results)
        if record.state is JobState.Failed:
            raise JobFailed(job_id, _last_error(record))
        if record.state is JobState.Cancelled:
            raise JobCancelled(job_id, _last_error(record))
        return _PENDING
