"""The operator's queue and kind lists: what they add to the engines' counts."""

from __future__ import annotations

from awa.domain.admin_views import KindCounts, listed_kinds, listed_queues
from awa.domain.descriptors import handler_missing
from awa.domain.job import QueueCounts
from awa.domain.states import JobState


def _counts(queue: str, **states: int) -> QueueCounts:
    counts = {JobState.parse(name): n for name, n in states.items()}
    return QueueCounts(queue, counts, False, 0, None)


def test_a_queue_listed_only_in_the_dlq_or_the_catalog_shows_with_dead_letters_as_failed() -> None:
    rows = listed_queues(
        [_counts("mail", available=2, failed=1)],
        {"mail": 3, "graveyard": 2},
        ["served", "mail"],
    )
    assert [r.queue for r in rows] == ["graveyard", "mail", "served"]
    graveyard, mail, served = rows
    assert graveyard.count(JobState.Failed) == 2 and graveyard.total_queued == 0
    assert (mail.count(JobState.Failed), mail.count(JobState.Available)) == (4, 2)
    assert served.counts == {} and served.paused is False


def test_kinds_count_dead_letters_and_list_declared_ones() -> None:
    rows = listed_kinds(
        [KindCounts("send", 3, 1, 2)],
        [("send", "mail", 1), ("send", "other", 1), ("doomed", "graveyard", 2)],
        ["idle", "send"],
    )
    assert rows == [
        KindCounts("doomed", 2, 1, 0),
        KindCounts("idle", 0, 0, 0),
        KindCounts("send", 5, 2, 2),
    ]


def test_a_kind_with_jobs_and_no_fresh_descriptor_lacks_a_handler() -> None:
    assert handler_missing(3, None)  # never catalogued by a runtime
    assert handler_missing(3, True)  # no runtime refreshes it any more
    assert not handler_missing(3, False)
    assert not handler_missing(0, None)  # nothing waits on a handler
