"""The external-callback contract shared by workers, receivers and callers.

A callback URL is ``base + prefix + "/" + callback_id + "/" + action``. Requests carry the
``X-Awa-Signature`` header: the lowercase hex BLAKE3 keyed hash of the UTF-8 callback id,
keyed with a secret of exactly 32 bytes.
"""

from __future__ import annotations

import hmac

import blake3

SIGNATURE_HEADER = "X-Awa-Signature"
DEFAULT_PATH_PREFIX = "/api/callbacks"
DEFAULT_HEARTBEAT_TIMEOUT_SECS = 3600.0

CALLBACK_SIGNATURE_HEADER = SIGNATURE_HEADER
CALLBACK_DEFAULT_PATH_PREFIX = DEFAULT_PATH_PREFIX
CALLBACK_DEFAULT_HEARTBEAT_TIMEOUT_SECS = DEFAULT_HEARTBEAT_TIMEOUT_SECS

SECRET_LENGTH = 32

__all__ = [
    "CALLBACK_DEFAULT_HEARTBEAT_TIMEOUT_SECS",
    "CALLBACK_DEFAULT_PATH_PREFIX",
    "CALLBACK_SIGNATURE_HEADER",
    "DEFAULT_HEARTBEAT_TIMEOUT_SECS",
    "DEFAULT_PATH_PREFIX",
    "SIGNATURE_HEADER",
    "build_callback_url",
    "sign",
    "sign_callback",
    "verify",
    "verify_callback",
]


def _check_secret(secret: bytes) -> bytes:
    if not isinstance(secret, bytes | bytearray | memoryview):
        raise TypeError(f"{type(secret).__name__!r} object is not an instance of 'bytes'")
    key = bytes(secret)
    if len(key) != SECRET_LENGTH:
        raise ValueError(f"callback secret must be exactly {SECRET_LENGTH} bytes (got {len(key)})")
    return key


def sign_callback(secret: bytes, callback_id: str) -> str:
    """Signature of ``callback_id``: lowercase 64-hex BLAKE3 keyed hash.

    Raises ``ValueError`` unless ``secret`` is exactly 32 bytes.
    """
    key = _check_secret(secret)
    return str(blake3.blake3(callback_id.encode("utf-8"), key=key).hexdigest())


def verify_callback(secret: bytes, callback_id: str, signature: str) -> bool:
    """Whether ``signature`` is the signature of ``callback_id`` (constant-time compare)."""
    expected = sign_callback(secret, callback_id)
    return hmac.compare_digest(expected, signature.strip().lower())


def build_callback_url(base: str, prefix: str, callback_id: str, action: str) -> str:
    """``base`` without trailing ``/``, the normalised ``prefix``, then ``/id/action``.

    The prefix is trimmed, gains a leading ``/`` and loses trailing ``/``; it may be empty.
    """
    trimmed = prefix.strip().strip("/")
    normalised = f"/{trimmed}" if trimmed else ""
    return f"{base.rstrip('/')}{normalised}/{callback_id}/{action}"


sign = sign_callback
verify = verify_callback
