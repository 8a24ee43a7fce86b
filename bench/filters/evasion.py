"""Seeded evasion corpus for the content filter (zh + en), shared by the tests and the benchmark.

Three sets, each a list of ``Case`` (a conversation of role-tagged messages):

- ``evasions``: a valid value written the ways a penetration test hid them: card numbers
  separated by ``.``, ``/``, ``_``, newlines, double spaces, en/em dashes or a mix; U+034F,
  U+FE0F or U+200B between digits; Arabic-Indic, Devanagari or full-width digits; resident IDs
  grouped 6-8-4; mobiles with dots; e-mails with ``[at]``/``(at)``/`` at `` and ``[dot]`` or a
  Cyrillic ``а``; AWS keys with U+034F inside or Cyrillic letters; keywords with Cyrillic ``і``,
  zero-width or separator characters; and any of these split over two messages (system and
  user, two user turns, a tool result). Each case expects a finding of its ``type``.
- ``look_alikes``: the same tricks on values no issuer would issue (Luhn off, a prefix no card
  scheme uses, a resident ID with an impossible birth date or province, a 12x "mobile", an
  address without a domain, a key one character short, a near-miss keyword). Each expects no
  finding of its ``type``.
- ``benign``: ordinary financial chat: order and invoice numbers, dates and times, amounts,
  phone extensions, IBAN-like payment references (RF creditor references, masked accounts).
  Each expects no finding at all.

    .venv/bin/python -m bench.filters.evasion --seed 0 | head
"""

from __future__ import annotations

import random
import string
import sys
from collections.abc import Callable

import click
import msgspec

from filters.checksum import luhn_valid, resident_id_check

_CARD_PREFIXES = (  # (prefix, length) for every scheme the detector knows
    ("4", 16), ("4", 13), ("4", 19), ("51", 16), ("55", 16), ("2221", 16), ("2720", 16), ("34", 15),
    ("37", 15), ("62", 16), ("62", 19), ("6011", 16), ("65", 16), ("3530", 16), ("36", 14),
    ("2200", 16), ("2204", 19),
)  # fmt: skip
_NOT_ISSUED = ("9558", "1", "7", "307", "2100", "2800")  # prefixes no card scheme uses
_PROVINCES = ("11", "31", "44", "51", "33", "37", "42", "65")
_ZW = ("\u034f", "\ufe0f", "\u200b", "\u200d", "\u2060")
_DIGIT_SCRIPTS = {"arabic_indic": 0x0660, "devanagari": 0x0966, "fullwidth": 0xFF10, "bengali": 0x09E6}
_CYRILLIC = {"a": "а", "e": "е", "o": "о", "i": "і", "c": "с", "p": "р", "x": "х", "y": "у"}
_CYRILLIC_UPPER = {"A": "А", "E": "Е", "O": "О", "I": "І", "K": "К", "M": "М", "T": "Т", "X": "Х"}
KEYWORDS_EN = ("insider trading tip", "money laundering scheme", "bypass kyc", "structuring deposits")
KEYWORDS_ZH = ("洗钱", "套现", "地下钱庄", "非法集资", "内幕消息")
_NEAR_MISS_EN = ("insider trader", "money laundry", "bypass kayak", "structured deposit")
_NEAR_MISS_ZH = ("洗衣", "套餐", "地下车库", "集资房")
_SPLIT_ROLES = (("system", "user"), ("user", "user"), ("user", "tool"), ("assistant", "user"))

EN = {
    "payment_card": ("Please charge my card {v} today.", "card: {v}", "The card number is {v}, thanks."),
    "cn_resident_id": ("My Chinese ID is {v}.", "ID no. {v} for the form"),
    "cn_mobile": ("Call my mobile {v} please.", "mobile: {v}"),
    "email": ("Write to me at {v} tomorrow.", "my email is {v}"),
    "secret": ("our AWS key is {v} do not share", "key={v}"),
    "keyword": ("Can you explain {v} to me?", "Draft a memo about {v}."),
}
ZH = {
    "payment_card": ("请用我的卡{v}付款。", "银行卡号：{v}，谢谢"),
    "cn_resident_id": ("我的身份证号是{v}，请核实。", "身份证：{v}"),
    "cn_mobile": ("请打我手机{v}联系。", "手机号：{v}"),
    "email": ("邮箱是{v}，谢谢", "请发到{v}"),
    "secret": ("我们的AWS密钥是{v}请保密", "密钥={v}"),
    "keyword": ("请解释一下{v}的流程", "关于{v}的问题"),
}


