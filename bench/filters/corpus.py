"""Seeded, labelled zh+en corpus for the content filter: checksum-valid entities, and
checksum-invalid look-alikes as negatives (present in the text, never labelled).

    .venv/bin/python -m bench.filters.corpus --num 6000 --seed 0 > corpus.jsonl
"""

from __future__ import annotations

import random
import string
import sys
from collections.abc import Callable

import click
import msgspec
from faker import Faker

from filters.checksum import (
    credit_code_check,
    credit_code_valid,
    iban_valid,
    luhn_valid,
    resident_id_check,
    resident_id_valid,
)
from filters.detectors.card_scheme import is_issuable

USCC_ALPHABET = "0123456789ABCDEFGHJKLMNPQRTUWXY"


class Entity(msgspec.Struct, frozen=True):
    type: str
    start: int
    end: int


class Sample(msgspec.Struct, frozen=True):
    text: str
    entities: list[Entity]
    lang: str


EN_TEMPLATES = [
    "Hi, please update my {label} to {value} before Friday.",
    "The customer's {label} is {value}. Please verify.",
    "{value} — that's the {label} from the form.",
    "Can you check whether {value} is correct for my account?",
    "Forwarding the {label} ({value}) as requested, thanks!",
    "Log line: user={name} {label}={value} status=ok",
]
ZH_TEMPLATES = [
    "您好，我的{label}是{value}，请帮我核实一下。",
    "客户{name}提供的{label}：{value}，已登记。",
    "请把{label}{value}发给风控部门。",
    "{label}是{value}谢谢",
    "麻烦查询一下{value}这个{label}对应的记录。",
    "备注：{name}的{label}为{value}，明天回访。",
]
LABELS = {
    "payment_card": ("card number", "银行卡号"),
    "cn_resident_id": ("Chinese ID number", "身份证号"),
    "cn_credit_code": ("unified social credit code", "统一社会信用代码"),
    "cn_mobile": ("mobile", "手机号"),
    "iban": ("IBAN", "IBAN账号"),
    "us_ssn": ("SSN", "社会安全号"),
    "email": ("email", "邮箱"),
    "phone": ("phone", "电话"),
    "ipv4": ("server IP", "服务器IP"),
    "secret": ("API key", "密钥"),
}


def luhn_complete(rng: random.Random, prefix: str, length: int) -> str:
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    return next(body + d for d in string.digits if luhn_valid(body + d))


def group(rng: random.Random, digits: str) -> str:
    style = rng.choice(["plain", "space", "dash"])
    if style == "plain":
        return digits
    sep = " " if style == "space" else "-"
    return sep.join(digits[i : i + 4] for i in range(0, len(digits), 4))


