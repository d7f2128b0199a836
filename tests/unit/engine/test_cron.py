"""Cron schedules: the dialect, time zones and the DST policy, with exact instants."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from millrace_django.engine import CronSchedule, InvalidCron, UnknownTimezone


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def fires(expression: str, timezone: str, start: datetime, count: int) -> list[datetime]:
    schedule = CronSchedule.parse(expression, timezone)
    instants: list[datetime] = []
    for _ in range(count):
        following = schedule.next_after(instants[-1] if instants else start)
        assert following is not None
        instants.append(following)
    return instants


def test_the_next_occurrence_is_strictly_after_the_given_instant() -> None:
    schedule = CronSchedule.parse("*/15 * * * *")
    assert schedule.next_after(utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 10, 15)
    assert schedule.next_after(utc(2026, 1, 1, 10, 14, 59)) == utc(2026, 1, 1, 10, 15)


def test_occurrences_are_aware_utc_even_for_other_time_zones() -> None:
    following = CronSchedule.parse("0 9 * * *", "Asia/Tokyo").next_after(utc(2025, 12, 31, 12))
    assert following == utc(2026, 1, 1, 0, 0)
    assert following is not None and following.tzinfo is UTC


def test_an_offset_input_is_read_as_the_instant_it_denotes() -> None:
    tokyo_morning = datetime.fromisoformat("2026-01-01T08:59:00+09:00")
    assert CronSchedule.parse("0 0 * * *").next_after(tokyo_morning) == utc(2026, 1, 1)


def test_both_day_fields_restricted_match_either_day() -> None:
    # the 13th, or any Friday
    assert fires("0 0 13 * FRI", "UTC", utc(2026, 2, 1), 3) == [
        utc(2026, 2, 6),
        utc(2026, 2, 13),
        utc(2026, 2, 20),
    ]


def test_names_steps_and_lists_follow_the_vixie_dialect() -> None:
    assert fires("5/20 8-9 * jan,Feb mon-fri", "UTC", utc(2026, 1, 1), 4) == [
        utc(2026, 1, 1, 8, 5),
        utc(2026, 1, 1, 8, 25),
        utc(2026, 1, 1, 8, 45),
        utc(2026, 1, 1, 9, 5),
    ]
    assert fires("0 0 * * 7", "UTC", utc(2026, 1, 1), 1) == [utc(2026, 1, 4)]  # 7 is Sunday


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "must have 5 fields"),
        ("0 * * * * *", "must have 5 fields"),
        ("@daily", "must have 5 fields"),
        ("0 0 L * *", "bad item 'L'"),
        ("0 0 ? * *", "bad item"),
        ("0 0 * * MON#2", "bad item"),
        ("5-1 * * * *", "inverted"),
        ("0 0 * * FRI-MON", "inverted"),
        ("61 * * * *", "invalid"),
        ("*/0 * * * *", "invalid"),
        ("0 0 1 FOO *", "invalid"),
        ("0 0 30 2 *", "no occurrence within 5 years"),
        ("0 0 31 4 *", "no occurrence within 5 years"),
    ],
)
def test_malformed_or_impossible_crons_are_refused_clearly(expression: str, message: str) -> None:
    with pytest.raises(InvalidCron, match=message):
        CronSchedule.parse(expression)


def test_unknown_time_zones_are_refused_clearly() -> None:
    with pytest.raises(UnknownTimezone, match="unknown time zone 'Mars/Olympus'"):
        CronSchedule.parse("* * * * *", "Mars/Olympus")
    with pytest.raises(UnknownTimezone):
        CronSchedule.parse("* * * * *", "../etc/passwd")
    assert issubclass(UnknownTimezone, ValueError)


def test_the_expression_keeps_its_text() -> None:
    assert str(CronSchedule.parse("  0  3 * * *  ", "Europe/Paris")) == "0 3 * * *"


def test_a_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        CronSchedule.parse("* * * * *").next_after(datetime(2026, 1, 1))


def test_a_leap_day_cron_finds_the_next_leap_year() -> None:
    assert CronSchedule.parse("0 0 29 2 *").next_after(utc(2026, 1, 1)) == utc(2028, 2, 29)


# -- DST: Europe/Paris switches at 01:00 UTC (29 March 2026, 25 October 2026) -------------


def test_paris_a_time_skipped_by_spring_forward_fires_once_when_the_clocks_jump() -> None:
    # 02:30 does not exist on 29 March: it fires at 03:00 CEST (01:00 UTC) instead.
    assert fires("30 2 * * *", "Europe/Paris", utc(2026, 3, 27, 12), 4) == [
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 29, 1, 0),  # the jump
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]


def test_paris_several_skipped_times_fire_only_once() -> None:
    assert fires("*/15 2 * * *", "Europe/Paris", utc(2026, 3, 28, 12), 3) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 0),
        utc(2026, 3, 30, 0, 15),
    ]


def test_paris_a_time_repeated_by_fall_back_fires_once_at_its_first_occurrence() -> None:
    assert fires("30 2 * * *", "Europe/Paris", utc(2026, 10, 24, 12), 2) == [
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST; the 02:30 CET an hour later does not fire
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
    ]


def test_paris_asking_during_the_repeated_hour_skips_the_second_pass() -> None:
    schedule = CronSchedule.parse("30 2 * * *", "Europe/Paris")
    assert schedule.next_after(utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 26, 1, 30)


# -- DST: America/New_York (8 March 2026 at 07:00 UTC, 1 November 2026 at 06:00 UTC) -----


def test_new_york_a_time_skipped_by_spring_forward_fires_once_when_the_clocks_jump() -> None:
    assert fires("30 2 * * *", "America/New_York", utc(2026, 3, 7, 12), 3) == [
        utc(2026, 3, 8, 7, 0),  # 03:00 EDT, the first valid instant after 02:30
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
        utc(2026, 3, 10, 6, 30),
    ]


def test_new_york_an_hourly_cron_loses_the_skipped_hour_without_doubling() -> None:
    assert fires("0 * * * *", "America/New_York", utc(2026, 3, 8, 5, 30), 3) == [
        utc(2026, 3, 8, 6, 0),  # 01:00 EST
        utc(2026, 3, 8, 7, 0),  # 02:00 is skipped and 03:00 EDT is the same instant
        utc(2026, 3, 8, 8, 0),  # 04:00 EDT
    ]


def test_new_york_a_time_repeated_by_fall_back_fires_once_at_its_first_occurrence() -> None:
    assert fires("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 2) == [
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT; 01:30 EST (06:30 UTC) does not fire
        utc(2026, 11, 2, 6, 30),  # 01:30 EST
    ]


def test_new_york_an_hourly_cron_fires_the_repeated_hour_once() -> None:
    assert fires("0 * * * *", "America/New_York", utc(2026, 11, 1, 3, 30), 4) == [
        utc(2026, 11, 1, 4, 0),  # 00:00 EDT
        utc(2026, 11, 1, 5, 0),  # 01:00 EDT
        utc(2026, 11, 1, 7, 0),  # 02:00 EST (01:00 EST at 06:00 UTC is the repeat)
        utc(2026, 11, 1, 8, 0),
    ]
