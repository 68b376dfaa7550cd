"""Typed model cards: a card made from a dataclass, a pydantic model or a mapping, and read back as one.

The reference runtime's ``DiscoverySpec::from_model`` serialises any serde type into ``card_json``, and
``DiscoveryInstance::deserialize_model::<T>()`` reads a Model instance's card back as ``T`` (an error for
the other kinds of instance). :func:`card_json_of` and :func:`card_as` are their Python counterparts
(:meth:`discovery_sync.ModelSpec.from_card` and ``Model.card_as`` use them). pydantic is never imported
here: a pydantic model or class is recognised by its methods, so it is needed only by callers using it.

Every failure to convert is a :class:`~discovery_sync.errors.ValidationError` naming the class and the
problem, so a reader can skip a card that does not fit (as the reference's watchers skip cards that fail
to deserialise); passing something that is not a class to :func:`card_as` is a TypeError, a caller bug.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import orjson

from .errors import ValidationError
from .identity import RecordKind
from .jsonsafe import CONTAINS_ITSELF, MAX_DEPTH, TOO_DEEP, shortened_path, too_deep

T = TypeVar("T")

ACCEPTED_CARDS = "a mapping, a dataclass instance or a pydantic model instance"
_MAX_REPORTED_ERRORS = 3


def card_json_of(card: Any) -> dict[str, Any]:
    """``card`` as the JSON object a model card is stored as (a new dict; ``card`` is not changed).

    * a mapping: a plain ``dict`` copy of it (one level: its values are the caller's);
    * a dataclass instance: its fields, recursively, as :func:`dataclasses.asdict` returns them;
    * a pydantic v2 model (it has ``model_dump``): ``model_dump(mode="json")``;
    * a pydantic v1 model (it has ``dict()`` and ``__fields__``): ``.dict()``.

    Values are not converted otherwise: what is not storable JSON (an enum, a datetime, a set, a
    NaN) is refused by ``register()``, naming the field, before anything is written.
    ValidationError for anything else, for a class rather than an instance, when pydantic
    cannot serialise the model, and for a dataclass that contains itself (or nests deeper than
    :func:`dataclasses.asdict` can recurse), naming the field.
    """
    if isinstance(card, type):
        raise ValidationError(f"a model card must be {ACCEPTED_CARDS}, got the class {_name(card)}")
    if isinstance(card, Mapping):
        return dict(card)
    if dataclasses.is_dataclass(card) and not isinstance(card, type):
        try:
            return dataclasses.asdict(card)
        except RecursionError:  # asdict recurses without limit: say where the card is too deep
            problem = _nesting_problem(card, _CARD, 2, {}) or f"{_CARD} nests too deep to copy"
            raise ValidationError(f"the model card {type(card).__name__} cannot be stored: {problem}") from None
    if callable(getattr(card, "model_dump", None)):
        return _dumped(functools.partial(card.model_dump, mode="json"), card)
    if callable(getattr(card, "dict", None)) and hasattr(card, "__fields__"):
        return _dumped(card.dict, card)
    raise ValidationError(f"a model card must be {ACCEPTED_CARDS}, got {type(card).__name__}")


def card_as(instance: Any, cls: type[T]) -> T:
    """The card (``card_json``) of the Model ``instance`` as a ``cls``, built from a copy of the card
    (the result shares no dict or list with ``instance``):

    * a dataclass: built from the card's keys that are its ``init`` fields; other keys are ignored,
      as serde ignores unknown fields by default. A field whose type (resolved with
      :func:`typing.get_type_hints`) is a dataclass is built from its JSON object, recursively, and
      so are dataclasses inside ``X | None``, ``list[X]`` and ``dict[str, X]`` (nested as deep as
      wanted). Nothing else is converted or checked: scalars, tuples, sets, enums, datetimes,
      unions of several types and fields whose annotation cannot be resolved (a class defined
      inside a function, or imported only under ``TYPE_CHECKING``) get the value as read from JSON,
      and only the class's own ``__init__``/``__post_init__`` may refuse it;
    * a pydantic v2 class (it has ``model_validate``): ``cls.model_validate(card)``; v1
      (``parse_obj``): ``cls.parse_obj(card)``;
    * a mapping type (``dict``, ...): ``cls(card)``;
    * any other class: ``cls(**card)``.

    ValidationError naming the class and the problem when the card does not fit: a required
    dataclass field missing, a non-object where a dataclass is expected, any error of pydantic's
    validation (shortened), or a TypeError or ValueError raised by the class; the original error
    is chained as ``__cause__``. ValidationError too for a card nested deeper than ``register()``
    stores, or containing itself (only a Model built by hand has one: readers skip such records).
    ValidationError ("... is an endpoint, not a model card") when ``instance`` is not a Model.
    TypeError when ``cls`` is not a class.
    """
    from .model import Model  # model.py imports this module

    if not isinstance(instance, Model):
        raise _not_a_model_card(instance)
    if not isinstance(cls, type):
        raise TypeError(f"card_as needs a class to build, got {cls!r}")
    return _build(_private_copy(instance.card_json), cls, "card_json")


def _dumped(dump: Callable[[], Any], card: Any) -> dict[str, Any]:
    """The result of a pydantic model's ``dump()``, which must be a JSON object."""
    try:
        data = dump()
    except Exception as exc:
        raise ValidationError(f"cannot serialise the model card {type(card).__name__}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValidationError(f"the model card {type(card).__name__} must serialise to a JSON object")
    return data


def _not_a_model_card(instance: Any) -> ValidationError:
    kind = getattr(instance, "kind", None)
    if isinstance(kind, RecordKind) and callable(getattr(instance, "id", None)):
        label = kind.value.replace("_", " ")
        return ValidationError(f"{instance.id().to_path()} is an {label}, not a model card")
    return ValidationError(f"expected a Model instance (a model card), got {type(instance).__name__}")


def _private_copy(card: Any) -> Any:
    """A copy of a JSON value sharing no container with it (a stored card always passes through
    orjson unchanged; an instance built by hand with something else falls back to deepcopy).
    ValidationError for a card nested deeper than a stored one can be, or containing itself."""
    try:
        raw = orjson.dumps(card)
    except (orjson.JSONEncodeError, TypeError):
        problem = _nesting_problem(card, _CARD, 2, {})
        if problem is not None:
            raise ValidationError(f"cannot read the card: {problem}") from None
        return copy.deepcopy(card)
    if too_deep(raw, levels_above=1):
        raise ValidationError(f"cannot read the card: {_CARD} {TOO_DEEP}")
    return orjson.loads(raw)


_CARD = "card_json"


def _nesting_problem(value: Any, path: str, depth: int, ancestors: dict[int, str]) -> str | None:
    """Where ``value`` (at ``path``, ``depth`` levels down its record) contains itself or nests
    deeper than :data:`~discovery_sync.jsonsafe.MAX_DEPTH`, through dataclasses, dicts, lists
    and tuples as :func:`dataclasses.asdict` does; None when it does neither. ``ancestors``:
    the paths of the containers above ``value``, by id. The walk stops at MAX_DEPTH levels."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items: Any = ((field.name, getattr(value, field.name)) for field in dataclasses.fields(value))
    elif isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    outer = ancestors.get(id(value))
    if outer is not None:
        return f"{shortened_path(path)} is {shortened_path(outer)} itself: {CONTAINS_ITSELF}"
    if depth > MAX_DEPTH:
        return f"{shortened_path(path)} {TOO_DEEP}"
    ancestors[id(value)] = path
    try:
        for key, item in items:
            step = f'["{key}"]' if isinstance(key, str) else f"[{key!r}]"
            problem = _nesting_problem(item, path + step, depth + 1, ancestors)
            if problem is not None:
                return problem
        return None
    finally:
        del ancestors[id(value)]


def _build(card: Any, cls: type[T], path: str) -> T:
    """``card`` (the JSON found at ``path``) as a ``cls``, following :func:`card_as`'s rules."""
    if dataclasses.is_dataclass(cls):
        return _build_dataclass(card, cls, path)
    validate = getattr(cls, "model_validate", None) or getattr(cls, "parse_obj", None)
    if callable(validate):
        return typing.cast(T, _validated(validate, card, cls, path))
    if issubclass(cls, Mapping):
        return _constructed(cls, path, card)
    if not isinstance(card, Mapping):
        raise ValidationError(f"{path} must be a JSON object to build {_name(cls)}, got {type(card).__name__}")
    return _constructed(cls, path, **card)


def _build_dataclass(card: Any, cls: type[T], path: str) -> T:
    if not isinstance(card, Mapping):
        raise ValidationError(f"{path} must be a JSON object to build {_name(cls)}, got {type(card).__name__}")
    hints = _field_hints(typing.cast(type, cls))  # a type[T] is hashable, but mypy cannot tell
    arguments: dict[str, Any] = {}
    missing: list[str] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]  # a dataclass, checked by the caller
        if not field.init:
            continue
        if field.name in card:
            arguments[field.name] = _converted(card[field.name], hints.get(field.name), f'{path}["{field.name}"]')
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            missing.append(field.name)
    if missing:
        names = ", ".join(repr(name) for name in missing)
        noun = "field" if len(missing) == 1 else "fields"
        raise ValidationError(f"{path} does not fit {_name(cls)}: it lacks the required {noun} {names}")
    return _constructed(cls, path, **arguments)


def _converted(value: Any, hint: Any, path: str) -> Any:
    """``value`` with the dataclasses its type ``hint`` names built (see :func:`card_as`)."""
    if hint is None:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build_dataclass(value, hint, path)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        others = [arg for arg in args if arg is not type(None)]
        optional = len(others) == 1 and len(args) == 2
        return _converted(value, others[0], path) if optional and value is not None else value
    if origin is list and len(args) == 1 and isinstance(value, list):
        return [_converted(item, args[0], f"{path}[{index}]") for index, item in enumerate(value)]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {key: _converted(item, args[1], f'{path}["{key}"]') for key, item in value.items()}
    return value


@functools.lru_cache(maxsize=256)
def _field_hints(cls: type) -> dict[str, Any]:
    """The resolved type of each field of a dataclass; ``None`` for those that do not resolve."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # one annotation does not resolve: resolve the others one by one
        fields = dataclasses.fields(cls)
        return {field.name: _resolved(field.type, cls) for field in fields}


def _resolved(annotation: Any, cls: type) -> Any:
    if not isinstance(annotation, str):
        return annotation
    module = sys.modules.get(cls.__module__)
    namespace = dict(vars(module)) if module is not None else {}
    try:
        return eval(annotation, namespace, dict(vars(cls)))  # what get_type_hints does, per field
    except Exception:
        return None


def _validated(validate: Callable[[Any], Any], card: Any, cls: type, path: str) -> Any:
    """``validate(card)``, pydantic's errors (whatever their class) as our ValidationError."""
    try:
        return validate(card)
    except Exception as exc:
        raise ValidationError(f"{path} does not fit {_name(cls)}: {_summary(exc)}") from exc


def _constructed(cls: type[T], path: str, /, *args: Any, **kwargs: Any) -> T:
    """``cls(*args, **kwargs)``; a TypeError or ValueError it raises as a ValidationError (positional-only
    parameters, so fields named ``cls`` or ``path`` are passed on)."""
    try:
        return cls(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{path} does not fit {_name(cls)}: {exc}") from exc


def _name(cls: type) -> str:
    """A class's name for messages: qualified, without the ``<locals>`` of a class defined in a function."""
    return cls.__qualname__.rpartition("<locals>.")[2]


def _summary(exc: Exception) -> str:
    """A short account of a validation error: pydantic's first few ``errors()`` as ``loc: msg``,
    or the first line of the message of any other error."""
    errors = getattr(exc, "errors", None)
    try:
        items = list(errors()) if callable(errors) else []
    except Exception:
        items = []
    described = [_error_item(item) for item in items if isinstance(item, Mapping)]
    if not described:
        lines = str(exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__
    more = len(described) - _MAX_REPORTED_ERRORS
    text = "; ".join(described[:_MAX_REPORTED_ERRORS])
    return f"{text} (and {more} more)" if more > 0 else text


def _error_item(item: Mapping[str, Any]) -> str:
    location = ".".join(str(part) for part in item.get("loc") or ()) or "the card"
    return f"{location}: {item.get('msg', 'invalid')}"
