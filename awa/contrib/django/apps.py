"""The Django app that brings ``manage.py awa_worker`` and ``manage.py awa_migrate``."""

from __future__ import annotations

from django.apps import AppConfig


class AwaConfig(AppConfig):  # type: ignore[misc]
    name = "awa.contrib.django"
    label = "awa"
    verbose_name = "Awa"
