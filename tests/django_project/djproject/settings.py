"""Settings of the test project: the database comes from ``AWA_DJANGO_DATABASE_URL`` (a
database the pytest fixture created and migrated, used as the test database with
``manage.py test --keepdb``)."""

from __future__ import annotations

import os
from typing import Any

from psycopg.conninfo import conninfo_to_dict

# As libpq reads it: a socket directory in ``?host=`` (the embedded server's) included.
_db = conninfo_to_dict(os.environ["AWA_DJANGO_DATABASE_URL"])
_name = str(_db.get("dbname", ""))

SECRET_KEY = "awa-django-test-project"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["awa.contrib.django", "tasksapp"]
DATABASES: dict[str, Any] = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _name,
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
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
