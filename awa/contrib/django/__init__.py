"""Awa as a backend of Django's task framework (``django.tasks``, Django 6 and later).

Settings::

    INSTALLED_APPS = [..., "awa.contrib.django"]  # for ``manage.py awa_worker``
    TASKS = {"default": {"BACKEND": "awa.contrib.django.AwaBackend"}}

``AwaBackend`` is imported on first use, so importing this package (as Django does for
an installed app) needs no more of Django than the app registry. See ``docs/django.md``
and ADR 0036.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awa.contrib.django.backend import AwaBackend

__all__ = ["AwaBackend"]


def __getattr__(name: str) -> Any:
    if name == "AwaBackend":
        from awa.contrib.django.backend import AwaBackend

        return AwaBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
