"""The limiters' calendar: minute windows, cap periods and their ids, bounds and lifetimes.

Pure (no Django, no I/O, no clock: every function takes `now`, epoch seconds), shared by the
in-process and the Redis limiter so both name a period the same way (the Redis keys carry the
ids: `kmon:{key}:{YYYYMM|YYYYMMDD|total}`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta


# --- calendar ------------------------------------------------------------------------------------
def minute_window(now: float) -> tuple[int, float]:
    """(index of the UTC calendar minute, epoch seconds when it ends)."""
    minute = int(now // 60)
    return minute, (minute + 1) * 60.0


def retry_after(now: float, reset_at: float) -> int:
    return max(1, math.ceil(reset_at - now))


def month_id(now: float) -> str:
    dt = datetime.fromtimestamp(now, UTC)
    return f"{dt.year:04d}{dt.month:02d}"


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """[first instant, first instant of the next month) of a "YYYYMM" month, UTC."""
    year, mon = int(month[:4]), int(month[4:])
    start = datetime(year, mon, 1, tzinfo=UTC)
    end = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=UTC)
    return start, end


def month_ttl_seconds(month: str, now: float) -> int:
    """Keep a key's month state a week past the month's end (late settles), then let it go."""
    _, end = month_bounds(month)
    return max(60, int(end.timestamp() - now) + 7 * 86400)


# --- spend-cap periods (issue 19): a key's cap counts per UTC month, per UTC day, or in total --
CAP_PERIODS = ("month", "day", "total")
TOTAL_PERIOD = "total"
# A total's state has no end: it is dropped after this long (a later admission reseeds it from
# the database, which is the truth).
TOTAL_TTL_SECONDS = 35 * 86400
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_FOREVER = datetime(9999, 1, 1, tzinfo=UTC)


def day_id(now: float) -> str:
    dt = datetime.fromtimestamp(now, UTC)
    return f"{dt.year:04d}{dt.month:02d}{dt.day:02d}"


def period_id(period: str, now: float) -> str:
    """The id of the cap period containing `now`: "YYYYMM" (month), "YYYYMMDD" (day), "total".

    Month ids are those of the monthly caps before periods existed, so live state carries over.
    """
    if period == "day":
        return day_id(now)
    if period == TOTAL_PERIOD:
        return TOTAL_PERIOD
    return month_id(now)


def period_bounds(period: str) -> tuple[datetime, datetime]:
    """[start, end) of a period id (UTC): the usage records whose spend it counts."""
    if period == TOTAL_PERIOD:
        return _EPOCH, _FOREVER
    if len(period) == 8:
        start = datetime(int(period[:4]), int(period[4:6]), int(period[6:]), tzinfo=UTC)
        return start, start + timedelta(days=1)
    return month_bounds(period)


def period_ttl_seconds(period: str, now: float) -> int:
    """How long a key's period state is kept: a month's a week past its end, a day's two days
    past its end (late settles), a total's TOTAL_TTL_SECONDS (reseeded when it comes back)."""
    if period == TOTAL_PERIOD:
        return TOTAL_TTL_SECONDS
    if len(period) == 8:
        _, end = period_bounds(period)
        return max(60, int(end.timestamp() - now) + 2 * 86400)
    return month_ttl_seconds(period, now)
