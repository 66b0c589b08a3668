"""The Django app that carries `manage.py inboxgen_serve`, and has `manage.py check` check the
TASKS backends."""

from __future__ import annotations

from django.apps import AppConfig


class InboxgenConfig(AppConfig):
    name = "inboxgen.contrib.django"
    label = "inboxgen"
    verbose_name = "inboxgen"

    def ready(self) -> None:
        # Django registers its system check of the TASKS backends (each backend's check(),
        # ours reporting inboxgen.E001) only once something imports django.tasks, which a
        # project's settings and models rarely do: `manage.py check` would find no issue in a
        # wrong OPTIONS["MODULE"]. Importing it here registers the check.
        try:
            import django.tasks  # noqa: F401
        except ImportError:  # Django before 6 has no task framework, nothing to check
            pass
