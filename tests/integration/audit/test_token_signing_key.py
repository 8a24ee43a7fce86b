"""Checkpoints signed inside a PKCS#11 token (SoftHSM2): every log that logs in signs with the
one key, a missing key is not silently created in production, and a key rotated under a running
writer is refused rather than forking the chain.

The checks run in a fresh interpreter (``SoftHsmToken.run_python``): PKCS#11 initializes once per
process, so a token used here would be the only one the rest of this test process could see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

_SCRIPT = """
import asyncio, os, sys
from pathlib import Path
from audit.config import AuditConfig
from audit.errors import AuditConfigError, AuditUnavailableError
from common.audit_event import AuditEvent, Decision, EventType
from audit.log import AuditLog
from audit.signer import CheckpointSigner
from keys import Pkcs11Provider, Secret

label, tmp = sys.argv[1], Path(sys.argv[2])
def config(**overrides):
    return AuditConfig(signing_key_provider="pkcs11", signing_pkcs11_token_label=label,
                       signing_pkcs11_pin_env="TEST_AUDIT_PIN", **overrides)

try:
    CheckpointSigner.open(config(create_signing_key=False), tmp)
    raise SystemExit("production mode created a signing key")
except AuditConfigError as exc:
    assert "no audit signing key" in str(exc), exc
created = CheckpointSigner.open(config(), tmp / "one")
again = CheckpointSigner.open(config(create_signing_key=False), tmp / "two")
assert created.key_id == again.key_id, "two logs on one token must sign with one key"
assert "PRIVATE" not in repr(again)

async def run():
    log = await AuditLog.open(config(), tmp / "one")
    try:
        await log.append(AuditEvent(event_type=EventType.INFERENCE, decision=Decision.ALLOW))
        await log.checkpoint()
        assert (await log.verify()).ok
        provider = Pkcs11Provider.connect("/usr/lib/softhsm/libsofthsm2.so", label,
                                          Secret(os.environ["TEST_AUDIT_PIN"]), "strongroom-audit")
        provider.rotate()
        provider.close()
        try:
            await log.append(AuditEvent(event_type=EventType.INFERENCE, decision=Decision.ALLOW))
            await log.checkpoint()
            raise SystemExit("a checkpoint was signed after the key changed on the token")
        except AuditUnavailableError:
            pass
    finally:
        await log.close()

asyncio.run(run())
print("ok")
"""


def test_the_token_key_signs_for_every_log_and_a_rotation_is_refused(
    softhsm_token: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_AUDIT_PIN", softhsm_token.pin)
    done = softhsm_token.run_python(_SCRIPT, softhsm_token.label, str(tmp_path))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
