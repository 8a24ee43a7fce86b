"""``strongroom bench`` where ``bench`` is not installed (the wheel ships no bench/) says why."""

from __future__ import annotations

import sys

import click
import pytest
from click.testing import CliRunner

from strongroom.cli.root import _mount_bench


def test_bench_from_a_source_checkout_is_the_bench_group() -> None:
    group = click.Group("strongroom")
    _mount_bench(group)
    result = CliRunner().invoke(group, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    assert "throughput" in result.output


def test_bench_without_the_bench_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bench", None)  # an installed wheel: no bench package
    monkeypatch.delitem(sys.modules, "bench.cli", raising=False)
    group = click.Group("strongroom")
    _mount_bench(group)
    result = CliRunner().invoke(group, ["bench", "throughput", "--model", "x"])
    assert result.exit_code == 1
    assert "runs from a source checkout" in result.output


def test_a_missing_dependency_of_bench_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "bench.engine.throughput", None
    )  # bench is there, one of its parts is not
    monkeypatch.delitem(sys.modules, "bench.cli", raising=False)
    with pytest.raises(ModuleNotFoundError):
        _mount_bench(click.Group("strongroom"))
