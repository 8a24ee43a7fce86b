import random

from filters.normalized import NormalizedText, _fold_table, _normalize_general, normalize


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


def _reference(text: str) -> NormalizedText:
    """The general path (whole-text NFKC, else per character) that the table fast path replaces."""
    return _normalize_general(text, _fold_table())


# Characters around every seam of the fast path: ones that compose (e + U+0301, か + U+3099, Hangul
# LV + T jamo), reorder (two combining marks), expand (ß, ﬁ), vanish (format characters), fold
# one-to-one (full-width, Kelvin sign), lone surrogates, and plain ASCII / CJK / Hangul syllables.
_SEAM_CHARS = [
    *"aeKz09 ，。—中文가각かが",
    "\u0301", "\u0323", "\u3099", "\u1100", "\u1161", "\u11a8", "\u212a", "\u2126", "ß", "ﬁ", "Ａ",
    "６", "\u200b", "\u00ad", "\ud800", "\u0f73", "\u0344", "\u0cca", "\u0cd5", "ﾊﾞ", "\uff9e",
    "\u034f", "\ufe0f", "\U000e0100", "\u0664", "\u096a", "\u0430", "\u0406", "\u2013", "\u0439",
]  # fmt: skip


def test_fast_path_equals_general_path_on_every_seam() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(_SEAM_CHARS) for _ in range(rng.randint(1, 6)))
        norm, ref = normalize(text), _reference(text)
        assert (norm.text, norm.starts) == (ref.text, ref.starts), [hex(ord(c)) for c in text]


def test_composing_sequences_stay_per_character() -> None:
    assert normalize("cafe\u0301，").text == "cafe\u0301,"
    assert normalize("ＡＢ，中").text == "ab,中"
    assert normalize("中文").starts is None


def test_every_decimal_digit_becomes_ascii() -> None:
    arabic_indic = "".join(chr(0x0660 + d) for d in range(10))
    devanagari = "".join(chr(0x0966 + d) for d in range(10))
    thai = "".join(chr(0x0E50 + d) for d in range(10))
    assert normalize(arabic_indic + devanagari + thai).text == "0123456789" * 3


def test_ignorables_and_variation_selectors_are_dropped_and_map_back() -> None:
    original = "AKIA\u034fIOSF\ufe0fODNN7\U000e0101EXAMPLE\u115f"
    norm = normalize(original)
    assert norm.text == "akiaiosfodnn7example"
    start, end = norm.to_original(0, len(norm.text))
    assert original[start:end] == original[:-1]


def test_look_alike_letters_fold_to_ascii_and_keep_offsets() -> None:
    original = "\u0456nsider \u0430t ex\u0430mple \u0410KIA \u0406D"  # Cyrillic і а а А І
    norm = normalize(original)
    assert norm.text == "insider at example akia id"
    assert norm.starts is None  # one character for one character


def test_dashes_fold_to_hyphen_minus() -> None:
    assert normalize("4111\u20131111\u20141111\u22121111\u20101").text == "4111-1111-1111-1111-1"


def test_chinese_text_is_left_alone() -> None:
    assert normalize("二〇二四年洗钱中文").text == "二〇二四年洗钱中文"
