"""A stored audit record and its place in the hash chain.

    record_hash(n) = SHA-256("strongroom.audit.record.v1\\n" || JCS(body(n)))
    body(n)        = {"v": 1, "seq": n, "time": RFC 3339 UTC, "event": {...},
                      "content": {...} (only when kept), "prev": record_hash(n - 1)}
    record_hash(0) = SHA-256("strongroom.audit.genesis.v1\\n" || log_id)

Changing, dropping, inserting or reordering any record changes every later hash, so one
signed checkpoint over the head hash vouches for everything before it.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from typing import Any, Literal, NamedTuple

import msgspec

from audit.canonical import canonical_json
from common.audit_event import AuditEvent

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class AuditContent:
    """Prompt and completion text handed to the log next to an event. Repr shows lengths only."""

    __slots__ = ("completion", "prompt")

    def __init__(self, prompt: str = "", completion: str = "") -> None:
        self.prompt = prompt
        self.completion = completion

    def __repr__(self) -> str:
        return f"AuditContent(prompt=<{len(self.prompt)} chars>, completion=<{len(self.completion)} chars>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AuditContent) and (self.prompt, self.completion) == (
            other.prompt,
            other.completion,
        )

    def __hash__(self) -> int:
        return hash((self.prompt, self.completion))


class StoredContent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the policy kept of the content: digests or ciphertext, never plaintext."""

    mode: Literal["hmac", "encrypt"]
    key_id: str
    prompt_hmac: str = ""
    completion_hmac: str = ""
    nonce: str = ""
    """base64 AES-GCM nonce (encrypt mode)."""
    ciphertext: str = ""
    """base64 AES-GCM of JCS {"completion", "prompt"}; AAD binds it to log id and sequence."""


class AuditRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One event as stored: the event plus UTC time, sequence number and chain hashes."""

    seq: int
    time: str
    """RFC 3339 UTC with microseconds, e.g. ``2026-12-02T17:18:00.123456Z``."""
    event: AuditEvent
    content: StoredContent | None = None
    prev_hash: str
    hash: str

    def body(self) -> dict[str, Any]:
        return record_body(self.seq, self.time, self.event, self.content, self.prev_hash)


class RecordRow(NamedTuple):
    """The columns a store keeps. ``event`` is the JCS text of the event; the rest index it."""

    seq: int
    time_us: int
    event_type: str
    decision: str
    subject: str
    tenant: str
    model: str
    roles: str
    findings: str
    event: str
    content: str | None
    prev_hash: str
    hash: str


def genesis_hash(log_id: str) -> str:
    return hashlib.sha256(b"strongroom.audit.genesis.v1\n" + log_id.encode()).hexdigest()


def record_body(
    seq: int, time: str, event: AuditEvent, content: StoredContent | None, prev_hash: str
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "seq": seq,
        "time": time,
        "event": msgspec.to_builtins(event),
        "prev": prev_hash,
    }
    if content is not None:
        body["content"] = msgspec.to_builtins(content)
    return body


def hash_body(body: dict[str, Any]) -> str:
    return hashlib.sha256(b"strongroom.audit.record.v1\n" + canonical_json(body)).hexdigest()


def seal_record(
    seq: int, time: str, event: AuditEvent, content: StoredContent | None, prev_hash: str
) -> AuditRecord:
    digest = hash_body(record_body(seq, time, event, content, prev_hash))
    return AuditRecord(seq=seq, time=time, event=event, content=content, prev_hash=prev_hash, hash=digest)


class EncodedEvent(NamedTuple):
    """The part of a row that needs no sequence number, encoded once by the caller of ``append``.

    Canonical JSON and the index columns are built on the caller's side, so the single writer
    only adds seq, prev and the hash (``seal_row``) while holding the chain.
    """

    event: AuditEvent
    time_us: int
    time: str
    event_type: str
    decision: str
    subject: str
    tenant: str
    model: str
    roles: str
    findings: str
    event_json: str
    """JCS text of the event, the ``event`` column and the ``event`` member of the hashed body."""


def encode_event(event: AuditEvent, time_us: int) -> EncodedEvent:
    return EncodedEvent(
        event=event,
        time_us=time_us,
        time=us_to_iso(time_us),
        event_type=str(event.event_type),
        decision=str(event.decision),
        subject=event.subject,
        tenant=event.tenant,
        model=event.model,
        roles=_tags(list(event.roles)),
        findings=_tags(sorted({f.type for f in event.findings})),
        event_json=canonical_json(msgspec.to_builtins(event)).decode(),
    )


def seal_row(encoded: EncodedEvent, seq: int, prev_hash: str, content: StoredContent | None) -> RecordRow:
    """The row of ``seal_record`` for an encoded event, without re-encoding it.

    JCS of the body is spliced from canonical parts: members in code-unit order (content, event,
    prev, seq, time, v), nested values already canonical, and prev (hex) and time (RFC 3339
    digits) plain ASCII that JSON writes unescaped. tests/unit/audit/test_seal_row.py holds it
    equal to ``hash_body(record_body(...))``.
    """
    content_json = None if content is None else canonical_json(msgspec.to_builtins(content)).decode()
    head = "{" if content_json is None else '{"content":' + content_json + ","
    body = (
        f'{head}"event":{encoded.event_json},"prev":"{prev_hash}","seq":{seq},"time":"{encoded.time}","v":1}}'
    )
    digest = hashlib.sha256(b"strongroom.audit.record.v1\n" + body.encode()).hexdigest()
    return RecordRow(
        seq,
        encoded.time_us,
        encoded.event_type,
        encoded.decision,
        encoded.subject,
        encoded.tenant,
        encoded.model,
        encoded.roles,
        encoded.findings,
        encoded.event_json,
        content_json,
        prev_hash,
        digest,
    )


def us_to_iso(time_us: int) -> str:
    seconds, micros = divmod(time_us, 1_000_000)
    return f"{_second_prefix(seconds)}.{micros:06d}Z"


@functools.lru_cache(maxsize=8)
def _second_prefix(seconds: int) -> str:
    """``%Y-%m-%dT%H:%M:%S`` of a second: records written in the same second share it, so
    ``strftime`` (slow, and a ``tzset`` per call) runs once a second, not once a record."""
    return (_EPOCH + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


def iso_to_us(text: str) -> int:
    """Parse RFC 3339 (``Z`` or an offset) to microseconds since the epoch."""
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _tags(values: list[str]) -> str:
    """``|a|b|``: lets both backends filter a multi-valued column with one LIKE.

    Each value is escaped (``tag_value``) so a role holding ``|`` cannot pose as two roles.
    """
    return "|" + "|".join(tag_value(v) for v in values) + "|" if values else ""


def tag_value(value: str) -> str:
    """One value as the tag columns store it: ``%`` and ``|`` percent-escaped."""
    return value.replace("%", "%25").replace("|", "%7C")


def row_from_record(record: AuditRecord) -> RecordRow:
    encoded = encode_event(record.event, iso_to_us(record.time))
    content = None if record.content is None else canonical_json(msgspec.to_builtins(record.content)).decode()
    return RecordRow(
        seq=record.seq,
        time_us=encoded.time_us,
        event_type=encoded.event_type,
        decision=encoded.decision,
        subject=encoded.subject,
        tenant=encoded.tenant,
        model=encoded.model,
        roles=encoded.roles,
        findings=encoded.findings,
        event=encoded.event_json,
        content=content,
        prev_hash=record.prev_hash,
        hash=record.hash,
    )


def record_from_row(row: RecordRow) -> AuditRecord:
    content = None if row.content is None else msgspec.json.decode(row.content, type=StoredContent)
    return AuditRecord(
        seq=row.seq,
        time=us_to_iso(row.time_us),
        event=msgspec.json.decode(row.event, type=AuditEvent),
        content=content,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )
