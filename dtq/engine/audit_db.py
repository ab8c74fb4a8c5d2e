"""The database connection audit rows are written on: never the caller's transaction.

An audit row must stay committed whatever the caller's transaction does (ATOMIC_REQUESTS, a
`transaction.atomic()` around an operation, a rollback after an error). By default dtq opens
its own connection to the default database for the length of one action (alias `dtq_audit`,
seen by the opening thread only); `DTQ["AUDIT_DATABASE"]` names a configured alias instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from django.db import DEFAULT_DB_ALIAS, connections

from dtq.conf import dtq_settings
from dtq.engine.errors import AuditUnavailable

OWN_ALIAS = "dtq_audit"
_local = threading.local()  # how deeply this thread is inside _own_connection


@contextmanager
def audit_alias() -> Iterator[str]:
    """Yield the alias to write audit rows on; it is in autocommit, outside any transaction."""
    configured = dtq_settings.AUDIT_DATABASE
    if configured:
        if connections[configured].in_atomic_block:
            raise AuditUnavailable(
                f"the audit database {configured!r} is inside a transaction, which would roll "
                "the audit row back with it; point DTQ['AUDIT_DATABASE'] at a connection of "
                "its own, or leave it unset"
            )
        yield configured
        return
    with _own_connection():
        yield OWN_ALIAS


def one_connection() -> AbstractContextManager[None]:
    """Keep dtq's own audit connection open across several actions (e.g. per-id actions)."""
    return nullcontext() if dtq_settings.AUDIT_DATABASE else _own_connection()


def read_alias() -> str:
    """Return the alias to read audit rows from."""
    return dtq_settings.AUDIT_DATABASE or DEFAULT_DB_ALIAS


@contextmanager
def _own_connection() -> Iterator[None]:
    # A private wrapper, known to this thread only: it never joins the caller's transaction,
    # and Django's test classes, which wrap every configured alias, leave it alone. Nested
    # uses (one_connection around several actions) share the outermost one.
    depth = getattr(_local, "depth", 0)
    if depth == 0:
        own = connections[DEFAULT_DB_ALIAS].copy(OWN_ALIAS)
        own.settings_dict.update(ATOMIC_REQUESTS=False, AUTOCOMMIT=True, CONN_MAX_AGE=0)
        connections[OWN_ALIAS] = own
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth
        if depth == 0:
            connections[OWN_ALIAS].close()
            del connections[OWN_ALIAS]
