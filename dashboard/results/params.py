"""Parsing of query parameters shared by the API and the pages; errors name the parameter."""

from __future__ import annotations

import re
from datetime import timedelta

from results.protocols import PROTOCOLS

# Also the OpenAPI schema's pattern for duration parameters (results.api.openapi): one rule, two readers.
DURATION_PATTERN = r"^([0-9]{1,12})([smhd]?)$"
_DURATION = re.compile(DURATION_PATTERN)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
LONGEST = timedelta(days=365 * 100)  # a longer window reads as "everything": no date arithmetic overflow


class ParamError(ValueError):
    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


def duration(param: str, value: str | None, default: timedelta) -> timedelta:
    if not value:
        return default
    match = _DURATION.match(value)
    if not match:
        raise ParamError(param, f"{value!r} is not a duration like 3600, 30m, 12h or 7d")
    return timedelta(seconds=min(int(match.group(1)) * _UNITS[match.group(2)], LONGEST.total_seconds()))


def name(param: str, value: str | None) -> str:
    """A required name (a node's, a benchmark's): not empty, no NUL (no database stores one)."""
    if not value:
        raise ParamError(param, "is required")
    if "\x00" in value:
        raise ParamError(param, "may not contain NUL characters")
    return value


def protocol(param: str, value: str | None) -> str:
    if not value:
        raise ParamError(param, "is required")
    if value not in PROTOCOLS:
        raise ParamError(param, f"{value!r} is not one of {', '.join(PROTOCOLS)}")
    return value


def integer(param: str, value: str | None, default: int | None = None, lo: int = 0, hi: int = 1000) -> int | None:
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except ValueError:
        raise ParamError(param, f"{value!r} is not an integer") from None
    if not lo <= number <= hi:
        raise ParamError(param, f"{number} is not between {lo} and {hi}")
    return number


NEWEST_STREAMS = "newest"  # the grid's pick of each link's newest cell whatever its streams (selectors.NEWEST)
STREAMS_MAX = 100


def streams(param: str, value: str | None, default: int | str | None = None) -> int | str | None:
    """The grid's stream setting: a count from 0 (no stream count) to 100, or "newest"."""
    if value in (None, ""):
        return default
    if value == NEWEST_STREAMS:
        return NEWEST_STREAMS
    try:
        return integer(param, value, None, 0, STREAMS_MAX)
    except ParamError:
        raise ParamError(param, f"{value!r} is not a stream count from 0 to {STREAMS_MAX}, nor {NEWEST_STREAMS} "
                                "(each link's newest cell, whatever its streams)") from None


CONGESTION_PATTERN = r"^([a-z0-9_]{1,15})$"  # an algorithm's name; "default" names the nodes' own


def congestion_control(param: str, value: str | None) -> str | None:
    """A congestion-control setting: None when not given (every one), "" for `default` (the nodes' own)."""
    if not value:
        return None
    if value == "default":
        return ""
    if not re.fullmatch(CONGESTION_PATTERN, value):
        raise ParamError(param, f"{value!r} is not an algorithm name such as cubic or bbr, nor default")
    return value


def choice(param: str, value: str | None, choices: tuple[str, ...], default: str) -> str:
    if not value:
        return default
    if value not in choices:
        raise ParamError(param, f"{value!r} is not one of {', '.join(choices)}")
    return value
