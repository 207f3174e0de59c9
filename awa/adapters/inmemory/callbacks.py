"""External-callback operations of the in-memory engine."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from awa.adapters.inmemory.base import LIVE_STATES, RUNNING_ONLY, EngineBase, Write, ack
from awa.domain.errors import CallbackNotFound, ValidationError
from awa.domain.job import JobRecord, RunLease, error_entry
from awa.domain.states import JobState
from awa.ports.storage import Ack

CALLBACK_ACTIONS = frozenset({"complete", "fail", "retry", "resume"})


class CallbackOps(EngineBase):
    """Register, park, resolve and keep alive attempts that wait on an external system."""

    async def register_callback(
        self, lease: RunLease, *, callback_id: str, timeout: timedelta
    ) -> Ack:
        async with self._write() as write:
            job = self._live(write, lease, RUNNING_ONLY)
            if job is not None:
                write.state.update(
                    job, callback_id=callback_id, callback_timeout_at=write.now + timeout
                )
        return ack(job is not None)

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
        raise CallbackNotFound(f"no job is waiting on callback {callback_id}")

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
    ) -> JobRecord:
        if action not in CALLBACK_ACTIONS:
            raise ValidationError(
                "action", f"must be one of {sorted(CALLBACK_ACTIONS)}", value=action
            )
        async with self._write() as write:
            job = self._by_callback(write, callback_id)
            state, now = write.state, write.now
            cleared: dict[str, Any] = {"callback_id": None, "callback_timeout_at": None}
            if action == "complete":
                state.transition(
                    job, JobState.Completed, finalized_at=now, progress=None, **cleared
                )
            elif action == "fail":
                entry = error_entry(
                    error or "callback failed", attempt=job.attempt, at=now, terminal=True
                )
                self._fail_or_dlq(
                    write,
                    job,
                    errors=(*job.errors, entry),
                    dlq_reason="callback_failed",
                    **cleared,
                )
            elif action == "retry":
                entry = error_entry("callback retry requested", attempt=job.attempt, at=now)
                state.transition(
                    job, JobState.Retryable, run_at=now, errors=(*job.errors, entry), **cleared
                )
            elif job.state == JobState.WaitingExternal:
                state.transition(
                    job,
                    JobState.Running,
                    heartbeat_at=now,
                    metadata={**job.metadata, "_awa_callback_result": payload},
                )
            else:
                state.update(
                    job,
                    heartbeat_at=now,
                    metadata={**job.metadata, "_awa_callback_result": payload},
                )
            after = state.jobs.get(job.id)
            # A fail routed to the DLQ leaves no job row: report the failed snapshot.
            result = after if after is not None else state.dlq[job.id].job
        return result

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        async with self._write() as write:
            job = self._by_callback(write, callback_id)
            updated = write.state.update(job, callback_timeout_at=write.now + timeout)
        return updated
