"""Cancel tasks: waiting ones at once, running ones when their handler stops."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dtq.engine import ops
from dtq.engine.errors import DtqError
from dtq.management.commands._ops import actor, add_reason

MESSAGES = {
    "cancelled": "cancelled",
    "requested": "cancel requested: it ends CANCELLED when its handler stops",
}


class Command(BaseCommand):
    help = (
        "Cancel tasks by id. Waiting tasks are cancelled at once; a running task is asked to "
        "stop (async handlers are interrupted, sync ones see context.cancel_requested)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task_ids", nargs="+", metavar="TASK_ID")
        add_reason(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        failed = 0
        for task_id in options["task_ids"]:
            try:
                outcome = ops.cancel(task_id, actor=actor(), reason=options["reason"])
            except DtqError as exc:
                failed += 1
                self.stderr.write(f"{task_id}: {exc}")
                continue
            self.stdout.write(f"{task_id}: {MESSAGES.get(outcome, outcome)}")
        if failed:
            raise CommandError(f"{failed} of {len(options['task_ids'])} task(s) not cancelled")
