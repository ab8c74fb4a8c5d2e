"""Inspect and act on dead-letter queues: list, show, replay, discard, purge."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dtq.engine import ops, read_side
from dtq.engine.dlq import BulkResult, DlqFilter, matching_batches
from dtq.engine.errors import DtqError
from dtq.management.commands._common import positive_int, queue_name
from dtq.management.commands._ops import (
    actor,
    add_filter,
    add_queue,
    add_reason,
    confirm,
    dlq_filter,
    engine_errors,
    when,
)


class Command(BaseCommand):
    help = "List, show, replay, discard or purge dead-lettered tasks (actions are audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="entries of one queue's DLQ, newest first")
        add_queue(listing)
        listing.add_argument("--limit", type=positive_int, default=50)
        listing.add_argument("--before", help="entry id to continue after (from the last page)")
        show = sub.add_parser("show", help="one task's payload, errors and attempt history")
        show.add_argument("task_id")
        add_queue(show, required=False, help="where to look if the record expired")
        show.add_argument("--json", action="store_true", help="print everything as JSON")
        for name, what in (("replay", "put back on a queue"), ("discard", "delete for good")):
            action = sub.add_parser(name, help=f"{what}: TASK_IDs, or --all of a --queue")
            action.add_argument("task_ids", nargs="*", metavar="TASK_ID")
            add_queue(action, required=False, help="the DLQ's queue (needed with --all)")
            action.add_argument("--all", action="store_true", help="every matching entry")
            add_filter(action)
            action.add_argument("--yes", "-y", action="store_true", help="do not ask")
            add_reason(action)
            if name == "replay":
                action.add_argument("--to-queue", type=queue_name, help="replay into this queue")
        purge = sub.add_parser("purge", help="discard every entry of a queue's DLQ")
        add_queue(purge)
        purge.add_argument("--yes", "-y", action="store_true", help="do not ask")
        add_reason(purge, required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        with engine_errors():
            getattr(self, f"_{options['action']}")(options)

    # ----- reading ---------------------------------------------------------------------

    def _list(self, options: dict[str, Any]) -> None:
        try:
            page = read_side.dlq_entries(options["queue"], options["limit"], options["before"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        for e in page["entries"]:
            error = e["error"] if isinstance(e["error"], dict) else {"class": str(e["error"])}
            message = str(error.get("message", "")).splitlines()[0:1]
            self.stdout.write(
                f"{e['entry_id']}  {e['task_id']}  {when(e['dead_lettered_at'])}  "
                f"attempts={e['attempts']}  {e['name']}  {error.get('class', '')}: "
                f"{(message[0] if message else '')[:80]}"
            )
        shown = len(page["entries"])
        more = f"; next page: --before {page['next_cursor']}" if page["next_cursor"] else ""
        self.stdout.write(f"{shown} of {page['total']} entr(ies){more}")

    def _show(self, options: dict[str, Any]) -> None:
        detail = read_side.dlq_detail(options["task_id"], options["queue"])
        if detail is None:
            raise CommandError(f"task {options['task_id']} is not in a dead-letter queue")
        if options["json"]:
            self.stdout.write(json.dumps(detail, indent=2, default=str, ensure_ascii=False))
            return
        entry = detail["entry"]
        self.stdout.write(f"task      {entry['task_id']}  ({entry['name']})")
        self.stdout.write(f"queue     {entry['queue']}  entry {entry['entry_id']}")
        dead_at = when(entry["dead_lettered_at"])
        self.stdout.write(f"dead      {dead_at}  attempts={entry['attempts']}")
        self.stdout.write(f"payload   {json.dumps(entry['payload'], ensure_ascii=False)}")
        self.stdout.write(f"error     {json.dumps(entry['error'], ensure_ascii=False)}")
        if detail["record"] is None:
            self.stdout.write("history   (the task record is past retention)")
        for h in detail["history"]:
            self.stdout.write(
                f"  attempt {h.get('attempt', '-')}: {h.get('outcome', '?')}"
                f" {h.get('error', '')} {str(h.get('message', '')).splitlines()[0:1]}"
            )
            if h.get("traceback"):
                self.stdout.write("    " + h["traceback"].rstrip().replace("\n", "\n    "))

    # ----- acting ----------------------------------------------------------------------

    def _targets(self, options: dict[str, Any], verb: str) -> DlqFilter | None:
        """Return the filter of an --all action (after confirming), or None for TASK_IDs."""
        if options["all"] == bool(options["task_ids"]):
            raise CommandError("give TASK_IDs or --all (with --queue), not both or neither")
        if not options["all"]:
            return None
        if not options["queue"]:
            raise CommandError("--all needs --queue")
        flt = dlq_filter(options)
        count = sum(len(batch) for _, batch in matching_batches(options["queue"], flt))
        self.stdout.write(f"{count} DLQ entr(ies) of queue {options['queue']} match")
        if count:
            confirm(f"{verb} them?", options["yes"])
        return flt

    def _replay(self, options: dict[str, Any]) -> None:
        flt = self._targets(options, "Replay")
        kwargs = {"actor": actor(), "to_queue": options["to_queue"], "reason": options["reason"]}
        if flt is not None:
            result = ops.replay_many(options["queue"], flt=flt, progress=self._progress, **kwargs)
            self._summary("replayed", result)
            return
        self._each(options, lambda t: ops.replay(t, queue=options["queue"], **kwargs), "replayed")

    def _discard(self, options: dict[str, Any]) -> None:
        flt = self._targets(options, "Discard")
        reason = options["reason"]
        if flt is not None:
            result = ops.discard_many(
                options["queue"], actor=actor(), flt=flt, reason=reason, progress=self._progress
            )
            self._summary("discarded", result)
            return
        confirm(f"Discard {len(options['task_ids'])} DLQ entr(ies)?", options["yes"])
        self._each(
            options,
            lambda t: ops.discard(t, actor=actor(), queue=options["queue"], reason=reason),
            "discarded",
        )

    def _purge(self, options: dict[str, Any]) -> None:
        total = read_side.dlq_entries(options["queue"], limit=1)["total"]
        self.stdout.write(f"dead-letter queue {options['queue']}: {total} entr(ies)")
        if total:
            confirm(f"Discard all {total}?", options["yes"])
        result = ops.purge_dlq(
            options["queue"], actor=actor(), reason=options["reason"], progress=self._progress
        )
        self._summary("discarded", result)

    def _each(self, options: dict[str, Any], act: Any, done: str) -> None:
        failed = 0
        for task_id in options["task_ids"]:
            try:
                outcome = act(task_id)
            except DtqError as exc:
                failed += 1
                self.stderr.write(f"{task_id}: {exc}")
                continue
            self.stdout.write(f"{task_id}: {outcome or done}")
        if failed:
            raise CommandError(f"{failed} of {len(options['task_ids'])} failed")

    def _summary(self, done: str, result: BulkResult) -> None:
        others = {k: v for k, v in result.statuses.items() if k not in (done, "recreated")}
        skipped = f"; skipped {others}" if others else ""
        self.stdout.write(f"{done} {result.done} entr(ies){skipped}")

    def _progress(self, result: BulkResult) -> None:
        self.stderr.write(f"... {result.done} so far")
