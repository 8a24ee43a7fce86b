"""Opening a log whose last writer did not stop cleanly: verify what it left after its last seal.

A writer that stops cleanly ends the log with a ``final`` checkpoint covering its last record.
Anything else (SIGKILL, power loss, a full disk) leaves records after the newest checkpoint, or a
newest checkpoint that is not final. SQLite's own recovery has already replayed the WAL by the
time the store opens; this walks the records after the newest *signed* checkpoint against it:

    ... [checkpoint k: seq s, head h, signed] [s+1 ... head]   <- each links to h, hashes match

A mismatch refuses the start (the log is damaged, nothing is appended to it); otherwise the new
writer records the recovery before anything else.
"""

from __future__ import annotations

from audit.bundle import iter_rows
from audit.errors import AuditIntegrityError
from audit.record import genesis_hash
from audit.signer import CheckpointVerifier
from audit.store import AuditStore, StoreHead
from audit.verifier import ChainVerifier, _Bad
from common.audit_event import AuditEvent, Decision, EventType

__all__ = ["recover"]


def stopped_cleanly(head: StoreHead) -> bool:
    cp = head.checkpoint
    return head.seq == 0 or (cp is not None and cp.final and cp.seq == head.seq)


def recover(store: AuditStore, verifier: CheckpointVerifier, head: StoreHead) -> AuditEvent | None:
    """None after a clean stop; else verify the unsealed tail and return the event recording it.

    Raises ``AuditIntegrityError`` when the tail does not link to the newest signed checkpoint.
    """
    if stopped_cleanly(head):
        return None
    cp = head.checkpoint
    if cp is None:
        archives = store.archives()
        start_seq, start_prev = (
            (archives[-1].last_seq, archives[-1].head) if archives else (0, genesis_hash(head.log_id))
        )
        since = "the start of the log"
    else:
        if cp.key_id != verifier.key_id or not verifier.is_valid("checkpoint", cp.payload(), cp.signature):
            raise AuditIntegrityError(f"audit log damaged: checkpoint {cp.index} is not validly signed")
        sealed = store.get(cp.seq)
        if sealed is not None and sealed.hash != cp.head:
            raise AuditIntegrityError(
                f"audit log damaged: record {cp.seq} does not match checkpoint {cp.index}"
            )
        start_seq, start_prev = cp.seq, cp.head
        since = f"checkpoint {cp.index}"
    chain = ChainVerifier(verifier, head.log_id, start_seq=start_seq, start_prev=start_prev)
    try:
        for row in iter_rows(store, start_seq):
            chain.feed_record(row)
    except _Bad as bad:
        raise AuditIntegrityError(f"audit log damaged after {since}: {bad.problem}") from None
    return AuditEvent(
        event_type=EventType.AUDIT_RECOVERY,
        decision=Decision.ERROR,
        reason="the previous writer stopped without a final checkpoint",
        detail=f"records {start_seq + 1}..{chain.seq} after {since} verified"
        if chain.seq > start_seq
        else f"no records after {since}",
    )
