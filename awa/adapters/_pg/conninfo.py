"""Connection strings in one place: normalise, parse, show without secrets, scrub messages.

Users hand Awa a libpq URL (``postgresql://app:pw@host/db``), a libpq key/value string
(``host=h password='p w' dbname=db``) or the SQLAlchemy spelling copied from their
settings (``postgresql+psycopg://...``, ``postgresql+asyncpg://...``). :func:`normalize`
turns the last into the first; every connection Awa opens goes through it.

No message Awa produces may carry a password, whatever the string's shape, so:

- :func:`display` renders a target with libpq's own parser (the one psycopg exposes) and
  drops every secret key; a string the parser refuses is never echoed back;
- :func:`scrub` removes passwords from arbitrary text (driver error messages quote the
  connection string they could not parse): URL user-info passwords, ``password=`` /
  ``sslpassword=`` keys in either form, and any literal secret of a known string.

The driver is imported by the functions that parse (:func:`parse`, :func:`display`), so
a caller that only scrubs text (the command line printing its help or an error) does not
load it.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

#: Connection parameters whose values are secrets.
SECRET_KEYS = frozenset({"password", "sslpassword"})
MASK = "***"

_DRIVER_SCHEME = re.compile(r"^(\s*)(postgres(?:ql)?)\+[A-Za-z0-9_]+://", re.IGNORECASE)
_URL_SCHEME = re.compile(r"^\s*postgres(?:ql)?://", re.IGNORECASE)
# ``scheme://user:secret@`` (``scheme//`` too, a common typo): greedy up to the last
# ``@`` of the token, so a password holding a raw ``@`` is covered too (over-masking a
# host is preferable to leaking).
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*:?//[^\s:/@'\"]*):[^\s]*@")
# ``?password=...`` / ``&password=...`` inside a URL.
_QUERY_SECRET = re.compile(r"(?P<head>[?&](?:ssl)?password=)[^&\s#'\"]*", re.IGNORECASE)
# ``password = value`` / ``password='quoted value'`` in a key/value string.
_KV_SECRET = re.compile(
    r"(?P<head>\b(?:ssl)?password\s*=\s*)(?!\*\*\*(?:[&\s'\"]|$))"
    r"(?:'(?:[^'\\]|\\.)*'?|\S+)",
    re.IGNORECASE,
)
# Literal secrets shorter than this are not searched for in free text (they would mask
# unrelated characters); the pattern rules above still apply to them.
_MIN_LITERAL = 4


class ConnInfoError(ValueError):
    """A connection string libpq cannot parse; the message never quotes the string."""


def normalize(url: str) -> str:
    """``url`` with a SQLAlchemy driver suffix removed from its scheme
    (``postgresql+psycopg://`` -> ``postgresql://``); other strings are unchanged."""
    return _DRIVER_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}://", url, count=1)


def is_url(url: str) -> bool:
    """Whether ``url`` (normalised) is in URL form rather than key/value form."""
    return bool(_URL_SCHEME.match(normalize(url)))


