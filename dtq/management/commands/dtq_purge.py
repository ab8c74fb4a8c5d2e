"""Purge a queue's waiting tasks (or its DLQ), after showing the counts."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dtq.engine import ops, read_side
from dtq.engine.dlq import BulkResult
from dtq.engine.purge import PurgeResult
from dtq.management.commands._ops import actor, add_queue, add_reason, confirm, engine_errors


class Command(BaseCommand):
    help = (
        "Cancel every waiting (queued or scheduled) task of a queue with reason 'purged', or "
        "with --dlq discard its dead-letter queue. Running tasks are never purged. Shows the "
        "counts and asks first unless --yes; audited."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue(parser)
        parser.add_argument("--dlq", action="store_true", help="purge the dead-letter queue")
        parser.add_argument("--dry-run", action="store_true", help="only show the counts")
        parser.add_argument("--yes", "-y", action="store_true", help="do not ask")
        add_reason(parser, required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        with engine_errors():
            if options["dlq"]:
                self._purge_dlq(options)
            else:
                self._purge_queue(options)

    def _purge_queue(self, options: dict[str, Any]) -> None:
        queue = options["queue"]
        preview = ops.preview_purge(queue)
        self.stdout.write(
            f"queue {queue}: {preview.queued} queued and {preview.scheduled} scheduled task(s) "
            f"would be cancelled; {preview.running} running task(s) are left alone"
        )
        if options["dry_run"]:
            return
        if preview.total:  # an empty queue is still swept for stale entries, and audited
            confirm(f"Purge {preview.total} task(s) from queue {queue}?", options["yes"])
        result = ops.purge_queue(
            queue, actor=actor(), reason=options["reason"], progress=self._progress
        )
        self.stdout.write(
            f"purged {result.purged} task(s) ({result.queued} queued, {result.scheduled} "
            f"scheduled), released {result.released_keys} idempotency key(s), removed "
            f"{result.entries_removed} stale entr(ies); {result.running} running task(s) left"
        )

    def _purge_dlq(self, options: dict[str, Any]) -> None:
        queue = options["queue"]
        total = read_side.dlq_entries(queue, limit=1)["total"]
        self.stdout.write(f"dead-letter queue {queue}: {total} entr(ies) would be discarded")
        if options["dry_run"]:
            return
        if total:
            confirm(f"Discard {total} DLQ entr(ies) of queue {queue}?", options["yes"])
        result = ops.purge_dlq(
            queue, actor=actor(), reason=options["reason"], progress=self._progress
        )
        self.stdout.write(f"discarded {result.done} entr(ies)")

    def _progress(self, result: PurgeResult | BulkResult) -> None:
        done = result.purged if isinstance(result, PurgeResult) else result.done
        self.stderr.write(f"... {done} so far")
