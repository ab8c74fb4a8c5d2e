"""The task search language shared by the admin and the API: parse a query, match records.

A query is whitespace-separated terms (quote a value holding spaces: ``error:"no route"``):

    task:NAME  queue:Q  state:FAILED,RETRYING     exact; queue and state may repeat (any of)
    created>T  started>=T  finished<T             T: ISO 8601 (UTC when naive), epoch seconds,
                                                  or ago: -30s, -15m, -2h, -7d
    attempt>=2  attempt=1                         attempt count (= > >= < <=)
    worker:W                                      substring of the worker of any attempt
    error:TEXT  error.class:C  error.message:TEXT error text (substring, any case; class exact)
    args.0=42  kwargs.user_id=42  kwargs.a.b="x"  an argument's value (JSON, else a string)
    args~TEXT  kwargs~TEXT  TEXT                  substring of the arguments' JSON

Queue, state and the "after" time bounds narrow what the indexes return (they cost nothing
more); every other term is checked on the records, so it reads what the read budget pays for.
"""

from __future__ import annotations

import operator
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dtq.engine import codec
from dtq.engine.keys import check_queue_name
from dtq.engine.read_side.queues import queue_names
from dtq.engine.read_side.search import search_tasks
from dtq.engine.state import TaskState

Record = dict[str, Any]
Check = Callable[[Record], bool]

TERM = re.compile(r"^([a-z_]+(?:\.[\w-]+)*)(>=|<=|:|=|>|<|~)(.*)$", re.DOTALL)
AGO = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    ":": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
TIMES = {"created": "created_at", "started": "started_at", "finished": "finished_at"}
MAX_QUERY = 2000


class QueryError(ValueError):
    """Raised when a search query cannot be parsed; the message says which term and why."""


@dataclass(slots=True)
class Query:
    """A parsed query: what the indexes can narrow, and the checks left for the records."""

    text: str = ""
    queues: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    name: str | None = None
    created_after: float | None = None  # epoch seconds, strict
    created_before: float | None = None
    entered_after: float | None = None  # a lower bound on the time the task entered its state
    checks: list[Check] = field(default_factory=list)

    def matches(self, record: Record) -> bool:
        """Return whether a decoded task record passes every record-level term."""
        return all(check(record) for check in self.checks)

    def narrow(self, *, state: str | None = None, name: str | None = None) -> None:
        """Add a separate state or name filter (both must hold, as every term)."""
        if state:
            if self.states and state not in self.states:
                self.checks.append(_nothing)  # two different states asked for
            self.states = [state]
        if name:
            if self.name not in (None, name):
                self.checks.append(_nothing)
            self.name = name

    @property
    def reads_records(self) -> bool:
        """Return whether some term can only be checked on the records."""
        return bool(self.checks) or self.name is not None


def _nothing(record: Record) -> bool:
    return False


def parse(text: str, now: float | None = None) -> Query:
    """Parse a search query, or raise QueryError saying which term is wrong."""
    if len(text) > MAX_QUERY:
        raise QueryError(f"query too long: {len(text)} characters, at most {MAX_QUERY}")
    try:
        terms = shlex.split(text)
    except ValueError as exc:
        raise QueryError(f"query cannot be split into terms: {exc}") from None
    query = Query(text=text)
    clock = time.time() if now is None else now
    for term in terms:
        _add(query, term, clock)
    return query


def _add(query: Query, term: str, now: float) -> None:
    match = TERM.match(term)
    if match is None:
        query.checks.append(_payload_contains(term))
        return
    key, op, value = match.groups()
    if not value:
        raise QueryError(f"{term!r}: no value after {op!r}")
    head = key.split(".", 1)[0]
    if key in ("task", "name", "queue", "state", "worker"):
        _need(term, op, (":", "="))
        _add_exact(query, key, value, term)
    elif key in TIMES:
        _add_time(query, key, op, _moment(value, term, now))
    elif key == "attempt":
        _need(term, op, tuple(COMPARE))
        query.checks.append(_attempt(COMPARE[op], _int(value, term)))
    elif head == "error":
        _need(term, op, (":", "=", "~"))
        query.checks.append(_error(key, value, term))
    elif head in ("args", "kwargs"):
        query.checks.append(_argument(key, op, value, term))
    else:
        raise QueryError(f"{term!r}: unknown field {key!r} (see the search help)")


def _need(term: str, op: str, allowed: tuple[str, ...]) -> None:
    if op not in allowed:
        raise QueryError(f"{term!r}: {op!r} does not apply here; use one of {' '.join(allowed)}")


def _add_exact(query: Query, key: str, value: str, term: str) -> None:
    if key in ("task", "name"):
        if query.name is not None and query.name != value:
            query.checks.append(_nothing)  # two different names
        query.name = value
    elif key == "queue":
        for queue in value.split(","):
            try:
                check_queue_name(queue)
            except ValueError as exc:
                raise QueryError(f"{term!r}: {exc}") from None
            if queue not in query.queues:
                query.queues.append(queue)
    elif key == "state":
        for state in value.upper().split(","):
            if state not in TaskState.__members__:
                known = ", ".join(s.value for s in TaskState)
                raise QueryError(f"{term!r}: no state {state!r}; states: {known}")
            if state not in query.states:
                query.states.append(state)
    else:
        query.checks.append(_worker(value))


