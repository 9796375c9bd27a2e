"""Parsing of query parameters shared by the API and the pages; errors name the parameter."""

from __future__ import annotations

import re
from datetime import timedelta

from results.models import PROTOCOLS

_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class ParamError(ValueError):
    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


def duration(param: str, value: str | None, default: timedelta) -> timedelta:
    if not value:
        return default
    match = _DURATION.match(value.strip())
    if not match:
        raise ParamError(param, f"{value!r} is not a duration like 3600, 30m, 12h or 7d")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


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


def choice(param: str, value: str | None, choices: tuple[str, ...], default: str) -> str:
    if not value:
        return default
    if value not in choices:
        raise ParamError(param, f"{value!r} is not one of {', '.join(choices)}")
    return value
