"""Pause or resume a queue: workers read nothing from a paused queue."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dtq.engine import ops
from dtq.management.commands._common import queue_name
from dtq.management.commands._ops import actor, add_reason, engine_errors


class Command(BaseCommand):
    help = (
        "Pause or resume a queue. While paused, workers take nothing from it (running tasks "
        "finish); submissions are still accepted and wait."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=("pause", "resume"))
        parser.add_argument("queue", type=queue_name)
        add_reason(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        queue, reason = options["queue"], options["reason"]
        with engine_errors():
            if options["action"] == "pause":
                changed = ops.pause_queue(queue, actor=actor(), reason=reason)
                self.stdout.write(f"queue {queue}: {'paused' if changed else 'already paused'}")
            else:
                changed = ops.resume_queue(queue, actor=actor(), reason=reason)
                self.stdout.write(f"queue {queue}: {'resumed' if changed else 'was not paused'}")
