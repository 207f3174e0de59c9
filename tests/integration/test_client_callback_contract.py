"""``awa.callback_contract``: signatures, verification and callback URLs."""

from __future__ import annotations

import pytest

from awa import callback_contract as cc

SECRET = b"k" * 32


def test_sign_matches_the_published_sdk() -> None:
    # Value produced by awa-pg 0.6.9 for the same secret and id.
    expected = "afe3d7ad8d5833d736ab4f589515187829143f7f6fea514659bd53f4eaf74d62"
    assert cc.sign(SECRET, "abc") == expected
    assert cc.verify(SECRET, "abc", expected)
    assert cc.verify(SECRET, "abc", expected.upper())
    assert not cc.verify(SECRET, "abd", expected)
    assert not cc.verify(b"j" * 32, "abc", expected)


def test_secret_must_be_32_bytes() -> None:
    with pytest.raises(ValueError, match="exactly 32 bytes"):
        cc.sign(b"short", "id")
    with pytest.raises(TypeError):
        cc.sign("k" * 32, "id")  # type: ignore[arg-type]


def test_build_callback_url_and_constants() -> None:
    assert cc.build_callback_url("http://x/", "  /api/cb/ ", "id", "complete") == (
        "http://x/api/cb/id/complete"
    )
    assert cc.build_callback_url("http://x", "", "id", "fail") == "http://x/id/fail"
    assert cc.build_callback_url("http://x", "hooks", "id", "heartbeat") == (
        "http://x/hooks/id/heartbeat"
    )
    assert cc.SIGNATURE_HEADER == "X-Awa-Signature"
    assert cc.DEFAULT_PATH_PREFIX == "/api/callbacks"
    assert cc.DEFAULT_HEARTBEAT_TIMEOUT_SECS == 3600.0
