"""Kind derivation: ``CamelCase`` class names to ``snake_case`` job kinds."""

from __future__ import annotations


def derive_kind(name: str) -> str:
    """Derive a job kind from a class name, treating acronyms as one word.

    ``SendEmail`` -> ``send_email``, ``HTMLToPDF`` -> ``html_to_pdf``,
    ``OAuthRefresh`` -> ``o_auth_refresh``.
    """
    out: list[str] = []
    n = len(name)
    for i, ch in enumerate(name):
        if ch.isupper():
            prev = name[i - 1] if i > 0 else ""
            nxt = name[i + 1] if i + 1 < n else ""
            boundary = i > 0 and (
                prev.islower() or prev.isdigit() or (prev.isupper() and nxt.islower())
            )
            if boundary and out and out[-1] != "_":
                out.append("_")
            out.append(ch.lower())
        else:
            out.append(ch)
    return "".join(out)
