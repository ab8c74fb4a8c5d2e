"""Run the reaper: recover tasks of dead or stalled workers, and apply retention."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from dtq.engine.reaper import Reaper
from dtq.management.commands._common import setup_logging, stop_on_signals, warn_about_redis


class Command(BaseCommand):
    help = "Recover tasks of dead or stalled workers and apply retention (any number may run)."

    def handle(self, *args: Any, **options: Any) -> None:
        setup_logging(options["verbosity"])
        warn_about_redis()
        reaper = Reaper()
        stop_on_signals(reaper.stop)
        reaper.run()
