"""The Django app that carries `manage.py inboxgen_serve`."""

from __future__ import annotations

from django.apps import AppConfig


class InboxgenConfig(AppConfig):
    name = "inboxgen.contrib.django"
    label = "inboxgen"
    verbose_name = "inboxgen"
