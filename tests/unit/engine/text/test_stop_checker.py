from __future__ import annotations

import pytest

from engine.core.sampling_params import SamplingParams
from engine.text.stop_checker import StopChecker, StopUpdate

EOS = 2


def _run(checker: StopChecker, steps: list[tuple[int, str]]) -> list[StopUpdate]:
    updates = []
    for token_id, delta in steps:
        update = checker.update(token_id, delta)
        updates.append(update)
        if update.is_finished:
            break
    return updates


def test_stop_string_across_token_boundaries_is_held_then_cut() -> None:
    checker = StopChecker(SamplingParams(stop=("###",), max_tokens=10))
    updates = _run(checker, [(5, "ab#"), (6, "#"), (7, "#tail")])
    assert [u.text for u in updates] == ["ab", "", ""]
    assert updates[-1].finish_reason == "stop"
    assert updates[-1].stop_reason == "###"


def test_false_alarm_releases_the_held_text() -> None:
    checker = StopChecker(SamplingParams(stop=("###",), max_tokens=10))
    updates = _run(checker, [(5, "a##"), (6, "x#"), (7, "y")])
    assert [u.text for u in updates] == ["a", "##x", "#y"]
    assert all(u.finish_reason is None for u in updates)


def test_include_stop_str_in_output_keeps_the_stop_string() -> None:
    checker = StopChecker(SamplingParams(stop=("END",), include_stop_str_in_output=True))
    updates = _run(checker, [(5, "done E"), (6, "NDmore")])
    assert "".join(u.text for u in updates) == "done END"
    assert updates[-1].finish_reason == "stop"


def test_earliest_stop_string_wins_and_longest_at_the_same_place() -> None:
    checker = StopChecker(SamplingParams(stop=("cd", "b", "bc")))
    update = checker.update(5, "abcd")
    assert (update.text, update.stop_reason) == ("a", "bc")


def test_stop_string_matched_inside_one_delta() -> None:
    checker = StopChecker(SamplingParams(stop=("\n\n",)))
    update = checker.update(5, "para one\n\npara two")
    assert update == StopUpdate(text="para one", finish_reason="stop", stop_reason="\n\n")


def test_eos_stops_without_its_text_and_releases_held_text() -> None:
    checker = StopChecker(SamplingParams(stop=("##",)), eos_token_ids=[EOS])
    updates = _run(checker, [(5, "x#"), (EOS, "")])
    assert [u.text for u in updates] == ["x", "#"]
    assert updates[-1] == StopUpdate(text="#", finish_reason="stop", stop_reason=None)


def test_ignore_eos_keeps_going_until_length() -> None:
    checker = StopChecker(SamplingParams(ignore_eos=True, max_tokens=3), eos_token_ids=[EOS])
    updates = _run(checker, [(EOS, "a"), (EOS, "b"), (EOS, "c")])
    assert [u.finish_reason for u in updates] == [None, None, "length"]
    assert "".join(u.text for u in updates) == "abc"


def test_stop_token_id_is_honoured_even_with_ignore_eos() -> None:
    checker = StopChecker(SamplingParams(ignore_eos=True, stop_token_ids=(9,)), eos_token_ids=[EOS])
    update = checker.update(9, "<stop>")
    assert update == StopUpdate(text="", finish_reason="stop", stop_reason=9)


def test_stop_token_text_included_when_asked() -> None:
    checker = StopChecker(SamplingParams(stop_token_ids=(9,), include_stop_str_in_output=True))
    assert checker.update(9, "<stop>").text == "<stop>"


def test_length_releases_a_held_partial_stop() -> None:
    checker = StopChecker(SamplingParams(stop=("STOP",), max_tokens=2))
    updates = _run(checker, [(5, "go S"), (6, "T")])
    assert updates[-1] == StopUpdate(text="ST", finish_reason="length")
    assert "".join(u.text for u in updates) == "go ST"


def test_stop_string_wins_over_length_on_the_last_token() -> None:
    checker = StopChecker(SamplingParams(stop=("!",), max_tokens=1))
    assert checker.update(5, "hi!").finish_reason == "stop"


def test_update_after_finish_is_an_error() -> None:
    checker = StopChecker(SamplingParams(max_tokens=1))
    assert checker.update(5, "a").finish_reason == "length"
    with pytest.raises(RuntimeError):
        checker.update(6, "b")


def test_repr_shows_counts_not_text() -> None:
    checker = StopChecker(SamplingParams(stop=("secretX",)))
    checker.update(5, "secret")
    assert "secret" not in repr(checker)


def test_which_tokens_end_without_their_text() -> None:
    plain = StopChecker(SamplingParams(max_tokens=9, stop_token_ids=(7,)), eos_token_ids={2})
    assert plain.drops_text_of(2) and plain.drops_text_of(7) and not plain.drops_text_of(3)
    kept = StopChecker(SamplingParams(max_tokens=9, stop_token_ids=(7,), include_stop_str_in_output=True))
    assert not kept.drops_text_of(7)
    ignoring = StopChecker(SamplingParams(max_tokens=9, ignore_eos=True), eos_token_ids={2})
    assert not ignoring.drops_text_of(2)


def test_without_stop_strings_every_delta_passes_through_at_once() -> None:
    checker = StopChecker(SamplingParams(max_tokens=3))
    assert not checker.has_stop_strings
    assert checker.update(5, "ab") == StopUpdate(text="ab")
    assert checker.update(6, "") == StopUpdate(text="")
    assert checker.update(8, "c") == StopUpdate(text="c", finish_reason="length")
    assert StopChecker(SamplingParams(stop=("x",))).has_stop_strings
