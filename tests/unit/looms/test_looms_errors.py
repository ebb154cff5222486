"""Every error class has one stable, unique code in the range of its family."""

from __future__ import annotations

import re

import looms_runtime
from looms_runtime import errors


def _classes() -> list[type[errors.LoomsError]]:
    return [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.LoomsError)
    ]


def test_every_error_has_a_unique_well_formed_code() -> None:
    codes = [cls.code for cls in _classes()]

    assert all(re.fullmatch(r"LMS-\d{3}", code) for code in codes)
    assert len(codes) == len(set(codes))


def test_codes_follow_their_family_range() -> None:
    families = {
        errors.ReplayError: "LMS-1",
        errors.DatabaseError: "LMS-2",
        errors.RegistryError: "LMS-3",
        errors.OperationError: "LMS-4",
    }
    for cls in _classes():
        for family, prefix in families.items():
            if issubclass(cls, family):
                assert cls.code.startswith(prefix), cls


def test_every_error_is_exported_and_documented_in_the_tree() -> None:
    tree = errors.__doc__ or ""
    for cls in _classes():
        assert cls.__name__ in looms_runtime.__all__
        assert f"{cls.__name__}" in tree
        assert cls.code in tree


def test_errors_carry_json_safe_details() -> None:
    error = errors.StartConflictError("conflict", run_id="r1", differs=["input"])

    assert error.to_dict() == {
        "code": "LMS-401",
        "message": "conflict",
        "details": {"run_id": "r1", "differs": ["input"]},
    }
