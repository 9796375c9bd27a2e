"""A DRF serializer compiled into one plain converter per field, for documents already known to be valid.

Bulk ingest checks a batch twice: against the contract (fastjsonschema, results.contract) and field by field by
its serializers (DRF), whose generic pass costs about 300 µs per measurement, more than everything else an ingest
does. The converter built here from the same serializer gives the same ``validated_data`` for a valid document in a
fraction of that: each field's conversion (UUID, integer, float, RFC 3339 time, a JSON object without NULs) and the
checks of its own arguments (bounds, lengths, patterns, choices, null, blank, list sizes, the serializer's
``validate``). It never explains: anything it is not sure of (a check failing, a field or argument kind it does
not know, text DRF would trim) raises ``Declined``, and the caller validates with DRF itself, whose messages name
what is wrong and where. The serializer stays the one definition; tests/unit/dashboard checks that both agree.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from django.core import validators as django_validators
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from results.api.serializers import JSONObjectField, RFC3339Field, _without_nul
from results.rfc3339 import parse as parse_time


class Declined(Exception):
    """The converter cannot vouch for this value: validate with DRF."""


Convert = Callable[[Any], Any]
SURROGATE = re.compile("[\ud800-\udfff]")
# validators whose rule a converter below applies itself (the rest make the field unknown: DRF then)
KNOWN_VALIDATORS = (django_validators.MaxLengthValidator, django_validators.MinLengthValidator,
                    django_validators.MaxValueValidator, django_validators.MinValueValidator,
                    django_validators.RegexValidator, django_validators.ProhibitNullCharactersValidator,
                    ProhibitSurrogateCharactersValidator)


def _bounded(field: serializers.Field, convert: Convert) -> Convert:
    """``convert`` then the field's bounds (min/max value or length) and pattern, from its validators."""
    checks: list[Callable[[Any], bool]] = []
    for v in field.validators:
        if not isinstance(v, KNOWN_VALIDATORS):
            raise TypeError(f"{field.field_name}: no converter for {type(v).__name__}")
        if isinstance(v, django_validators.MaxLengthValidator):
            checks.append(lambda x, n=v.limit_value: len(x) <= n)
        elif isinstance(v, django_validators.MinLengthValidator):
            checks.append(lambda x, n=v.limit_value: len(x) >= n)
        elif isinstance(v, django_validators.MaxValueValidator):
            checks.append(lambda x, n=v.limit_value: x <= n)
        elif isinstance(v, django_validators.MinValueValidator):
            checks.append(lambda x, n=v.limit_value: x >= n)
        elif isinstance(v, django_validators.RegexValidator):
            if v.inverse_match:
                raise TypeError(f"{field.field_name}: no converter for an inverse pattern")
            checks.append(lambda x, r=v.regex: r.search(x) is not None)
        # NUL and surrogate characters: _text refuses them for every text field

    def run(value: Any) -> Any:
        out = convert(value)
        for check in checks:
            if not check(out):
                raise Declined
        return out

    return run


def _text(field: serializers.CharField) -> Convert:
    def run(value: Any) -> str:
        if type(value) is not str or "\x00" in value or SURROGATE.search(value):
            raise Declined
        if value.strip() != value or not value:  # DRF trims (and refuses or keeps a blank): let it say which
            if value == "" and field.allow_blank:
                return ""
            raise Declined
        return value
    return run


def _integer(value: Any) -> int:
    t = type(value)
    if t is int:
        return value
    if t is float and value.is_integer():
        return int(value)
    raise Declined


def _float(value: Any) -> float:
    t = type(value)
    if t is float or t is int:
        return float(value)
    raise Declined


def _choice(field: serializers.ChoiceField) -> Convert:
    choices = field.choice_strings_to_values

    def run(value: Any) -> Any:
        if type(value) is not str or value not in choices:
            raise Declined
        return choices[value]
    return run


def _uuid(value: Any) -> uuid.UUID:
    if type(value) is not str:
        raise Declined
    try:
        return uuid.UUID(hex=value)
    except ValueError:
        raise Declined from None


def _time(value: Any) -> Any:
    if type(value) is not str:
        raise Declined
    try:
        return parse_time(value)
    except ValueError:
        raise Declined from None