def _int(value: str, term: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise QueryError(f"{term!r}: {value!r} is not a whole number") from None


def _moment(value: str, term: str, now: float) -> float:
    """Return epoch seconds for an ISO time, epoch seconds, or an ago like -15m."""
    ago = AGO.match(value)
    if ago:
        return now - float(ago.group(1)) * UNITS[ago.group(2)]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise QueryError(
            f"{term!r}: {value!r} is not a time (ISO 8601, epoch seconds, or -15m / -2h / -7d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _add_time(query: Query, key: str, op: str, at: float) -> None:
    if op not in (">", ">=", "<", "<="):
        raise QueryError(f"{key}{op}: time fields take > >= < <=")
    if op in (">", ">="):
        # A task that was created, started or finished after T entered its state after T.
        query.entered_after = max(query.entered_after or at, at)
    if key == "created" and op in (">", ">="):
        query.created_after = max(query.created_after or at, at)
    elif key == "created":
        query.created_before = min(query.created_before or at, at)
    else:
        query.checks.append(_time(TIMES[key], COMPARE[op], at))


def _time(name: str, compare: Callable[[Any, Any], bool], at: float) -> Check:
    return lambda r: r.get(name) is not None and compare(r[name], at)


def _attempt(compare: Callable[[Any, Any], bool], n: int) -> Check:
    return lambda r: compare(int(r.get("attempt") or 0), n)


def _worker(text: str) -> Check:
    def check(record: Record) -> bool:
        workers = [record.get("worker") or ""]
        workers += [h.get("worker") or "" for h in _history(record)]
        return any(text in str(w) for w in workers)

    return check


def _history(record: Record) -> list[dict[str, Any]]:
    history = record.get("history")
    return [h for h in history if isinstance(h, dict)] if isinstance(history, list) else []


def _errors(record: Record) -> list[dict[str, Any]]:
    found = [record["error"]] if isinstance(record.get("error"), dict) else []
    return found + [h["error"] for h in _history(record) if isinstance(h.get("error"), dict)]


def _error(key: str, value: str, term: str) -> Check:
    if key not in ("error", "error.class", "error.message"):
        raise QueryError(f"{term!r}: error fields are error, error.class and error.message")
    needle = value.lower()

    def check(record: Record) -> bool:
        for error in _errors(record):
            cls, message = str(error.get("class") or ""), str(error.get("message") or "")
            if key == "error.class" and cls == value:
                return True
            if key == "error.message" and needle in message.lower():
                return True
            if key == "error" and (needle in cls.lower() or needle in message.lower()):
                return True
        return False

    return check


def _payload(record: Record) -> dict[str, Any]:
    payload = record.get("payload")
    return payload if isinstance(payload, dict) else {}


def _payload_contains(text: str) -> Check:
    return lambda r: (
        text in codec.dumps({"args": _payload(r).get("args"), "kwargs": _payload(r).get("kwargs")})
    )


_MISSING = object()


def _argument(key: str, op: str, value: str, term: str) -> Check:
    head, _, rest = key.partition(".")
    if op == "~":

        def contains(record: Record) -> bool:
            found = _dig(_payload(record).get(head), rest)
            return found is not _MISSING and value in codec.dumps(found)

        return contains
    if not rest:
        raise QueryError(f"{term!r}: name an argument ({head}.0, kwargs.user_id) or use {head}~")
    _need(term, op, tuple(COMPARE))
    try:
        wanted: Any = codec.loads(value)
    except ValueError:
        wanted = value  # a bare word: the string itself
    compare = COMPARE[op]

    def check(record: Record) -> bool:
        found = _dig(_payload(record).get(head), rest)
        if found is _MISSING:
            return False
        if op in (":", "="):  # true is not 1 here, as in JSON
            return bool(found == wanted) and isinstance(found, bool) == isinstance(wanted, bool)
        try:
            return compare(found, wanted)
        except TypeError:  # "a" > 3: not comparable, no match
            return False

    return check


def _dig(value: Any, path: str) -> Any:
    """Return the value at a dotted path (list indexes are numbers), or _MISSING."""
    if not path:
        return value
    for part in path.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


def run(
    query: Query,
    limit: int = 50,
    cursor: str | None = None,
    *,
    queues: list[str] | None = None,
) -> dict[str, Any]:
    """Return one page of tasks matching the query (read_side.search_tasks, plus `queues_total`).

    The query's queues are read, else `queues`, else every known queue; a queue named both
    ways must be in both.
    """
    chosen = query.queues or queues or queue_names()
    if query.queues and queues:
        chosen = [q for q in query.queues if q in queues]
    page = search_tasks(
        chosen,
        query.states or None,
        limit,
        cursor,
        name=query.name,
        created_after=query.created_after,
        created_before=query.created_before,
        entered_after=query.entered_after,
        where=query.matches if query.checks else None,
    )
    return {**page, "queues_total": len(chosen)}
