"""External-callback operations of the in-memory engine."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from awa.adapters.inmemory.base import RUNNING_ONLY, EngineBase, Write, ack
from awa.domain import lifecycle
from awa.domain.callbacks import CallbackExpressions, callback_not_found, check_action
from awa.domain.channels import queue_channel
from awa.domain.job import JobRecord, RunLease
from awa.domain.states import LIVE_STATES, JobState
from awa.ports.storage import Ack


class CallbackOps(EngineBase):
    """Register, park, resolve and keep alive attempts that wait on an external system."""

    async def register_callback(
        self,
        lease: RunLease,
        *,
        callback_id: str,
        timeout: timedelta,
        expressions: CallbackExpressions | None = None,
    ) -> Ack:
        async with self._write() as write:
            job = self._live(write, lease, RUNNING_ONLY)
            if job is not None:
                write.state.update(
                    job, callback_id=callback_id, callback_timeout_at=write.now + timeout
                )
        if job is not None:
            self._callback_exprs[callback_id] = expressions or CallbackExpressions()
        return ack(job is not None)

    async def callback_expressions(self, callback_id: str) -> CallbackExpressions | None:
        async with self._write() as write:
            self._by_callback(write, callback_id)
        found = self._callback_exprs.get(callback_id)
        return None if found is None or found.is_empty else found

    async def wait_for_callback(self, lease: RunLease) -> Ack:
        async with self._write() as write:
            job = self._live(write, lease, RUNNING_ONLY)
            if job is not None and job.callback_id is None:
                job = None
            if job is not None:
                write.state.transition(job, JobState.WaitingExternal)
        return ack(job is not None)

    @staticmethod
    def _by_callback(write: Write, callback_id: str) -> JobRecord:
        for job in write.state.jobs.values():
            if job.callback_id == callback_id and job.state in LIVE_STATES:
                return job
        raise callback_not_found(callback_id)

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> JobRecord:
        resolution = check_action(action)
        async with self._write() as write:
            job = self._by_callback(write, callback_id)
            transition = lifecycle.callback_resolution(
                resolution,
                self._facts(write, job),
                payload=payload,
                error=error,
                expression=expression,
                now=write.now,
            )
            if transition.state is JobState.Available:
                write.notify.add(queue_channel(job.queue))
            updated = self._end(write, job, transition)
        # A fail routed to the DLQ leaves no job row: the failed snapshot is the answer.
        return updated

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        async with self._write() as write:
            job = self._by_callback(write, callback_id)
            beat = lifecycle.callback_heartbeat(timeout=timeout, now=write.now)
            updated = self._apply(write, job, beat)
        return updated
