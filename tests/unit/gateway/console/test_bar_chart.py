from __future__ import annotations

from gateway.console.bar_chart import HEIGHT, MAX_BARS, BarChart


def test_bars_scale_to_the_largest_value_and_sit_on_one_baseline() -> None:
    bars = BarChart("t", (("a", 10.0), ("b", 5.0), ("c", 0.0))).bars()
    assert [b.label for b in bars] == ["a", "b", "c"]
    assert bars[0].height == 2 * bars[1].height and bars[2].height == 0
    assert len({round(b.y + b.height, 1) for b in bars}) == 1 and bars[0].y + bars[0].height < HEIGHT
    assert bars[0].x < bars[1].x < bars[2].x


def test_empty_zero_and_long_series() -> None:
    assert BarChart("t", ()).bars() == []
    assert all(b.height == 0 for b in BarChart("t", (("a", 0.0), ("b", 0.0))).bars())
    many = BarChart("t", tuple((str(i), float(i)) for i in range(100))).bars()
    assert len(many) == MAX_BARS and many[-1].label == "99"