class Case(msgspec.Struct, frozen=True):
    messages: list[tuple[str, str]]
    """(role, content) pairs of one conversation."""
    type: str
    """The detector the case is about."""
    trick: str
    """How the value is hidden (or what makes a benign text look risky)."""
    lang: str

    @property
    def texts(self) -> list[str]:
        return [content for _, content in self.messages]


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    # ---- values ----------------------------------------------------------------------------
    def card(self, valid: bool) -> str:
        rng = self.rng
        if valid or rng.random() < 0.5:
            prefix, length = rng.choice(_CARD_PREFIXES)
            body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
            digits = [body + d for d in string.digits if luhn_valid(body + d) == valid]
            return rng.choice(digits)
        from filters.detectors.card_scheme import is_issuable

        while True:  # Luhn-valid, but no scheme issues the prefix
            prefix = rng.choice(_NOT_ISSUED)
            length = rng.choice((16, 19))
            body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
            value = next(body + d for d in string.digits if luhn_valid(body + d))
            if not is_issuable(value):
                return value

    def resident_id(self, valid: bool) -> str:
        rng = self.rng
        flaw = "" if valid else rng.choice(("check", "date", "province"))
        province = "00" if flaw == "province" else rng.choice(_PROVINCES)
        area = province + f"{rng.randint(1, 99):02d}{rng.randint(1, 99):02d}"
        month = 13 if flaw == "date" else rng.randint(1, 12)
        born = f"{rng.randint(1950, 2005)}{month:02d}{rng.randint(1, 28):02d}"
        first17 = area + born + f"{rng.randint(0, 999):03d}"
        check = resident_id_check(first17)
        if flaw == "check":
            check = rng.choice([c for c in "0123456789x" if c != check])
        return (first17 + check).upper()

    def mobile(self, valid: bool) -> str:
        second = self.rng.choice("3456789" if valid else "012")
        return "1" + second + "".join(self.rng.choice(string.digits) for _ in range(9))

    def email(self, valid: bool) -> str:
        rng = self.rng
        local = rng.choice(("zhang.san", "li_si", "wang.wu88", "john.doe", "mary_smith", "chen.jie"))
        domain = rng.choice(("example.com", "corp.example.cn", "mail.example.org", "bank.example.com.cn"))
        return (
            f"{local}@{domain}" if valid else f"{local}@{rng.choice(('localhost', 'intranet', 'mailhost'))}"
        )

    def aws_key(self, valid: bool) -> str:
        tail = "".join(self.rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))
        return "AKIA" + (tail if valid else tail[:11])

    def keyword(self, valid: bool, lang: str) -> str:
        if lang == "zh":
            return self.rng.choice(KEYWORDS_ZH if valid else _NEAR_MISS_ZH)
        return self.rng.choice(KEYWORDS_EN if valid else _NEAR_MISS_EN)

    # ---- tricks ----------------------------------------------------------------------------
    def group_digits(self, digits: str, sizes: tuple[int, ...] = ()) -> tuple[str, str]:
        """Digits in groups joined by separators a person types; returns (text, trick)."""
        rng = self.rng
        sizes = sizes or ((4, 6, 5) if len(digits) == 15 else (4,) * 5)
        groups, pos = [], 0
        for size in sizes:
            if pos < len(digits):
                groups.append(digits[pos : pos + size])
                pos += size
        if pos < len(digits):
            groups.append(digits[pos:])
        trick = rng.choice(
            ("dot", "slash", "underscore", "newline", "double_space", "en_dash", "em_dash", "mixed")
        )
        one = {"dot": ".", "slash": "/", "underscore": "_", "newline": "\n", "double_space": "  ",
               "en_dash": " – ", "em_dash": "—"}  # fmt: skip
        if trick == "mixed":
            seps = [rng.choice((".", "-", " ", "/", " - ", "_")) for _ in groups[1:]]
        else:
            seps = [one[trick]] * (len(groups) - 1)
        text = groups[0] + "".join(s + g for s, g in zip(seps, groups[1:], strict=True))
        return text, trick

    def digit_trick(self, digits: str, sizes: tuple[int, ...] = ()) -> tuple[str, str]:
        rng = self.rng
        pick = rng.random()
        if pick < 0.5:
            return self.group_digits(digits, sizes)
        if pick < 0.75:
            zw = rng.choice(_ZW)
            return zw.join(digits), f"ignorable_U+{ord(zw):04X}"
        script = rng.choice(list(_DIGIT_SCRIPTS))
        base = _DIGIT_SCRIPTS[script]
        return "".join(chr(base + int(c)) if c.isdigit() else c for c in digits), f"digits_{script}"

    def text_trick(self, value: str) -> tuple[str, str]:
        rng = self.rng
        pick = rng.random()
        if pick < 0.4:
            table = {**_CYRILLIC, **_CYRILLIC_UPPER}
            spots = [i for i, c in enumerate(value) if c in table]
            if spots:
                i = rng.choice(spots)
                return value[:i] + table[value[i]] + value[i + 1 :], "cyrillic"
        if pick < 0.8:
            zw = rng.choice(_ZW)
            i = rng.randint(1, len(value) - 1)
            return value[:i] + zw + value[i:], f"ignorable_U+{ord(zw):04X}"
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value), "fullwidth"

    def email_trick(self, address: str) -> tuple[str, str]:
        rng = self.rng
        local, domain = address.split("@")
        pick = rng.random()
        if pick < 0.6:
            at = rng.choice((" [at] ", "[at]", " (at) ", "(at)", " {at} ", " at "))
            dot = rng.choice((".", " [dot] ", "[dot]", " (dot) ", " dot "))
            return local + at + domain.replace(".", dot), "written_at"
        if pick < 0.85:
            return self.text_trick(address)
        return address.replace("@", "＠"), "fullwidth_at"

    # ---- cases -----------------------------------------------------------------------------
    def hidden(self, kind: str, valid: bool, lang: str) -> tuple[str, str]:
        """A value of ``kind`` written with one trick: (text, trick)."""
        if kind == "payment_card":
            return self.digit_trick(self.card(valid))
        if kind == "cn_resident_id":
            value = self.resident_id(valid)
            text, trick = self.digit_trick(value[:17], (6, 8, 3))
            return text + value[17], trick
        if kind == "cn_mobile":
            if self.rng.random() < 0.5:
                value = self.mobile(valid)
                sep = self.rng.choice((".", ". ", " . ", "-", "  "))
                return sep.join((value[:3], value[3:7], value[7:])), "dots"
            return self.digit_trick(self.mobile(valid), (3, 4, 4))
        if kind == "email":
            return self.email_trick(self.email(valid))
        if kind == "secret":
            return self.text_trick(self.aws_key(valid))
        return self.text_trick(self.keyword(valid, lang))

    def case(self, kind: str, valid: bool) -> Case:
        rng = self.rng
        lang = rng.choice(("zh", "en"))
        text, trick = self.hidden(kind, valid, lang)
        template = rng.choice((ZH if lang == "zh" else EN)[kind])
        head, tail = template.split("{v}")
        if rng.random() < 0.3 and len(text) > 4:
            cut = rng.randint(2, len(text) - 2)
            roles = rng.choice(_SPLIT_ROLES)
            messages = [(roles[0], head + text[:cut]), (roles[1], text[cut:] + tail)]
            return Case(messages, kind, f"split_{roles[0]}_{roles[1]}+{trick}", lang)
        role = rng.choice(("user", "user", "system", "tool", "assistant"))
        return Case([(role, head + text + tail)], kind, trick, lang)


