import random
import re
from pathlib import Path

import pytest

from filters.detectors.keyword import KeywordDetector, read_terms, skeleton
from filters.errors import PolicyError
from filters.normalized import normalize


def hits(detector: KeywordDetector, text: str) -> list[str]:
    norm = normalize(text)
    return [norm.original[slice(*norm.to_original(a, b))] for a, b in detector.scan(norm.text)]


@pytest.fixture
def detector() -> KeywordDetector:
    return KeywordDetector("keyword", ["洗钱", "地下钱庄", "Insider Trading", "kill"])


def test_survives_inserted_spaces_punctuation_zero_width_and_full_width(detector: KeywordDetector) -> None:
    assert hits(detector, "他在 洗 钱") == ["洗 钱"]
    assert hits(detector, "地-下.钱\u200b庄") == ["地-下.钱\u200b庄"]
    assert hits(detector, "an I.N.S.I.D.E.R trading tip") == ["I.N.S.I.D.E.R trading"]
    assert hits(detector, "ＫＩＬＬ it") == ["ＫＩＬＬ"]


def test_ascii_terms_need_word_boundaries(detector: KeywordDetector) -> None:
    assert hits(detector, "a useful skill") == []
    assert hits(detector, "killer app") == []


def test_too_many_separators_is_not_a_match(detector: KeywordDetector) -> None:
    assert hits(detector, "洗" + " " * 10 + "钱") == []
    assert detector.max_match_len == len("insidertrading") * 4 - 3


def test_empty_list_finds_nothing() -> None:
    assert KeywordDetector("keyword", ["  ", "!!"]).scan("anything") == []


def test_read_terms_skips_comments_and_missing_file_is_a_policy_error(tmp_path: Path) -> None:
    path = tmp_path / "terms.txt"
    path.write_text("# comment\n\n洗钱\n  bomb  \n", encoding="utf-8")
    assert read_terms(path) == ["洗钱", "bomb"]
    with pytest.raises(PolicyError):
        read_terms(tmp_path / "missing.txt")


def test_skeleton_removes_exactly_what_the_separator_regex_matches() -> None:
    rng = random.Random(3)
    pool = [*"ab_ 9-.，。中文\u3000\t!@", "\ud800", "😀", "٣", "ǅ"]
    for _ in range(5_000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))
        assert skeleton(text) == re.sub(r"[\W_]+", "", text)


def test_hits_map_back_through_removed_separators() -> None:
    detector = KeywordDetector("keyword", ["洗钱", "bomb"])
    text = normalize("。。洗，，钱 and b-o-m-b!").text
    assert [text[a:b] for a, b in detector.scan(text)] == ["洗,,钱", "b-o-m-b"]
