"""The database connection audit rows are written on: never the caller's transaction.

An audit row must stay committed whatever the caller's transaction does (ATOMIC_REQUESTS, a
`transaction.atomic()` around an operation, a rollback after an error). By default dtq opens
its own connection to the default database for the length of one action (alias `dtq_audit`,
seen by the opening thread only); `DTQ["AUDIT_DATABASE"]` names a configured alias to use instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections

from dtq.conf import dtq_settings
from dtq.engine.errors import AuditUnavailable

OWN_ALIAS = "dtq_audit"


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
    # A private wrapper, known to this thread only: it never joins the caller's transaction,
    # and Django's test classes, which wrap every configured alias, leave it alone.
    own = connections[DEFAULT_DB_ALIAS].copy(OWN_ALIAS)
    own.settings_dict.update(ATOMIC_REQUESTS=False, AUTOCOMMIT=True, CONN_MAX_AGE=0)
    connections[OWN_ALIAS] = own
    try:
        yield OWN_ALIAS
    finally:
        own.close()
        del connections[OWN_ALIAS]
