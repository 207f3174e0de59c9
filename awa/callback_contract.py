"""The external-callback contract shared by workers, receivers and callers.

A callback URL is ``base + prefix + "/" + callback_id + "/" + action``. Requests carry the
``X-Awa-Signature`` header: the lowercase hex BLAKE3 keyed hash of the UTF-8 callback id,
keyed with a secret of exactly 32 bytes.

That signature covers the callback id only (the wire contract awa-pg speaks), so it is a
bearer credential for that one callback: whoever holds it may complete, fail or
heartbeat the callback with any body, as often as the callback is open. A caller that
holds the secret itself can sign each request instead: ``X-Awa-Timestamp`` (Unix seconds)
and ``X-Awa-Request-Signature`` over the timestamp, the callback id, the action and the
exact body bytes (:func:`sign_callback_request`). A receiver accepts such a request only
within a replay window of its clock, and only once; started with
``--callback-require-request-signature`` it refuses id-only signatures.
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

TIMESTAMP_HEADER = "X-Awa-Timestamp"
REQUEST_SIGNATURE_HEADER = "X-Awa-Request-Signature"
#: A request signature is accepted while its timestamp is this close to the receiver's
#: clock (either side), and at most once.
DEFAULT_REPLAY_WINDOW_SECS = 300.0
#: Request signatures use a key derived from the secret, so they can never be mistaken
#: for (or turned into) an id-only signature.
_REQUEST_KEY_CONTEXT = "awa callback request signature v1"

__all__ = [
    "CALLBACK_DEFAULT_HEARTBEAT_TIMEOUT_SECS",
    "CALLBACK_DEFAULT_PATH_PREFIX",
    "CALLBACK_SIGNATURE_HEADER",
    "DEFAULT_HEARTBEAT_TIMEOUT_SECS",
    "DEFAULT_PATH_PREFIX",
    "DEFAULT_REPLAY_WINDOW_SECS",
    "REQUEST_SIGNATURE_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "build_callback_url",
    "sign",
    "sign_callback",
    "sign_callback_request",
    "verify",
    "verify_callback",
    "verify_callback_request",
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
    return _same(expected, signature)


def _same(expected: str, given: str) -> bool:
    # Bytes, not str: ``compare_digest`` raises on non-ASCII text, and a forged header
    # is simply a wrong signature.
    return hmac.compare_digest(expected.encode(), given.strip().lower().encode("utf-8", "replace"))


def _request_message(callback_id: str, action: str, timestamp: int, body: bytes) -> bytes:
    head = f"{timestamp}\n{callback_id}\n{action}\n".encode()
    return head + bytes(body)


def sign_callback_request(
    secret: bytes, callback_id: str, action: str, body: bytes, timestamp: int
) -> str:
    """Signature of one callback request: lowercase 64-hex BLAKE3 keyed hash of
    ``"{timestamp}\n{callback_id}\n{action}\n"`` followed by the exact body bytes, keyed
    with a key derived from ``secret``. Send it as ``X-Awa-Request-Signature`` with
    ``X-Awa-Timestamp: {timestamp}`` (integer Unix seconds)."""
    key = blake3.blake3(_check_secret(secret), derive_key_context=_REQUEST_KEY_CONTEXT).digest()
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise TypeError(f"timestamp must be integer Unix seconds, got {type(timestamp).__name__}")
    message = _request_message(callback_id, action, timestamp, body)
    return str(blake3.blake3(message, key=key).hexdigest())


def verify_callback_request(
    secret: bytes,
    callback_id: str,
    action: str,
    body: bytes,
    timestamp: str | int,
    signature: str,
    *,
    now: float,
    window: float = DEFAULT_REPLAY_WINDOW_SECS,
) -> bool:
    """Whether ``signature`` signs this request and ``timestamp`` lies within ``window``
    seconds of ``now`` (constant-time compare). Remembering which signatures were used is
    the receiver's part."""
    try:
        stamp = int(timestamp)
    except ValueError:
        return False
    if abs(now - stamp) > window:
        return False
    return _same(sign_callback_request(secret, callback_id, action, body, stamp), signature)


def build_callback_url(base: str, prefix: str, callback_id: str, action: str) -> str:
    """``base`` without trailing ``/``, the normalised ``prefix``, then ``/id/action``.

    The prefix is trimmed, gains a leading ``/`` and loses trailing ``/``; it may be empty.
    """
    trimmed = prefix.strip().strip("/")
    normalised = f"/{trimmed}" if trimmed else ""
    return f"{base.rstrip('/')}{normalised}/{callback_id}/{action}"


sign = sign_callback
verify = verify_callback
