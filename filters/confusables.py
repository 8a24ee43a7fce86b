"""Characters folded before detection so that look-alikes and other scripts' digits read as ASCII.

Three one-to-one foldings, applied by ``filters.normalized`` on top of NFKC and case folding:

- every Unicode decimal digit (category Nd: Arabic-Indic ٤, Devanagari ४, Thai ๔ ...) to its
  ASCII digit, so that digit-group detectors see ``4``;
- every dash (category Pd: en and em dashes, the hyphen U+2010, the wave dash 〜) and the minus
  sign to ``-``, so that detectors need one dash in their separator class;
- letters that Unicode's confusables data (UTS #39, as shipped by ``confusable-homoglyphs``)
  lists as a look-alike of one ASCII letter (Cyrillic а і о, Greek ο ν, Cherokee Ꭺ ...) to that
  letter, so that keywords, e-mail addresses and secrets written with look-alikes still match.
  Only letters are folded (category L*): a look-alike digit such as Devanagari ० is folded by
  its value above, and CJK ideographs (〇) are left alone so Chinese terms keep their meaning.

Because every fold maps one character to one character, offsets into the original are kept.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import sys
import unicodedata

_EXTRA_DASHES = ("\u2212", "\u2796", "\ufe63")  # minus signs (Sm): typed between digit groups too


@functools.cache
def _look_alikes() -> dict[int, str]:
    data = importlib.resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    table: dict[int, str] = {}
    for source, homoglyphs in json.loads(data).items():
        if len(source) != 1 or source.isascii() or not unicodedata.category(source).startswith("L"):
            continue
        if unicodedata.name(source, "").startswith(("CJK", "IDEOGRAPHIC")):
            continue
        targets = {h["c"].lower() for h in homoglyphs if len(h["c"]) == 1 and h["c"].isascii()}
        letters = {t for t in targets if t.isalpha()}
        if len(letters) == 1:
            letter = letters.pop()
            # The data maps capital-I look-alikes (Cyrillic І, Greek Ι) to "l", the glyph they share;
            # in case-folded text such a capital stands for "i".
            table[ord(source)] = "i" if letter == "l" and source.isupper() else letter
    return table


@functools.cache
def fold_map() -> dict[int, str]:
    """``str.translate`` table of the three foldings (built once, ~0.2 s)."""
    table = dict(_look_alikes())
    for cp in range(0x80, sys.maxunicode + 1):
        ch = chr(cp)
        category = unicodedata.category(ch)
        if category == "Nd":
            table[cp] = str(unicodedata.decimal(ch))
        elif category == "Pd":
            table[cp] = "-"
    for dash in _EXTRA_DASHES:
        table[ord(dash)] = "-"
    return table


def fold(text: str) -> str:
    """NFKC-normalized text with the foldings applied, then case-folded, then folded again (a
    capital look-alike maps to its capital first; a lower case one only exists after folding)."""
    table = fold_map()
    return text.translate(table).casefold().translate(table)