def parse(url: str) -> dict[str, str]:
    """The connection parameters of ``url`` (normalised), as libpq reads them.

    Raises :class:`ConnInfoError` with libpq's reason, scrubbed of secrets."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        return {k: str(v) for k, v in conninfo_to_dict(normalize(url)).items()}
    except psycopg.Error as exc:
        reason = _mask_quoted(str(exc).strip(), url)
        reason = _scrub(reason, _secrets(url, {})) or type(exc).__name__
        raise ConnInfoError(f"the connection string could not be parsed: {reason}") from None


def has_password(url: str) -> bool:
    """Whether ``url`` carries a password (an unparseable string counts if it looks so)."""
    try:
        params = parse(url)
    except ConnInfoError:
        return scrub(url) != url
    return any(params.get(k) for k in SECRET_KEYS)


def display(url: str) -> str:
    """``url`` without its secrets, in the form it was given (URL or key/value).

    An unparseable string is rendered as a placeholder naming the problem, never as
    itself."""
    try:
        params = parse(url)
    except ConnInfoError as exc:
        return f"<{exc}>"
    public = {k: params[k] for k in sorted(params, key=_key_order) if k not in SECRET_KEYS}
    if not is_url(url):
        from psycopg.conninfo import make_conninfo

        return make_conninfo(**public) if public else "(libpq defaults)"
    scheme = normalize(url).strip().split("://", 1)[0]
    return _as_url(scheme, public)


_LEADING_KEYS = ("host", "hostaddr", "port", "user", "dbname")


def _key_order(key: str) -> tuple[int, str]:
    return (_LEADING_KEYS.index(key) if key in _LEADING_KEYS else len(_LEADING_KEYS), key)


def _as_url(scheme: str, params: dict[str, str]) -> str:
    params = dict(params)
    user = params.pop("user", "")
    hosts = params.pop("host", "").split(",")
    ports = params.pop("port", "").split(",")
    dbname = params.pop("dbname", "")
    netlocs = []
    for i, host in enumerate(hosts):
        port = ports[i] if i < len(ports) else (ports[0] if len(ports) == 1 else "")
        if host.startswith("/"):
            params.setdefault("host", host)
            host = ""
        if ":" in host:
            host = f"[{host}]"
        netlocs.append(f"{host}:{port}" if port else host)
    netloc = ",".join(n for n in netlocs if n)
    if user:
        netloc = f"{quote(user, safe='')}@{netloc}"
    text = f"{scheme}://{netloc}/{quote(dbname, safe='')}" if dbname else f"{scheme}://{netloc}"
    if params:
        query = "&".join(f"{k}={quote(v, safe='/')}" for k, v in params.items())
        text = f"{text}?{query}"
    return text


_QUOTED = re.compile(r'"([^"]*)"')


def _mask_quoted(text: str, url: str) -> str:
    """``text`` with every double-quoted fragment of ``url`` masked: libpq quotes the part
    of a string it could not parse, which may be all of it, password included."""
    return _QUOTED.sub(lambda m: f'"{MASK}"' if m.group(1) and m.group(1) in url else m[0], text)


def secrets_of(url: str) -> list[str]:
    """The secret values ``url`` holds (raw and percent-encoded), longest first."""
    try:
        params = parse(url)
    except ConnInfoError:
        params = {}
    return _secrets(url, params)


def _secrets(url: str, params: dict[str, str]) -> list[str]:
    found: set[str] = set()
    for key in SECRET_KEYS:
        value = params.get(key)
        if value:
            found.update({value, quote(value, safe=""), unquote(value)})
    match = _USERINFO.search(normalize(url))
    if match is not None:
        secret = match.group(0)[len(match.group("head")) + 1 : -1]
        if secret:
            found.update({secret, unquote(secret)})
    return sorted((s for s in found if len(s) >= _MIN_LITERAL), key=len, reverse=True)


def scrub(text: str, *urls: str) -> str:
    """``text`` with every password removed: by shape (URL user-info, ``password=`` keys)
    and, for each of ``urls``, by the literal secrets it holds."""
    secrets: list[str] = []
    for url in urls:
        secrets.extend(secrets_of(url))
        try:
            parse(url)
        except ConnInfoError:
            # Nothing about it is known to be public: hide it wherever it appears.
            if len(url.strip()) >= _MIN_LITERAL:
                text = text.replace(url.strip(), MASK)
            text = _mask_quoted(text, url)
    return _scrub(text, sorted(set(secrets), key=len, reverse=True))


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m.group('head')}{MASK}", text)
    return _KV_SECRET.sub(lambda m: f"{m.group('head')}{MASK}", text)


def scrub_exception(exc: BaseException, *urls: str) -> BaseException:
    """Scrub the message of ``exc`` and of the exceptions chained to it, in place, so a
    traceback printed later carries no password either. Returns ``exc``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        args = current.args
        cleaned = tuple(scrub(a, *urls) if isinstance(a, str) else a for a in args)
        if cleaned != args:
            current.args = cleaned
        current = current.__cause__ or current.__context__
    return exc