def wrong_last(rng: random.Random, value: str, ok: Callable[[str], bool]) -> str:
    while True:
        candidate = value[:-1] + rng.choice(string.digits)
        if not ok(candidate):
            return candidate


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.en = Faker("en_US")
        self.zh = Faker("zh_CN")
        self.en.seed_instance(seed)
        self.zh.seed_instance(seed + 1)

    def card(self, valid: bool) -> str:
        rng = self.rng
        pick = rng.random()
        if pick < 0.4:
            digits = luhn_complete(rng, "62" + rng.choice("2458"), rng.choice([16, 17, 18, 19]))
        else:
            faker = self.zh if pick < 0.7 else self.en
            digits = faker.credit_card_number()
            while not 13 <= len(digits) <= 19:  # Faker's Maestro can be 12 digits
                digits = faker.credit_card_number()
        if not valid:
            digits = wrong_last(rng, digits, luhn_valid)
        return group(rng, digits)

    def issued_card(self, valid: bool) -> str:
        """A card number some scheme issues (Faker's JCB draws 35xx below JCB's 3528)."""

        while True:
            value = self.card(valid)
            if is_issuable(value.replace(" ", "").replace("-", "")):
                return value

    def resident_id(self, valid: bool) -> str:
        value = self.zh.ssn()
        if not valid:
            right = resident_id_check(value[:17]).upper()
            value = value[:17] + self.rng.choice([c for c in "0123456789X" if c != right])
        return value

    def credit_code(self, valid: bool) -> str:
        rng = self.rng
        body = rng.choice("1569") + rng.choice("123") + self.zh.postcode()[:6].ljust(6, "0")
        body += "".join(rng.choice(USCC_ALPHABET) for _ in range(9))
        check = credit_code_check(body.lower()).upper()
        if not valid:
            check = rng.choice([c for c in USCC_ALPHABET if c != check])
        return body + check

    def mobile(self, valid: bool) -> str:
        rng = self.rng
        number = self.zh.phone_number()
        if not valid:
            number = (
                "1" + rng.choice("012") + number[2:]
                if rng.random() < 0.5
                else number + rng.choice(string.digits)
            )
            return number
        style = rng.random()
        if style < 0.5:
            return number
        if style < 0.75:
            return f"{number[:3]} {number[3:7]} {number[7:]}"
        return f"+86 {number[:3]}-{number[3:7]}-{number[7:]}"

    def iban(self, valid: bool) -> str:
        value = self.en.iban()
        if not valid:
            check = int(value[2:4])
            value = value[:2] + f"{(check + self.rng.randint(1, 90)) % 100:02d}" + value[4:]
        if self.rng.random() < 0.5:
            value = " ".join(value[i : i + 4] for i in range(0, len(value), 4))
        return value

    def ssn(self, valid: bool) -> str:
        value = self.en.ssn()
        if not valid:
            value = self.rng.choice(["000", "666", "9" + value[1:3]]) + value[3:]
        return value

    def email(self, valid: bool) -> str:
        value = (self.zh if self.rng.random() < 0.5 else self.en).email()
        if not valid:
            local = value.split("@")[0]
            value = self.rng.choice([f"{local}@localhost", f"{local} at example", f"{local}@"])
        return value

    def phone(self, valid: bool) -> str:
        value = self.en.phone_number()
        if not valid:
            value = self.rng.choice(["#", "No. ", "order "]) + str(self.rng.randint(10000, 999999))
        return value

    def ipv4(self, valid: bool) -> str:
        if valid:
            return self.en.ipv4()
        rng = self.rng
        return rng.choice(
            [
                f"{rng.randint(256, 999)}.{rng.randint(0, 255)}.1.1",
                f"{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 20)}",
            ]
        )

    def secret(self, valid: bool) -> str:
        rng = self.rng
        alnum = string.ascii_letters + string.digits
        if not valid:
            return rng.choice(["api_key=" + "x" * 20, "AKIA1234", "token=changeme", "sk-short"])
        kind = rng.random()
        if kind < 0.25:
            return "AKIA" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))
        if kind < 0.5:
            return "ghp_" + "".join(rng.choice(alnum) for _ in range(36))
        if kind < 0.75:
            return "sk-" + "".join(rng.choice(alnum) for _ in range(48))
        return "xoxb-" + "-".join("".join(rng.choice(string.digits) for _ in range(12)) for _ in range(2))

    def make(self, entity: str, valid: bool) -> str:
        """A value that is valid under its own scheme only, or (look-alike) under none."""
        while True:
            value = self._make(entity, valid)
            claims = checksum_claims(value)
            if (valid and claims <= {entity}) or (not valid and not claims):
                return value

    def _make(self, entity: str, valid: bool) -> str:
        method = {
            "payment_card": self.issued_card,
            "cn_resident_id": self.resident_id,
            "cn_credit_code": self.credit_code,
            "cn_mobile": self.mobile,
            "iban": self.iban,
            "us_ssn": self.ssn,
            "email": self.email,
            "phone": self.phone,
            "ipv4": self.ipv4,
            "secret": self.secret,
        }[entity]
        return method(valid)

    def sample(self) -> Sample:
        rng = self.rng
        entity = rng.choice(list(LABELS))
        valid = rng.random() < 0.7
        lang = "zh" if rng.random() < 0.5 else "en"
        template = rng.choice(ZH_TEMPLATES if lang == "zh" else EN_TEMPLATES)
        name = (self.zh if lang == "zh" else self.en).name()
        label = LABELS[entity][1 if lang == "zh" else 0]
        value = self.make(entity, valid)
        head, tail = template.split("{value}")
        head = head.format(label=label, name=name)
        text = head + value + tail.format(label=label, name=name)
        entities = [Entity(entity, len(head), len(head) + len(value))] if valid else []
        return Sample(text=text, entities=entities, lang=lang)


def checksum_claims(value: str) -> set[str]:
    """Which checksum schemes accept the value (18-digit strings can pass two)."""
    compact = value.replace(" ", "").replace("-", "").lower()
    claims = set()
    if compact.isdigit() and 13 <= len(compact) <= 19 and luhn_valid(compact):
        claims.add("payment_card")
    if resident_id_valid(compact):
        claims.add("cn_resident_id")
    if credit_code_valid(compact):
        claims.add("cn_credit_code")
    if len(compact) > 4 and compact[:2].isalpha() and compact.isalnum() and iban_valid(compact):
        claims.add("iban")
    return claims


def generate(num: int = 6000, seed: int = 0) -> list[Sample]:
    gen = Generator(seed)
    return [gen.sample() for _ in range(num)]


@click.command()
@click.option("--num", default=6000, show_default=True)
@click.option("--seed", default=0, show_default=True)
def main(num: int, seed: int) -> None:
    for sample in generate(num, seed):
        sys.stdout.write(msgspec.json.encode(sample).decode() + "\n")


if __name__ == "__main__":
    main()