def _json_object(value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise Declined
    return _without_nul(value)


def _boolean(value: Any) -> bool:
    if type(value) is not bool:
        raise Declined
    return value


def _list(field: serializers.ListField | serializers.ListSerializer, item: Convert) -> Convert:
    longest, shortest = field.max_length, field.min_length
    if not field.allow_empty:
        shortest = max(shortest or 0, 1)

    def run(value: Any) -> list[Any]:
        if type(value) is not list or (longest is not None and len(value) > longest) or (
                shortest is not None and len(value) < shortest):
            raise Declined
        return [item(v) for v in value]
    return run


def _nullable(field: serializers.Field, convert: Convert) -> Convert:
    if not field.allow_null:
        def strict(value: Any) -> Any:
            if value is None:
                raise Declined
            return convert(value)
        return strict
    return lambda value: None if value is None else convert(value)


def field_converter(field: serializers.Field) -> Convert:
    """The converter of one field (TypeError for a kind of field it does not know: compile fails, not a request)."""
    if isinstance(field, serializers.ListSerializer):
        convert = _list(field, converter(type(field.child)))
    elif isinstance(field, serializers.Serializer):
        convert = converter(type(field))
    elif isinstance(field, RFC3339Field):
        convert = _time
    elif isinstance(field, JSONObjectField):
        convert = _json_object
    elif isinstance(field, serializers.ListField):
        convert = _list(field, field_converter(field.child))
    elif isinstance(field, serializers.ChoiceField):
        if field.validators:
            raise TypeError(f"{field.field_name}: no converter for a choice with validators")
        convert = _choice(field)
    elif isinstance(field, serializers.UUIDField):
        convert = _uuid
    elif type(field) in (serializers.CharField, serializers.RegexField):
        convert = _bounded(field, _text(field))
    elif type(field) is serializers.IntegerField:
        convert = _bounded(field, _integer)
    elif type(field) is serializers.FloatField:
        convert = _bounded(field, _float)
    elif type(field) is serializers.BooleanField:
        convert = _boolean
    else:
        raise TypeError(f"{field.field_name}: no converter for {type(field).__name__}")
    return _nullable(field, convert)


@cache
def converter(serializer_class: type[serializers.Serializer]) -> Convert:
    """A plain converter for ``serializer_class``'s documents: a dict equal to DRF's validated_data, or Declined."""
    proto = serializer_class()
    plan = []
    for name, field in proto.fields.items():
        if field.read_only or field.source != name or getattr(proto, f"validate_{name}", None):
            raise TypeError(f"{serializer_class.__name__}.{name}: no converter for this field's options")
        default = field.default
        if default is not empty and callable(default):
            raise TypeError(f"{serializer_class.__name__}.{name}: no converter for a callable default")
        plan.append((name, field_converter(field), field.required, default))
    validate = proto.validate if type(proto).validate is not serializers.Serializer.validate else None
    if proto.validators:
        raise TypeError(f"{serializer_class.__name__}: no converter for serializer-level validators")

    def run(document: Any) -> dict[str, Any]:
        if type(document) is not dict:
            raise Declined
        out: dict[str, Any] = {}
        for name, convert, required, default in plan:
            value = document.get(name, empty)
            if value is empty:
                if required:
                    raise Declined
                if default is not empty:
                    out[name] = default
                continue
            out[name] = convert(value)
        if validate is not None:
            try:
                out = validate(out)
            except serializers.ValidationError:
                raise Declined from None
        return out

    return run


# ---- output: a serializer's representation of dicts, without DRF's generic loop ----

@cache
def representer(serializer_class: type[serializers.Serializer]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``serializer_class``'s representation of a dict (its ``.data`` for one item): each field's own
    ``to_representation`` (a nested serializer's compiled alike), null kept null, in the fields' order. DRF's
    generic loop around those calls (attribute lookup, readable fields, checks per field) cost more than the
    calls themselves: a 90-day pair history's 1 440 points. A dict that lacks a field raises KeyError."""
    plan = []
    for name, field in serializer_class().fields.items():
        if field.write_only or field.source != name:
            raise TypeError(f"{serializer_class.__name__}.{name}: no representer for this field's options")
        if isinstance(field, serializers.ListSerializer | serializers.ListField | serializers.SerializerMethodField):
            raise TypeError(f"{serializer_class.__name__}.{name}: no representer for {type(field).__name__}")
        rep = representer(type(field)) if isinstance(field, serializers.Serializer) else field.to_representation
        plan.append((name, rep))

    def run(item: dict[str, Any]) -> dict[str, Any]:
        return {name: None if (v := item[name]) is None else rep(v) for name, rep in plan}

    return run
