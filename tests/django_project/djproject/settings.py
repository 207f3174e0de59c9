"""Settings of the test project: the database comes from ``AWA_DJANGO_DATABASE_URL`` (a
database the pytest fixture created and migrated, used as the test database with
``manage.py test --keepdb``)."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

_url = urlsplit(os.environ["AWA_DJANGO_DATABASE_URL"])
_name = unquote(_url.path.lstrip("/"))

SECRET_KEY = "awa-django-test-project"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["awa.contrib.django", "tasksapp"]
DATABASES: dict[str, Any] = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _name,
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "TEST": {"NAME": _name},
    }
}
TASKS: dict[str, Any] = {
    "default": {
        "BACKEND": "awa.contrib.django.AwaBackend",
        # "held" and "ordered" are not served by the suite's long-running worker.
        "QUEUES": ["default", "emails", "held", "ordered"],
    },
    "retrying": {
        "BACKEND": "awa.contrib.django.AwaBackend",
        "QUEUES": ["retrying"],
        "OPTIONS": {"RETRY_ON_ERROR": True, "MAX_ATTEMPTS": 2},
    },
}
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"awa": {"handlers": ["console"], "level": "WARNING"}},
}
