"""The one error of spec parsing (plan/spec.py, external/endpoints.py): it names the field, so the operator can put it
in a
condition and an Event, and the local mode can print it."""

from __future__ import annotations


class SpecError(ValueError):
    """An invalid spec. `field` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
