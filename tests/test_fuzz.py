"""A seeded fuzz run of bad inputs across the REST API, the admin forms and the websocket.

Every input is drawn with one fixed seed from a list of values that broke parsers before
(Unicode digits, numbers past 64 bits, control characters, huge, nested or malformed JSON, ids
of the wrong shape). The only property checked: no 5xx, no crashed consumer. The schemathesis
run (tests/test_api_schemathesis.py) covers the API's schema conformance on top of this.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.ops_support import claim_by_hand, dead_letter_by_hand
from tests.test_consumers import communicator, session_cookie
from tests.testapp import tasks

# The websocket loads its user in worker threads: they must see committed rows.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
SEED = 20261201
API_CASES = 200
ADMIN_CASES = 120
WS_CASES = 30

BAD_VALUES = [
    "",
    " ",
    "-1",
    "0",
    "\u00b2",
    "\u0661\u0662\u0663",
    "\U0001d7d7\U0001d7d7",
    str(2**63),
    str(2**64 + 1),
    "9" * 400,
    "1e309",
    "NaN",
    "-inf",
    "0x1f",
    "\x00",
    "a\nb",
    "x\r\nX-Injected: 1",
    "../../etc/passwd",
    "<script>alert(1)</script>",
    "' OR 1=1 --",
    "%00%ff",
    "{",
    "[]",
    "null",
    "true",
    "é" * 300,
    "x" * 5000,
    "0-0",
    "-",
    "+",
    "(1-0",
    "18446744073709551616-18446744073709551616",
    "1700000000000-99999999999999999999",
    "0000000000000000000000",
    "ZZZZZZZZZZZZZZZZZZZZZZ",
    "tests",
    "🚀",
    "\u202eevil",
]
BAD_JSON_VALUES: list[Any] = [
    None,
    True,
    -1,
    2**70,
    1.5e308,
    "x" * 3000,
    [],
    {},
    [[[[[]]]]],
    {"a": {"b": {"c": None}}},
    ["\u00b2"],
    {"": ""},
    "\x00",
]
RAW_BODIES = [
    b"",
    b"{",
    b"[" * 3000 + b"]" * 3000,
    b'{"task": "\xff\xfe"}',
    b"\xef\xbb\xbf{}",
    b"null",
    b"12",
    b'"just a string"',
    b'{"task": "tests.testapp.tasks.record", "args": [' + b"1," * 50 + b"1]}",
    b'{"a": 1, "a": 2}',
    b"NaN",
]


def value(rng: random.Random) -> str:
    return rng.choice(BAD_VALUES)


def json_value(rng: random.Random) -> Any:
    return rng.choice([*BAD_JSON_VALUES, value(rng)])


def path_part(rng: random.Random) -> str:
    return quote(value(rng) or "x", safe="")


class Run:
    """Sends the cases of one surface and keeps every 5xx it gets back."""

    def __init__(self) -> None:
        self.sent = Counter[str]()
        self.failures: list[str] = []

    def check(self, surface: str, what: str, status: int, body: bytes = b"") -> None:
        self.sent[surface] += 1
        if status >= 500:
            self.failures.append(f"{surface} {what!r} -> {status} {body[:200]!r}")


@pytest.fixture
def data(dtq_env):
    """A queue with queued, delayed, running and dead-lettered tasks to aim the inputs at."""
    tasks.record.enqueue(1)
    tasks.record.enqueue(2)
    ids = {"running": claim_by_hand()[0]["id"], "dead": dead_letter_by_hand(1)[0]}
    ids["queued"] = tasks.record.enqueue(3).id
    ids["delayed"] = tasks.record.using(run_after=timedelta(minutes=5)).enqueue(4).id
    return ids


def api_case(rng: random.Random, ids: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    """Return (method, path, keyword arguments of the client call) for one bad API request."""
    some_id = rng.choice([*ids.values(), path_part(rng)])
    kind = rng.randrange(6)
    if kind == 0:  # list filters and cursors
        path = rng.choice(["tasks/", "dlq/", "audit/", "queues/", "workers/", "queues/tests/"])
        names = ["limit", "cursor", "state", "queue", "task", "before", "after", "minutes"]
        names += ["created_after", "created_before", "action", "actor", "error", "since"]
        params = {rng.choice(names): value(rng) for _ in range(rng.randint(1, 3))}
        return "get", f"/api/{path}?{urlencode(params)}", {}
    if kind == 1:  # ids and names in paths
        target = path_part(rng) if rng.random() < 0.7 else some_id
        path = rng.choice(["tasks/@/", "dlq/@/", "queues/@/", "dlq/@/?queue=" + path_part(rng)])
        return "get", "/api/" + path.replace("@", target, 1), {}
    if kind == 2:  # submissions with bad fields
        body = {"task": rng.choice(["tests.testapp.tasks.record", value(rng)])}
        fields = ["args", "kwargs", "queue", "priority", "run_after", "delay", "max_attempts"]
        fields += ["timeout", "ttl", "task"]
        body |= {rng.choice(fields): json_value(rng) for _ in range(rng.randint(1, 3))}
        headers = {}
        if rng.random() < 0.4:
            headers["HTTP_IDEMPOTENCY_KEY"] = value(rng).replace("\n", " ")
        return "post", "/api/tasks/", {"data": body, "format": "json", **headers}
    if kind == 3:  # raw, malformed bodies
        path = rng.choice(["tasks/", "dlq/replay/", "dlq/purge/", "queues/tests/purge/"])
        body = rng.choice(RAW_BODIES)
        ctype = rng.choice(["application/json", "text/plain", "application/x-www-form-urlencoded"])
        return "post", f"/api/{path}", {"data": body, "content_type": ctype}
    if kind == 4:  # actions with bad reasons, queues, filters
        path = rng.choice(
            [
                f"tasks/{some_id}/cancel/",
                f"dlq/{some_id}/replay/",
                f"dlq/{some_id}/discard/",
                f"queues/{path_part(rng)}/pause/",
                f"queues/{path_part(rng)}/resume/",
                "dlq/replay/",
                "dlq/purge/",
                "queues/tests/purge/",
            ]
        )
        fields = ["reason", "queue", "to_queue", "task", "error", "since", "until", "limit"]
        fields += ["dry_run"]
        body = {rng.choice(fields): json_value(rng) for _ in range(rng.randint(1, 4))}
        return "post", f"/api/{path}", {"data": body, "format": "json"}
    # headers every request carries
    headers = {"HTTP_X_REQUEST_ID": value(rng).replace("\n", " ")}
    return "get", "/api/tasks/?limit=2", headers


def admin_case(rng: random.Random, ids: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    """Return (method, path, form data) for one bad admin request."""

    def url(name: str, *args: str) -> str:
        return reverse(f"admin:dtq_taskqueue_{name}", args=args)

    some_id = rng.choice([*ids.values(), value(rng).replace("/", "") or "x"])
    kind = rng.randrange(5)
    if kind == 0:
        params = {
            rng.choice(["state", "queue", "task", "cursor", "q", "before", "name", "error"]): value(
                rng
            )
            for _ in range(rng.randint(1, 3))
        }
        page = rng.choice(["tasks", "dlq", "changelist", "dlq_purge"])
        return "get", url(page) + "?" + urlencode(params), {}
    if kind == 1:
        page = rng.choice(["task", "task_live"])
        return "get", url(page, some_id), {}
    if kind == 2:
        form = {"reason": value(rng)}
        return "post", url("task_cancel", some_id), form
    if kind == 3:
        form = {
            "action": rng.choice(["replay", "discard", value(rng)]),
            "queue": rng.choice(["tests", value(rng)]),
            "scope": rng.choice(["selected", "matching", value(rng)]),
            "task": [rng.choice([*ids.values(), value(rng)]) for _ in range(rng.randint(0, 3))],
            "to_queue": rng.choice(["", "tests", value(rng)]),
            "confirm": rng.choice(["yes", "", value(rng)]),
            "reason": value(rng),
            rng.choice(["name", "error"]): value(rng),
        }
        return "post", url("dlq_action"), form
    queue = rng.choice(["tests", value(rng).replace("/", "") or "x"])
    page = rng.choice(["queue_pause", "queue_resume", "queue_purge"])
    return "post", url(page, queue), {"reason": value(rng), "confirm": rng.choice(["yes", ""])}


def test_bad_inputs_never_get_a_5xx(data, dtq_env):
    rng = random.Random(SEED)
    run = Run()
    root = User.objects.create(username="fuzz-root", is_staff=True, is_superuser=True)
    api = APIClient(REMOTE_ADDR="203.0.113.9", raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=root).key}")
    admin = Client(raise_request_exception=False)
    admin.force_login(root)

    for _ in range(API_CASES):
        method, path, kwargs = api_case(rng, data)
        response = getattr(api, method)(path, **kwargs)
        run.check("api", f"{method} {path} {kwargs}"[:300], response.status_code, response.content)
    for _ in range(ADMIN_CASES):
        method, path, form = admin_case(rng, data)
        response = getattr(admin, method)(path, form) if form else getattr(admin, method)(path)
        run.check("admin", f"{method} {path} {form}"[:300], response.status_code, response.content)
    ws_fuzz(rng, run)

    assert sum(run.sent.values()) >= 200 and len(run.sent) == 3, run.sent
    assert run.failures == [], "\n".join(run.failures)


def ws_fuzz(rng: random.Random, run: Run) -> None:
    """Connect with bad last_id values and send junk frames; the consumer must never crash."""
    cookie = session_cookie()

    async def scenario() -> None:
        for _ in range(WS_CASES):
            query = urlencode({"last_id": value(rng)}) if rng.random() < 0.8 else value(rng)
            comm = communicator(cookie, quote(query, safe="=&%"))
            ok, _ = await comm.connect(timeout=5)
            status = 101 if ok else 403
            if ok:
                first = await comm.receive_json_from(timeout=5)
                status = 101 if first.get("type") == "events" else 500
                junk = rng.choice(
                    [
                        {"text_data": value(rng) or " "},
                        {"bytes_data": value(rng).encode() or b"\0"},
                        {"text_data": json.dumps(json_value(rng))},
                    ]
                )
                await comm.send_to(**junk)
                await comm.receive_nothing(timeout=0.05)
            await comm.disconnect()  # re-raises any exception the consumer died of
            run.check("websocket", query[:100], status)

    async_to_sync(scenario)()
