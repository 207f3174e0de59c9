"""Wake-up channel names fit Postgres's 63-byte identifiers; the cancel notice has one form."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from awa.domain.channels import (
    CANCEL_CHANNEL,
    MAX_CHANNEL_BYTES,
    cancel_notification,
    queue_channel,
)


def test_short_names_are_kept() -> None:
    assert queue_channel("email") == "awa:email"
    assert queue_channel("q" * 59) == "awa:" + "q" * 59


def test_long_names_are_cut_to_63_bytes() -> None:
    assert queue_channel("q" * 60) == "awa:" + "q" * 59
    # two-byte characters: 4 + 2 x 29 = 62 bytes, a 30th would make 64
    assert queue_channel("é" * 100) == "awa:" + "é" * 29


# Queue names are valid text: no NUL and no lone surrogate (both refused at insert).
@given(
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=200)
)
def test_every_channel_is_a_prefix_of_at_most_63_bytes(queue: str) -> None:
    channel = queue_channel(queue)
    full = f"awa:{queue}"
    assert full.startswith(channel)
    assert len(channel.encode()) <= MAX_CHANNEL_BYTES
    # nothing more could have been kept
    if channel != full:
        assert len(full[: len(channel) + 1].encode()) > MAX_CHANNEL_BYTES


def test_cancel_notification_names_the_attempt_on_the_cancel_channel() -> None:
    channel, payload = cancel_notification(42, 7)
    assert channel == CANCEL_CHANNEL == "awa:cancel"
    assert json.loads(payload) == {"job_id": 42, "run_lease": 7}
    # json_build_object's text form, which the schema's SQL functions send
    assert payload == '{"job_id" : 42, "run_lease" : 7}'
