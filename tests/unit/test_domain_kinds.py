"""Kind derivation from class names."""

from __future__ import annotations

import pytest

from awa.domain import derive_kind


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("SendEmail", "send_email"),
        ("HTMLToPDF", "html_to_pdf"),
        ("OAuthRefresh", "o_auth_refresh"),
        ("already_snake", "already_snake"),
        ("A", "a"),
        ("Job", "job"),
        ("ProcessHTTPRequest", "process_http_request"),
        ("Resize2xImage", "resize2x_image"),
        ("S3Upload", "s3_upload"),
        ("sendEmail", "send_email"),
        ("ABC", "abc"),
    ],
)
def test_derive_kind_golden_cases(name: str, kind: str) -> None:
    assert derive_kind(name) == kind


def test_derive_kind_never_doubles_underscores() -> None:
    assert derive_kind("Send_Email") == "send_email"
