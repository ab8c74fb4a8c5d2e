"""Helpers for the operator commands (dtq_cancel, dtq_queue, dtq_dlq, dtq_purge)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandError

from dtq.engine.audit import Actor
from dtq.engine.dlq import DlqFilter
from dtq.engine.errors import DtqError
from dtq.management.commands._common import positive_int, queue_name


def actor() -> Actor:
    """The actor of every command: the OS user running it."""
    return Actor.command()


@contextmanager
def engine_errors() -> Iterator[None]:
    """Turn the engine's refusals (not found, already finished...) into CommandError."""
    try:
        yield
    except DtqError as exc:
        raise CommandError(str(exc)) from None


def confirm(question: str, yes: bool) -> None:
    """Ask before a destructive action unless --yes; anything but y/yes aborts."""
    if yes:
        return
    try:
        answer = input(f"{question} Type 'yes' to continue: ")
    except EOFError:  # no terminal to ask on
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise CommandError("aborted: nothing was changed (pass --yes to skip this question)")


def when(seconds: float | None) -> str:
    """Format epoch seconds as a UTC timestamp."""
    if not seconds:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def add_reason(parser: argparse.ArgumentParser, required: bool = False) -> None:
    """Add --reason (stored in the audit log)."""
    parser.add_argument(
        "--reason", required=required, default="", help="why (stored in the audit log)"
    )


def add_filter(parser: argparse.ArgumentParser) -> None:
    """Add the DLQ filter options used by bulk replay and discard."""
    parser.add_argument("--name", help="only entries of this task name")
    parser.add_argument("--error", help="only entries whose error class contains this text")
    parser.add_argument(
        "--since", type=float, help="only entries dead-lettered at or after (epoch seconds)"
    )
    parser.add_argument(
        "--until", type=float, help="only entries dead-lettered before (epoch seconds)"
    )
    parser.add_argument("--limit", type=positive_int, help="at most this many entries")


def dlq_filter(options: dict[str, Any]) -> DlqFilter:
    """Build the DlqFilter the options describe."""
    return DlqFilter(
        name=options.get("name"),
        error=options.get("error"),
        since=options.get("since"),
        until=options.get("until"),
        limit=options.get("limit"),
    )


def add_queue(parser: argparse.ArgumentParser, required: bool = True, **kwargs: Any) -> None:
    """Add --queue."""
    parser.add_argument("--queue", "-q", type=queue_name, required=required, **kwargs)
