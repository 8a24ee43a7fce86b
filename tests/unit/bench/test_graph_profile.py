"""graph_profile's variants: each names engine flags that exist, and setting one is undone exactly."""

from __future__ import annotations

import importlib

import pytest

from bench.graph_profile import VARIANTS, restore_flags, set_flags


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_variant_sets_its_flags_and_restore_puts_the_defaults_back(variant: str) -> None:
    flags = VARIANTS[variant]
    before = {(m, a): getattr(importlib.import_module(m), a) for m, a in flags}  # a typo raises here
    # A variant that changes nothing would time the default under another name.
    assert variant == "default" or any(value != before[key] for key, value in flags.items())
    saved = set_flags(variant)
    try:
        assert saved == before
        for (m, a), value in flags.items():
            assert getattr(importlib.import_module(m), a) == value
            assert type(value) is type(before[m, a]) or before[m, a] is None  # same kind of knob
    finally:
        restore_flags(saved)
    assert {(m, a): getattr(importlib.import_module(m), a) for m, a in flags} == before


def test_an_unknown_variant_changes_nothing() -> None:
    with pytest.raises(KeyError):
        set_flags("no_such_variant")
