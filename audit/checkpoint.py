"""Signed checkpoints and export seals.

A checkpoint signs the chain head at ``seq`` and links the previous checkpoint's hash, so the
checkpoints form a second, signed chain over the record chain:

    checkpoint k: {log_id, index: k, seq, head: record_hash(seq), time, prev: cp_hash(k-1), key_id}
    cp_hash(k)  = SHA-256("strongroom.audit.checkpoint.v1\\n" || JCS(payload(k)))
    cp_hash(0)  = SHA-256("strongroom.audit.checkpoint.genesis.v1\\n" || log_id)

An export seal signs one exported range exactly (first seq, the prev hash it starts from, last
seq, head hash): without it a bundle cut short at a checkpoint would still verify.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from audit.canonical import canonical_json


def unsigned_payload(signed: msgspec.Struct) -> dict[str, Any]:
    """What a signed struct's ``signature`` field signs: every other field, as builtins."""
    body = msgspec.to_builtins(signed)
    del body["signature"]
    return dict(body)


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    log_id: str
    index: int
    seq: int
    """The last record covered (0 before the first record)."""
    head: str
    time: str
    prev: str
    key_id: str
    final: bool = False
    """Written by a clean shutdown: a later gap in checkpoints is then no sign of truncation."""
    signature: str = ""
    """base64 Ed25519 signature over JCS(payload)."""

    def payload(self) -> dict[str, Any]:
        return unsigned_payload(self)

    def digest(self) -> str:
        return hashlib.sha256(
            b"strongroom.audit.checkpoint.v1\n" + canonical_json(self.payload())
        ).hexdigest()


class ExportSeal(msgspec.Struct, frozen=True, kw_only=True):
    log_id: str
    first_seq: int
    first_prev: str
    last_seq: int
    head: str
    num_records: int
    num_checkpoints: int
    exported_at: str
    key_id: str
    signature: str = ""

    def payload(self) -> dict[str, Any]:
        return unsigned_payload(self)


def checkpoint_genesis(log_id: str) -> str:
    return hashlib.sha256(b"strongroom.audit.checkpoint.genesis.v1\n" + log_id.encode()).hexdigest()


def signing_bytes(kind: str, payload: dict[str, Any]) -> bytes:
    """Domain-separated message: a checkpoint signature can never pass as a seal or vice versa."""
    return f"strongroom.audit.{kind}.v1\n".encode() + canonical_json(payload)
