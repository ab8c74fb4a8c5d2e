"""The operator commands: thin wrappers over ops.py, confirmation, one audit row per action."""

from __future__ import annotations

import getpass
import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

import dtq
from dtq.models import AuditEntry
from tests.ops_support import dead_letter_by_hand, keys
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str, answer: str | None = None, monkeypatch=None) -> tuple[str, str]:
    """Run a command; answer the confirmation question with `answer` when given."""
    if answer is not None:
        monkeypatch.setattr("builtins.input", lambda prompt: answer)
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def state(result: dtq.TaskResult) -> str:
    result.refresh()
    return result.state


def test_cancel_command(dtq_env):
    result = tasks.record.enqueue()
    out, _ = run("dtq_cancel", result.id, "--reason", "typo")
    assert f"{result.id}: cancelled" in out
    assert state(result) == dtq.TaskState.CANCELLED
    row = AuditEntry.objects.get()
    assert (row.actor_name, row.source, row.action, row.reason) == (
        getpass.getuser(),
        "command",
        "cancel",
        "typo",
    )
    with pytest.raises(CommandError, match="not cancelled"):
        run("dtq_cancel", result.id)
    assert AuditEntry.objects.latest("id").outcome == "refused"


def test_queue_command(dtq_env):
    out, _ = run("dtq_queue", "pause", "tests", "--reason", "maintenance")
    assert "paused" in out and dtq_env.client.sismember(keys().paused, "tests")
    out, _ = run("dtq_queue", "pause", "tests")
    assert "already paused" in out
    out, _ = run("dtq_queue", "resume", "tests")
    assert "resumed" in out
    assert AuditEntry.objects.count() == 3
    with pytest.raises(CommandError):
        run("dtq_queue", "pause", "bad queue")


def test_purge_dry_run_changes_nothing(dtq_env):
    results = [tasks.record.enqueue(i) for i in range(3)]
    tasks.record.using(run_after=timedelta(hours=1)).enqueue()
    out, _ = run("dtq_purge", "--queue", "tests", "--dry-run", "--reason", "x")
    assert "3 queued and 1 scheduled" in out
    assert all(state(r) == dtq.TaskState.QUEUED for r in results)
    assert AuditEntry.objects.count() == 0


def test_purge_asks_first_and_a_no_changes_nothing(dtq_env, monkeypatch):
    result = tasks.record.enqueue()
    with pytest.raises(CommandError, match="aborted"):
        run("dtq_purge", "-q", "tests", "--reason", "x", answer="no", monkeypatch=monkeypatch)
    assert state(result) == dtq.TaskState.QUEUED
    assert AuditEntry.objects.count() == 0
    out, err = run(
        "dtq_purge", "-q", "tests", "--reason", "x", answer="yes", monkeypatch=monkeypatch
    )
    assert "purged 1 task(s)" in out and "so far" in err
    assert state(result) == dtq.TaskState.CANCELLED
    assert AuditEntry.objects.get().action == "purge"


def test_purge_requires_a_reason(dtq_env):
    with pytest.raises(CommandError, match="--reason"):
        run("dtq_purge", "--queue", "tests", "--yes")


def test_purge_of_the_dlq(dtq_env):
    for i in range(3):
        tasks.record.enqueue(i)
    dead_letter_by_hand(3)
    out, _ = run("dtq_purge", "--queue", "tests", "--dlq", "--yes", "--reason", "old")
    assert "3 entr(ies) would be discarded" in out and "discarded 3" in out
    assert dtq_env.client.xlen(keys().dlq("tests")) == 0
    assert AuditEntry.objects.get().action == "dlq_purge"


def test_dlq_list_show_replay_discard(dtq_env, monkeypatch):
    for i in range(3):
        tasks.record.enqueue(i)
    first, second, third = dead_letter_by_hand(3)
    out, _ = run("dtq_dlq", "list", "--queue", "tests", "--limit", "2")
    assert out.index(third) < out.index(second) and first not in out
    assert "2 of 3 entr(ies); next page: --before" in out
    out, _ = run("dtq_dlq", "show", first)
    assert "builtins.ValueError" in out and '"args": [0]' in out and "attempt 1: fail" in out
    out, _ = run("dtq_dlq", "replay", first, "--reason", "retry it")
    assert f"{first}: replayed" in out
    with pytest.raises(CommandError, match="1 of 1 failed"):
        run("dtq_dlq", "replay", first)
    with pytest.raises(CommandError, match="aborted"):
        run("dtq_dlq", "discard", second, answer="n", monkeypatch=monkeypatch)
    out, _ = run("dtq_dlq", "discard", second, "--yes")
    assert f"{second}: discarded" in out
    assert [e["t"] for _, e in dtq_env.client.xrange(keys().dlq("tests"))] == [third]
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "outcome"))
    assert actions == [("replay", "ok"), ("replay", "refused"), ("discard", "ok")]


def test_dlq_bulk_replay_with_a_filter(dtq_env, monkeypatch):
    for i in range(4):
        tasks.record.enqueue(i)
    dead_letter_by_hand(4)
    out, _ = run(
        "dtq_dlq",
        "replay",
        "--all",
        "--queue",
        "tests",
        "--limit",
        "3",
        "--to-queue",
        "again",
        answer="yes",
        monkeypatch=monkeypatch,
    )
    assert "3 DLQ entr(ies) of queue tests match" in out and "replayed 3" in out
    assert dtq_env.client.zcard(keys().index("again", "QUEUED")) == 3
    assert AuditEntry.objects.get().affected == 3
    with pytest.raises(CommandError, match="not both or neither"):
        run("dtq_dlq", "replay", "--queue", "tests")
    out, _ = run("dtq_dlq", "purge", "--queue", "tests", "--yes", "--reason", "done")
    assert "discarded 1" in out


def test_purging_an_empty_queue_asks_nothing_and_is_audited(dtq_env):
    out, _ = run("dtq_purge", "--queue", "tests", "--reason", "routine")
    assert "0 queued and 0 scheduled" in out and "purged 0 task(s)" in out
    assert AuditEntry.objects.get().affected == 0
