"""The writer's spliced JCS (``seal_row``) hashes exactly what ``seal_record`` and the verifier hash."""

from __future__ import annotations

import pytest

from audit.record import (
    StoredContent,
    encode_event,
    hash_body,
    record_body,
    row_from_record,
    seal_record,
    seal_row,
    us_to_iso,
)
from common.audit_event import AuditEvent, Decision, EventType
from common.finding import Finding
from tests.audit_doubles import sample_event

PREV = "9f" * 32
TIME_US = 1_796_000_000_123_456

EVENTS = [
    sample_event(0),
    sample_event(7),
    AuditEvent(event_type=EventType.SERVICE_START, decision=Decision.ALLOW),
    AuditEvent(
        event_type=EventType.ADMIN_CHANGE,
        decision=Decision.DENY,
        subject='Zoë \u2028 \U0001f600 "quoted" \\ back\x1f',
        roles=("z", "a", "\u00e9"),
        before='{"b":1,"a":2}',
        findings=(
            Finding(type="pii.card", count=2, action="mask"),
            Finding(type="pii.card", count=1, action="block", direction="response"),
            Finding(type="secret", count=1, action="block"),
        ),
    ),
    # floats off the fast path: integral, huge, tiny
    sample_event(1, latency_ms=42.0),
    sample_event(2, latency_ms=1e21),
    sample_event(3, latency_ms=5e-7),
    sample_event(4, latency_ms=0.1 + 0.2),
]

CONTENTS = [
    None,
    StoredContent(mode="hmac", key_id="k1", prompt_hmac="ab" * 32, completion_hmac="cd" * 32),
    StoredContent(mode="encrypt", key_id="k2", nonce="bm9uY2U=", ciphertext="Y2lwaGVy+/=="),
]


@pytest.mark.parametrize("content", CONTENTS, ids=["none", "hmac", "encrypt"])
@pytest.mark.parametrize("event", EVENTS)
def test_seal_row_matches_seal_record(event: AuditEvent, content: StoredContent | None) -> None:
    expected = row_from_record(seal_record(42, us_to_iso(TIME_US), event, content, PREV))
    row = seal_row(encode_event(event, TIME_US), 42, PREV, content)
    assert row == expected
    assert row.hash == hash_body(record_body(42, us_to_iso(TIME_US), event, content, PREV))
