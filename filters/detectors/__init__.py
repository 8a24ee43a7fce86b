"""The built-in detectors. Keyword-list detectors are built from the policy's files."""

from __future__ import annotations

from filters.detector import Detector
from filters.detectors.cn_credit_code import CnCreditCodeDetector
from filters.detectors.cn_mobile import CnMobileDetector
from filters.detectors.cn_resident_id import CnResidentIdDetector
from filters.detectors.email import EmailDetector
from filters.detectors.iban import IbanDetector
from filters.detectors.ipv4 import Ipv4Detector
from filters.detectors.keyword import KeywordDetector
from filters.detectors.payment_card import PaymentCardDetector
from filters.detectors.phone import PhoneDetector
from filters.detectors.secret import SecretDetector
from filters.detectors.us_ssn import UsSsnDetector

__all__ = [
    "CnCreditCodeDetector",
    "CnMobileDetector",
    "CnResidentIdDetector",
    "EmailDetector",
    "IbanDetector",
    "Ipv4Detector",
    "KeywordDetector",
    "PaymentCardDetector",
    "PhoneDetector",
    "SecretDetector",
    "UsSsnDetector",
    "builtin_detectors",
]


def builtin_detectors() -> list[Detector]:
    return [
        PaymentCardDetector(),
        CnResidentIdDetector(),
        CnCreditCodeDetector(),
        CnMobileDetector(),
        IbanDetector(),
        UsSsnDetector(),
        EmailDetector(),
        PhoneDetector(),
        Ipv4Detector(),
        SecretDetector(),
    ]
