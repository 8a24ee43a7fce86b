"""``verify`` of a live log, whole: archived segments, online records, witnesses, trusted key.

    archives (files, seals, joins) -> witnessed checkpoints (chained, signed) -> online chain
                                                                                held to both

The trusted key comes from ``trusted_key`` (pinned, or the log's own when nothing is pinned,
which the report states). Each step names the first problem it finds; the first failing step
decides the report.
"""

from __future__ import annotations

import msgspec

from audit.archive import verify_archives
from audit.bundle import verify_store
from audit.store import AuditStore
from audit.trusted_key import TrustedKey
from audit.verifier import VerifyReport, Witnessed
from audit.witness import Witness, WitnessError


def verify_log(store: AuditStore, trusted: TrustedKey, witness: Witness | None) -> VerifyReport:
    verifier = trusted.verifier
    archives = verify_archives(store, verifier)
    if not archives.ok:
        first_bad = archives.segments[-1].first_bad_seq if archives.segments else None
        return _failed(trusted, first_bad or 1, f"archived segment: {archives.problem}")
    head = store.head()
    witnessed = Witnessed({}, None)
    if witness is not None and witness.is_readable:
        try:
            witnessed = witness.witnessed(verifier, head.log_id)
        except WitnessError as exc:
            return _failed(trusted, 1, f"witness: {exc}")
        if witnessed.newest is None and head.checkpoint is not None:
            return _failed(
                trusted,
                1,
                "the witness holds none of this log's checkpoints: it was removed or emptied "
                "(start the gateway once to adopt an existing log)",
            )
    report = verify_store(store, verifier, witnessed=witnessed)
    return msgspec.structs.replace(report, key_pinned=trusted.is_pinned)


def _failed(trusted: TrustedKey, seq: int, problem: str) -> VerifyReport:
    return VerifyReport.failure(seq, problem, key_pinned=trusted.is_pinned)
