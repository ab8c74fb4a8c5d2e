"""Helpers shared by dtq's management commands."""

from __future__ import annotations

import argparse
import logging
import signal
from typing import Any

from django.core.management.base import CommandError

from dtq.options import InvalidOption, check_queue


def queue_name(value: str) -> str:
    """argparse type for a queue name (dtq.options' rule and message)."""
    try:
        return check_queue(value) or value
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(value: str) -> int:
    """argparse type for an integer >= 1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {number}")
    return number


def positive_float(value: str) -> float:
    """argparse type for a number > 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {number}")
    return number


def setup_logging(verbosity: int) -> None:
    """Log dtq's messages to stderr unless the project configured logging itself."""
    from dtq.engine.connection import RedactFilter

    logger = logging.getLogger("dtq")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
    # Every handler dtq's records reach, the project's too: an error may quote the Redis URL.
    for target in (*logger.handlers, *logging.getLogger().handlers):
        if not any(isinstance(f, RedactFilter) for f in target.filters):
            target.addFilter(RedactFilter())
    logger.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)


def warn_about_redis() -> None:
    """Log Redis settings that put queued tasks at risk; fail clearly if Redis is down."""
    from redis.exceptions import RedisError

    from dtq.checks import redis_warnings
    from dtq.engine.connection import describe, get_client, mask_url, redis_url

    log = logging.getLogger("dtq")
    try:
        client = get_client()
        version = client.info("server").get("redis_version", "0")
    except RedisError as exc:
        url = mask_url(redis_url())
        raise CommandError(f"cannot reach Redis at {url}: {describe(exc)}") from None
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "noeviction")
    except RedisError:
        policy = "noeviction"  # CONFIG is disabled on some managed services
    for warning in redis_warnings(version, policy or "noeviction"):
        log.warning("%s (%s) %s", warning.msg, warning.id, warning.hint)


def stop_on_signals(stop: Any) -> None:
    """Call stop() on the first SIGTERM/SIGINT; exit at once on the second."""
    state = {"count": 0}

    def handler(signum: int, frame: Any) -> None:
        state["count"] += 1
        if state["count"] > 1:
            raise SystemExit(1)
        stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
