"""Refusing a keyword a ``**options: Unpack[SomeTypedDict]`` signature does not declare.

An entry point whose keywords are a TypedDict (ADR 0027) is checked statically by a type
checker; at run time :func:`check_keywords` refuses an undeclared keyword with the
``TypeError`` Python raises for a plain signature, so a misspelt option is never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_KEYWORDS: dict[type[Any], frozenset[str]] = {}


def keywords_of(options: type[Any]) -> frozenset[str]:
    """Every key the TypedDict ``options`` declares (its bases' included)."""
    keys = _KEYWORDS.get(options)
    if keys is None:
        keys = _KEYWORDS[options] = frozenset(options.__optional_keys__ | options.__required_keys__)
    return keys


def check_keywords(function: str, given: Mapping[str, Any], options: type[Any]) -> None:
    """Refuse a keyword ``options`` does not declare, as Python refuses one a signature
    does not name: ``TypeError: AsyncClient.insert() got an unexpected keyword argument
    'x'`` (``function`` is ``Class.method`` for a method, as awa-pg 0.6.9 words it)."""
    allowed = keywords_of(options)
    if given.keys() <= allowed:
        return
    unknown = sorted(k for k in given if k not in allowed)[0]
    raise TypeError(f"{function}() got an unexpected keyword argument {unknown!r}")
