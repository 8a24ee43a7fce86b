from filters.normalized import normalize


def test_ascii_is_lowered_with_identity_offsets() -> None:
    norm = normalize("Card AKIA")
    assert norm.text == "card akia"
    assert norm.starts is None
    assert norm.to_original(5, 9) == (5, 9)


def test_full_width_digits_and_zero_width_chars_map_back() -> None:
    original = "卡号６２２２\u200b0212"
    norm = normalize(original)
    assert norm.text == "卡号62220212"
    start, end = norm.to_original(2, 10)
    assert original[start:end] == "６２２２\u200b0212"


def test_expanding_characters_map_to_their_source() -> None:
    original = "Straße ﬁle"
    norm = normalize(original)
    assert norm.text == "strasse file"
    assert norm.to_original(4, 7) == (4, 6)  # "sse" comes from "ße"
    assert norm.original_index(len(norm.text)) == len(original)


def test_bidi_and_soft_hyphen_are_removed() -> None:
    assert normalize("a\u202eb\u00adc\ufeffd").text == "abcd"


def test_normalizing_a_concatenation_equals_concatenated_parts() -> None:
    parts = ["６２\u200b", "ß", "ＡＢ", "x\u200d"]
    assert normalize("".join(parts)).text == "".join(normalize(p).text for p in parts)
