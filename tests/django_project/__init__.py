"""A small Django 6 project whose own test suite (``manage.py test``) checks Awa's
``django.tasks`` backend through Django's documented task API; run by
``tests/integration/test_django_tasks.py`` in a Python 3.12+ virtualenv."""
