"""The key ``verify`` trusts: pinned in configuration or on the command line, never the log's own.

Whoever can rewrite the audit store can usually also replace the key files beside it and
re-sign everything; a log checked against a key from that same data directory proves only that
it is self-consistent. So the trusted key is pinned outside it, in either of two forms:

- ``public_key_file`` (or ``--public-key``): the PEM itself, at a path outside ``data_dir``;
- ``public_key_fingerprint``: ``sha256:...`` of the key, which then may come from anywhere (the
  configured signing key file or an HSM) as long as it matches.

Without a pin the log's own key is used and the result says so (``key_pinned`` false).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from audit.config import AuditConfig
from audit.errors import AuditConfigError
from audit.signer import CheckpointVerifier


class TrustedKey(NamedTuple):
    verifier: CheckpointVerifier
    is_pinned: bool
    source: str
    """Where the key came from, for the verify report."""

    def require_signer(self, signer_key_id: str) -> None:
        """Refuse a signing key that is not the pinned one (the key files were swapped)."""
        if self.verifier.key_id != signer_key_id:
            raise AuditConfigError(
                f"audit signing key {signer_key_id} is not the pinned key {self.verifier.key_id} "
                f"({self.source}): were the key files replaced?"
            )


def trusted_key(
    cfg: AuditConfig, data_dir: Path, own: CheckpointVerifier, *, public_key_path: Path | None = None
) -> TrustedKey:
    """The pinned key (``public_key_path`` over ``cfg.public_key_file``), checked against the fingerprint.

    ``own`` is the signing key's public half: used when only a fingerprint is pinned, and
    returned unpinned when nothing is. Raises ``AuditConfigError`` on a key that is unreadable,
    inside ``data_dir`` or not the pinned fingerprint.
    """
    pinned: CheckpointVerifier | None = None
    source = ""
    path = public_key_path or (Path(cfg.public_key_file) if cfg.public_key_file else None)
    if path is not None:
        if path.resolve().is_relative_to(data_dir.resolve()):
            raise AuditConfigError(
                f"trusted audit public key {path} lies in the data directory it would vouch for"
            )
        try:
            pem = path.read_bytes()
        except OSError as exc:
            raise AuditConfigError(f"trusted audit public key {path} is unreadable: {exc.strerror}") from exc
        pinned, source = CheckpointVerifier.from_pem(pem), str(path)
    if cfg.public_key_fingerprint is not None:
        candidate = pinned or own
        if candidate.fingerprint != cfg.public_key_fingerprint:
            what = source or "the audit signing key"
            raise AuditConfigError(f"{what} is not the key pinned by audit.public_key_fingerprint")
        pinned, source = candidate, source or "audit.public_key_fingerprint"
    if pinned is None:
        return TrustedKey(own, is_pinned=False, source="the log's own signing key (not pinned)")
    return TrustedKey(pinned, is_pinned=True, source=source)
