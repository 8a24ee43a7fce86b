"""A request's texts are scanned as one conversation: values split across messages are found."""

from __future__ import annotations

from filters.action import Action
from filters.conversation import Conversation
from filters.detectors import PaymentCardDetector, SecretDetector
from filters.scanner import Scanner, ScanOutcome

DETECTORS = [PaymentCardDetector(), SecretDetector()]
SCANNER = Scanner(DETECTORS)
ACTIONS = {d.name: Action.MASK for d in DETECTORS}


def scan(conversation: Conversation) -> ScanOutcome:
    return conversation.scan(lambda text: SCANNER.scan(text, ACTIONS), reach=200)


def test_offsets_of_each_text_in_the_joined_text() -> None:
    conversation = Conversation(["ab", "", "cde"])
    assert conversation.offsets == [0, 3, 4]
    assert conversation.norm.original == "ab\n\ncde"


def test_card_across_a_boundary_is_found_once_and_hidden_in_both_pieces() -> None:
    conversation = Conversation(["card 4539 1488", "0343 6467 ok"])
    outcome = scan(conversation)
    assert [m.detector for m in outcome.matches] == ["payment_card"]
    assert conversation.rewrite(outcome.matches) == ["card **** ****", "**** **** ok"]


def test_key_glued_across_a_boundary_is_found() -> None:
    conversation = Conversation(["key AKIAIOSF", "ODNN7EXAMPLE ok"])
    outcome = scan(conversation)
    assert [(m.detector, m.start, m.end) for m in outcome.matches] == [("secret", 4, 25)]
    assert conversation.rewrite(outcome.matches) == ["key ********", "************ ok"]


def test_values_inside_one_text_are_masked_as_before() -> None:
    conversation = Conversation(["hello", "card 4539 1488 0343 6467 ok"])
    assert conversation.rewrite(scan(conversation).matches) == ["hello", "card 4539 **** **** 6467 ok"]
