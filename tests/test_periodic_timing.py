"""Fire times of cron and interval schedules: DST in two zones, leap days, month ends, policies."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from dtq.engine.cron import Timing
from dtq.engine.errors import InvalidTaskError
from dtq.engine.firing import GRACE_MS, Schedule, idempotency_key, plan, slot_of


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def local_slots(timing: Timing, zone: str, start: datetime, days: int) -> list[str]:
    """Return the slots of `days` days from start, as local wall-clock times with offsets."""
    out = timing.slots(ms(start), ms(start + timedelta(days=days)), 100)
    return [datetime.fromtimestamp(s / 1000, ZoneInfo(zone)).isoformat() for s in out]


@pytest.mark.parametrize(
    ("zone", "cron", "day", "expected"),
    [
        # spring forward: 02:30 does not exist that night; the job fires once, at 03:00
        ("Europe/Paris", "30 2 * * *", (2026, 3, 29), "2026-03-29T03:00:00+02:00"),
        ("America/New_York", "30 2 * * *", (2026, 3, 8), "2026-03-08T03:00:00-04:00"),
        # fall back: the wall-clock time happens twice; the job fires once, at the first
        ("Europe/Paris", "30 2 * * *", (2026, 10, 25), "2026-10-25T02:30:00+02:00"),
        ("America/New_York", "30 1 * * *", (2026, 11, 1), "2026-11-01T01:30:00-04:00"),
    ],
)
def test_daily_job_fires_once_on_dst_days(
    zone: str, cron: str, day: tuple[int, int, int], expected: str
) -> None:
    timing = Timing.of(cron, None, zone)
    start = datetime(*day, tzinfo=ZoneInfo(zone)) - timedelta(days=1)
    slots = local_slots(timing, zone, start, 3)
    assert len(slots) == 3  # one a day: the day before, the transition day, the day after
    assert slots[1] == expected
    assert len(set(slots)) == 3


def test_plain_days_around_dst_keep_wall_clock_time() -> None:
    timing = Timing.of("30 2 * * *", None, "Europe/Paris")
    slots = local_slots(timing, "Europe/Paris", datetime(2026, 10, 23, tzinfo=UTC), 4)
    assert slots == [
        "2026-10-23T02:30:00+02:00",
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",  # the transition day: the first 02:30 only
        "2026-10-26T02:30:00+01:00",
    ]


def test_hourly_job_over_fall_back_fires_every_real_hour_once() -> None:
    timing = Timing.of("0 * * * *", None, "Europe/Paris")
    start = datetime(2026, 10, 24, 22, 30, tzinfo=UTC)
    slots = timing.slots(ms(start), ms(start + timedelta(hours=6)), 100)
    assert len(slots) == 6  # 6 real hours, the repeated wall-clock hour included
    assert all(b > a for a, b in itertools.pairwise(slots))


def test_leap_day_and_month_end() -> None:
    leap = Timing.of("0 9 29 2 *", None, "UTC")
    assert datetime.fromtimestamp(
        leap.next_after(ms(datetime(2026, 1, 1, tzinfo=UTC))) / 1000, UTC
    ) == datetime(2028, 2, 29, 9, tzinfo=UTC)
    month_end = Timing.of("0 0 L * *", None, "Europe/Paris")
    slots = local_slots(month_end, "Europe/Paris", datetime(2026, 1, 15, tzinfo=UTC), 60)
    assert [s[:10] for s in slots] == ["2026-01-31", "2026-02-28"]


def test_seconds_field_and_every_are_aligned() -> None:
    seconds = Timing.of("*/15 * * * * *", None, "UTC")
    start = ms(datetime(2026, 1, 1, tzinfo=UTC))
    assert seconds.slots(start, start + 60_000, 10) == [start + i * 15_000 for i in range(1, 5)]
    every = Timing.of(None, timedelta(seconds=30), None)
    assert every.next_after(start + 1) == start + 30_000  # aligned on the epoch, not on start
    assert every.last_before(start + 30_000) == start


@pytest.mark.parametrize(
    ("cron", "every", "zone", "message"),
    [
        ("61 * * * *", None, None, "invalid cron expression"),
        ("* * *", None, None, "invalid cron expression"),
        (None, None, None, "exactly one of"),
        ("* * * * *", timedelta(seconds=5), None, "exactly one of"),
        (None, timedelta(milliseconds=10), None, "at least one second"),
        ("* * * * *", None, "Mars/Olympus", "unknown time zone"),
    ],
)
def test_bad_definitions_say_what_is_wrong(
    cron: str | None, every: timedelta | None, zone: str | None, message: str
) -> None:
    with pytest.raises(InvalidTaskError, match=message):
        Timing.of(cron, every, zone)


def schedule(catch_up: str, **extra: object) -> Schedule:
    timing = Timing.of(None, timedelta(seconds=10), None)
    fields: dict[str, object] = {"name": "s", "task_name": "t", **extra}
    return Schedule(timing=timing, catch_up=catch_up, **fields)  # type: ignore[arg-type]


NOW = 1_800_000_000_000  # a multiple of 10 s


def test_plan_fires_recent_slots_whatever_the_policy() -> None:
    for catch_up in ("none", "latest", "all"):
        decisions = plan(schedule(catch_up), NOW - 25_000, NOW)
        assert [(d.slot, d.fire) for d in decisions] == [
            (NOW - 20_000, True),
            (NOW - 10_000, True),
            (NOW, True),
        ]


def test_plan_after_an_outage_by_policy() -> None:
    cursor = NOW - 600_000  # ten minutes without a scheduler
    oldest = NOW - GRACE_MS
    none = plan(schedule("none"), cursor, NOW)
    assert not none[0].fire and none[0].reason == "missed (catch_up=none)"
    assert none[0].slot == oldest - 10_000  # the last missed slot closes the skipped range
    assert none[0].skipped[0]["from"] == cursor + 10_000
    assert [d.slot for d in none[1:]] == [oldest, oldest + 10_000, oldest + 20_000, NOW]

    latest = plan(schedule("latest"), cursor, NOW)
    assert latest[0].fire and latest[0].slot == oldest - 10_000
    assert latest[0].skipped[0] == {
        "slot": oldest - 20_000,
        "from": cursor + 10_000,
        "outcome": "skipped",
        "reason": "missed (catch_up=latest)",
    }

    everything = plan(schedule("all"), cursor, NOW)
    assert [d.slot for d in everything] == list(range(cursor + 10_000, NOW + 1, 10_000))
    assert all(d.fire for d in everything)

    short = plan(schedule("all", catch_up_window=timedelta(minutes=1)), cursor, NOW)
    assert not short[0].fire and short[0].reason == "missed (catch_up=all)"
    assert [d.slot for d in short[1:]] == list(range(NOW - 60_000, NOW + 1, 10_000))


def test_plan_has_nothing_before_the_next_slot() -> None:
    assert plan(schedule("all"), NOW, NOW + 9_999) == []


def test_slot_round_trips_through_the_idempotency_key() -> None:
    key = idempotency_key("nightly-report", NOW)
    assert slot_of(key) == datetime.fromtimestamp(NOW / 1000, UTC)
    assert slot_of("order-42") is None
    assert slot_of("dtq.periodic:x:now") is None


def test_schedule_rejects_bad_names_and_policies() -> None:
    with pytest.raises(InvalidTaskError, match="schedule name"):
        schedule("all", name="has space")
    with pytest.raises(InvalidTaskError, match="catch_up must be"):
        schedule("sometimes")
    with pytest.raises(InvalidTaskError, match="overlap must be"):
        schedule("all", overlap="queue")
    with pytest.raises(InvalidTaskError, match=r"JSON"):
        schedule("all", args=(object(),))
