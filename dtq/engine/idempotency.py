"""idempotent_operation: run a side effect once per key, and replay its stored JSON result.

The record (Keys.operation(key), a hash) is 'processing' while one attempt runs the function,
under a short lease that attempt keeps renewing from a background thread; then 'done' with the
result for `ttl` seconds. A failure deletes it, so the next attempt runs the function again. A
process that dies mid-function stops renewing: the lease runs out and the key is free again.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import codec, failpoints, gateway
from dtq.engine.connection import get_client
from dtq.engine.errors import OperationInProgress, PermanentError
from dtq.engine.keys import Keys

KEY = re.compile(r"^[A-Za-z0-9_.:@/+=-]{1,200}$")
DEFAULT_LEASE = 30.0  # seconds a dead process can keep the key 'processing'
log = logging.getLogger("dtq.idempotency")


class _Operation:
    """One attempt at an operation: begin, renew while running, finish."""

    def __init__(self, key: str, lease: float) -> None:
        if not isinstance(key, str) or not KEY.match(key):
            raise ValueError(
                "operation key must be 1-200 characters of letters, digits and _ . : @ / + = -"
            )
        if lease <= 0:
            raise ValueError(f"lease must be positive, got {lease}")
        self.key = key
        self.token = secrets.token_hex(8)
        self.lease_ms = max(int(lease * 1000), 100)
        self.client = get_client()
        self.keys = Keys(dtq_settings.KEY_PREFIX, 0)

    def begin(self) -> list[Any]:
        """Return ['acquired'], ['done', result JSON] or ['busy', lease left in ms]."""
        return gateway.op_begin(self.client, self.keys, self.key, self.token, self.lease_ms)

    def renew(self) -> bool:
        """Extend this attempt's lease; False when it is no longer ours."""
        return gateway.op_renew(self.client, self.keys, self.key, self.token, self.lease_ms)

    def store(self, result: str, ttl: int) -> str:
        """Store the result (unless an earlier one is stored) and return the stored one."""
        reply = gateway.op_finish(self.client, self.keys, self.key, self.token, "done", result, ttl)
        if reply[0] == "kept":
            log.warning("operation key=%s finished twice; the first result is kept", self.key)
        return str(reply[1])

    def release(self) -> None:
        """Free the key after a failure, if this attempt still holds it."""
        gateway.op_finish(self.client, self.keys, self.key, self.token, "failed", "", 0)

    @contextmanager
    def renewing(self) -> Iterator[None]:
        """Renew the lease every third of its length while the body runs."""
        stop = threading.Event()
        interval = self.lease_ms / 3000

        def loop() -> None:
            while not stop.wait(interval):
                try:
                    if not self.renew():
                        log.warning("operation key=%s: lease lost while running", self.key)
                        return
                except Exception as exc:  # a Redis hiccup: the next tick tries again
                    log.warning("operation key=%s: lease renewal failed: %s", self.key, exc)

        thread = threading.Thread(target=loop, name=f"dtq-op-{self.key[:20]}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def idempotent_operation(
    key: str, fn: Callable[[], Any], ttl: float | None = None, *, lease: float = DEFAULT_LEASE
) -> Any:
    """Run fn at most once per key while it succeeds; later calls get its stored result.

    The result must be JSON-serializable; every caller (the first included) gets the JSON
    round trip of it. If fn raises, the key is released and the exception propagates. While
    another attempt runs fn, OperationInProgress (a RetryableError) is raised. `ttl` (default
    IDEMPOTENCY_TTL) is how long the result is kept; `lease` bounds how long a process that
    died mid-fn keeps the key.
    """
    op = _Operation(key, lease)
    reply = op.begin()
    if reply[0] == "done":
        return codec.loads(reply[1])
    if reply[0] == "busy":
        raise OperationInProgress(key, delay=max(int(reply[1]), 0) / 1000)
    try:
        with op.renewing():
            result = fn()
    except BaseException:
        op.release()
        raise
    try:
        text = codec.dumps(result)
    except TypeError as exc:
        op.release()
        raise PermanentError(
            f"operation {key!r} returned a value JSON cannot carry: {exc}"
        ) from None
    if failpoints.ACTIVE:
        failpoints.hit("idempotency.after_fn")
    keep = int(ttl if ttl is not None else dtq_settings.IDEMPOTENCY_TTL)
    return codec.loads(op.store(text, max(keep, 1)))
