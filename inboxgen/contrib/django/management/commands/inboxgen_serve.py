"""`manage.py inboxgen_serve [--backend ALIAS ...]`: run the workers of the TASKS backends
that are inboxgen's, until SIGINT or SIGTERM (a second one stops at once)."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inboxgen.contrib.django.serving import service_from_settings
from inboxgen.errors import InboxgenError
from inboxgen.runtime.signals import exit_past_abandoned_threads


class Command(BaseCommand):
    help = "Run the workers of the TASKS backends that are inboxgen's."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", action="append", dest="backends", metavar="ALIAS",
                            help="a TASKS alias to serve (repeat for more; default: every "
                                 "backend that is inboxgen's)")
        parser.add_argument("--log-level", default="INFO",
                            help="level of inboxgen's log lines when the project's LOGGING "
                                 "gives them no handler (default INFO)")

    def handle(self, *args: Any, **options: Any) -> None:
        log = logging.getLogger("inboxgen")
        if not log.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            log.addHandler(handler)
            log.setLevel(options["log_level"].upper())
        try:
            service = service_from_settings(options["backends"])
            service.run()
        except (ImproperlyConfigured, InboxgenError) as err:
            raise CommandError(str(err).splitlines()[0]) from None
        # A second signal stopped at once: do not wait at exit for plain handlers' threads.
        exit_past_abandoned_threads(service.name, service.abandoned_threads)
