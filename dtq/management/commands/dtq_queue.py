"""Pause or resume a queue, or change its flow-control limits."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dtq.engine import ops
from dtq.engine.limits import parse_rate
from dtq.management.commands._common import queue_name
from dtq.management.commands._ops import actor, add_reason, engine_errors


def concurrency(text: str) -> int | None:
    """Parse --max-concurrency: a positive whole number, or 'none' to clear the limit."""
    if text.lower() == "none":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1 or 'none', got {text!r}")
    return int(text)


def rate(text: str) -> str | None:
    """Parse --rate: 'N/s', 'N/m' or 'N/h', or 'none' to clear the limit."""
    if text.lower() == "none":
        return None
    try:
        parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


class Command(BaseCommand):
    help = (
        "Pause or resume a queue (while paused, workers take nothing from it; submissions "
        "still wait), or set its limits: limit QUEUE --max-concurrency N --rate N/s "
        "(--burst B; 'none' clears a limit). Every change is audited."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=("pause", "resume", "limit"))
        parser.add_argument("queue", type=queue_name)
        parser.add_argument("--max-concurrency", type=concurrency, default=ops.UNSET)
        parser.add_argument("--rate", type=rate, default=ops.UNSET)
        parser.add_argument("--burst", type=int, default=None)
        add_reason(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        queue, reason = options["queue"], options["reason"]
        with engine_errors():
            if options["action"] == "limit":
                self._limit(queue, reason, options)
            elif options["action"] == "pause":
                changed = ops.pause_queue(queue, actor=actor(), reason=reason)
                self.stdout.write(f"queue {queue}: {'paused' if changed else 'already paused'}")
            else:
                changed = ops.resume_queue(queue, actor=actor(), reason=reason)
                self.stdout.write(f"queue {queue}: {'resumed' if changed else 'was not paused'}")

    def _limit(self, queue: str, reason: str, options: dict[str, Any]) -> None:
        conc, rate_text, burst = options["max_concurrency"], options["rate"], options["burst"]
        if conc is ops.UNSET and rate_text is ops.UNSET and burst is None:
            limits = ops.queue_limits(queue)
        else:
            limits = ops.set_queue_limits(
                queue,
                actor=actor(),
                max_concurrency=conc,
                rate=rate_text,
                burst=burst,
                reason=reason,
            )
        self.stdout.write(
            f"queue {queue}: max concurrency {limits['max_concurrency'] or 'none'} "
            f"(in use {limits['in_use']}, waiting {limits['waiting']}), "
            f"rate {limits['rate'] or 'none'}"
        )