KINDS = ("payment_card", "cn_resident_id", "cn_mobile", "email", "secret", "keyword")


def evasions(seed: int = 0, num: int = 600) -> list[Case]:
    gen = Generator(seed)
    return [gen.case(KINDS[i % len(KINDS)], True) for i in range(num)]


def look_alikes(seed: int = 0, num: int = 600) -> list[Case]:
    gen = Generator(seed + 10_000)
    return [gen.case(KINDS[i % len(KINDS)], False) for i in range(num)]


def benign(seed: int = 0, num: int = 1000) -> list[Case]:
    rng = random.Random(seed + 20_000)
    out = []
    for _ in range(num):
        lang = rng.choice(("zh", "en"))
        trick, text = _benign_text(rng, lang)
        out.append(Case([("user", text)], "none", trick, lang))
    return out


def _benign_text(rng: random.Random, lang: str) -> tuple[str, str]:
    d = lambda n: "".join(rng.choice(string.digits) for _ in range(n))  # noqa: E731
    date = f"{rng.randint(2015, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    slash_date = date.replace("-", "/")
    amount = f"{rng.randint(1, 999)},{d(3)}.{d(2)}"
    kind = rng.choice(("order", "invoice", "date", "amount", "extension", "reference", "account", "mixed"))
    if kind == "order":
        order = date.replace("-", "") + d(rng.choice((6, 8, 10)))
        return kind, (
            f"订单号 {order} 已于 {date} 发货。" if lang == "zh" else f"Order {order} shipped on {date}."
        )
    if kind == "invoice":
        inv = f"INV-{date[:4]}-{d(6)}"
        return kind, (
            f"发票 {inv}，金额 ¥{amount}"
            if lang == "zh"
            else f"Invoice {inv} for ${amount} is due {slash_date}."
        )
    if kind == "date":
        when = f"{slash_date} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        return kind, (
            f"会议时间：{when}，请准时参加" if lang == "zh" else f"The meeting is at {when}, see you."
        )
    if kind == "amount":
        return kind, (
            f"本月共转账 {amount} 元，手续费 {d(2)}.{d(2)} 元"
            if lang == "zh"
            else f"Total {amount} USD, fee {d(2)}.{d(2)}"
        )
    if kind == "extension":
        ext = d(rng.choice((3, 4)))
        return kind, (
            f"请拨总机后转分机 {ext}" if lang == "zh" else f"Call the front desk and ask for ext. {ext}"
        )
    if kind == "reference":
        ref = "RF" + d(2) + " " + " ".join(d(4) for _ in range(rng.randint(2, 4)))
        return kind, (f"付款参考号 {ref}" if lang == "zh" else f"Payment reference {ref}, thank you")
    if kind == "account":
        masked = f"**** **** **** {d(4)}"
        return kind, (
            f"尾号 {d(4)} 的账户（{masked}）余额 {amount}"
            if lang == "zh"
            else f"Account {masked} balance {amount}"
        )
    return kind, f"{date} {d(2)}:{d(2)} order {d(8)} qty {rng.randint(1, 99)} total {amount} ref {d(6)}"


