"""The policy store's seal: a signature over the whole policy state, kept beside it.

Only the API and CLI path (``PolicyStore.apply``) writes rules, and it signs the state it
writes, at its version, with the audit signing key (a file secret or a key in an HSM). A rule
edited, added or dropped directly in the database (SQLite file or PostgreSQL table), a version
bumped by hand or a seal copied from another state no longer matches:

    seal = Ed25519(audit key, "strongroom.audit.policy.v1\\n" || JCS({version, rules: sorted lines}))

Readers check the seal on every load. A running replica that meets a bad seal keeps serving the
last policy it verified (an operator put it there; failing closed would let anyone with write
access to the store take every replica down) and the edit is refused and recorded in the audit
log; a replica that starts on a bad seal has no verified policy and refuses to start.

A running replica also refuses a store put back to an older (validly sealed) version. What the
seal cannot show is a restore of an older backup while every replica is down: the audit log's
``admin_change`` records, which name each version, are the evidence then.
"""

from __future__ import annotations

from typing import Any

from audit.signer import CheckpointSigner
from common.audit_event import AuditEvent, Decision, EventType
from policies.errors import PolicyTamperedError
from policies.policy import Policy

__all__ = ["PolicySeal", "tamper_event"]

_KIND = "policy"


class PolicySeal:
    def __init__(self, signer: CheckpointSigner) -> None:
        self._signer = signer

    def __repr__(self) -> str:
        return "PolicySeal()"

    @staticmethod
    def _payload(policy: Policy) -> dict[str, Any]:
        return {"version": policy.version, "rules": sorted(", ".join(line) for line in policy.lines())}

    def seal(self, policy: Policy) -> str:
        return self._signer.sign(_KIND, self._payload(policy))

    def check(self, policy: Policy, seal: str) -> None:
        """Raise PolicyTamperedError unless ``seal`` signs exactly ``policy``."""
        if not seal or not self._signer.verifier.is_valid(_KIND, self._payload(policy), seal):
            raise PolicyTamperedError(
                f"policy store at version {policy.version} was changed outside the API/CLI (seal mismatch)"
            )


def tamper_event(error: PolicyTamperedError, *, action: str) -> AuditEvent:
    """The audit record of a detected direct edit; ``action`` says what was refused or kept."""
    return AuditEvent(
        event_type=EventType.ADMIN_CHANGE,
        decision=Decision.DENY,
        endpoint="policy",
        reason="policy store tampered",
        detail=f"{error.message}; {action}",
    )
