"""Integrations with other frameworks (``awa.contrib.django``).

Each one imports its framework and uses Awa through its public API and entrypoints; the
core (domain, ports, runtime, adapters, entrypoints) never imports anything here, so a
framework is needed only by the applications that use its integration.
"""