class Scores(msgspec.Struct, frozen=True):
    num_cases: int
    num_hits: int
    """Evasions: cases with a finding of their type. Look-alikes: cases wrongly flagged with
    their type. Benign: cases with any finding."""
    rate: float
    missed: list[str]
    """Up to 10 tricks of the cases that went the wrong way, for the report."""


def score(cases: list[Case], found: Callable[[Case], set[str]], *, expect: bool) -> Scores:
    """``found`` gives the finding types of one case; ``expect`` True counts cases whose type was
    found (recall), False counts cases flagged with their type, or with anything if benign."""
    hits, wrong = 0, []
    for case in cases:
        types = found(case)
        hit = case.type in types if case.type != "none" else bool(types)
        hits += hit
        if hit != expect:
            wrong.append(f"{case.type}:{case.trick}")
    return Scores(len(cases), hits, round(hits / max(1, len(cases)), 4), wrong[:10])


@click.command()
@click.option("--seed", default=0, show_default=True)
@click.option("--num", default=600, show_default=True)
def main(seed: int, num: int) -> None:
    for name, cases in (("evasion", evasions(seed, num)), ("look_alike", look_alikes(seed, num))):
        for case in cases:
            sys.stdout.write(
                msgspec.json.encode({"set": name, **msgspec.structs.asdict(case)}).decode() + "\n"
            )


if __name__ == "__main__":
    main()
