"""Run the scheduler: promote delayed and retrying tasks when they are due."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from dtq.engine.scheduler import Scheduler
from dtq.management.commands._common import setup_logging, stop_on_signals, warn_about_redis


class Command(BaseCommand):
    help = "Promote delayed and retrying tasks when they are due (any number may run)."

    def handle(self, *args: Any, **options: Any) -> None:
        setup_logging(options["verbosity"])
        warn_about_redis()
        scheduler = Scheduler()
        stop_on_signals(scheduler.stop)
        scheduler.run()
