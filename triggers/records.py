"""A cheaper `__init__` for the frozen records the loop builds for every occurrence.

A frozen dataclass's generated `__init__` sets each field through
`object.__setattr__(self, name, value)`, which looks the name up on the type again
for every field of every record. The records an occurrence crosses (its claim
request and claim, the trigger's snapshot, the launch request and handle, the
settlement, the ledger record) are built thousands of times a second by the
daemon and far more by `triggers simulate`, at about a microsecond each.
`fast_init` gives such a class an `__init__` that sets each slot through its own
descriptor, found once when the class is made: the same keyword-only parameters
and defaults, the same record, in two thirds of the time. It refuses at import
what it could not do exactly (a default factory, a field left out of `__init__`,
a `__post_init__`, a class that is not a frozen, slotted, keyword-only dataclass).

Each such record also writes its `__init__` out (`init=False`, one
`object.__setattr__` a field): compiled by mypyc (hatch_build.py), that one is a
native constructor, ten times faster again, and `fast_init` leaves it in place. In
plain Python `fast_init` replaces it and keeps it as the new one's `__wrapped__`
(tests/unit/test_records.py checks that both build the same record).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Replace the dataclass `cls`'s `__init__` (see the module doc); returns `cls`.

    Raises:
        TypeError: `cls` is not a frozen, slotted dataclass of keyword-only fields
            with plain defaults and no `__post_init__`.
    """
    written = cls.__dict__.get("__init__")
    if isinstance(written, types.WrapperDescriptorType):
        return cls  # compiled by mypyc: its own `__init__` is native
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__qualname__} is not a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__qualname__} has a __post_init__")
    namespace: dict[str, Any] = {}
    arguments: list[str] = []
    body: list[str] = []
    for index, field in enumerate(dataclasses.fields(cls)):  # type: ignore[arg-type]
        if not field.init or not field.kw_only or field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__qualname__}.{field.name} is not a plain keyword-only field")
        if field.default is dataclasses.MISSING:
            arguments.append(field.name)
        else:
            namespace[f"_default_{index}"] = field.default
            arguments.append(f"{field.name}=_default_{index}")
        namespace[f"_set_{index}"] = cls.__dict__[field.name].__set__
        body.append(f"    _set_{index}(self, {field.name})\n")
    signature = f"self, *, {', '.join(arguments)}" if arguments else "self"
    source = f"def __init__({signature}):\n{''.join(body) or '    pass'}\n"
    # As dataclasses itself does: the source is made of the class's own field names.
    exec(source, namespace)  # noqa: S102
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    if isinstance(written, types.FunctionType):
        init.__wrapped__ = written  # type: ignore[attr-defined]
    type.__setattr__(cls, "__init__", init)
    return cls
