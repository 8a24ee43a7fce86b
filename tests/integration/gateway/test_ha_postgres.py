"""Several gateways, one log, one policy: two ``strongroom serve`` processes with their own data
directories on one PostgreSQL (audit chain and policy), one Redis and one HSM signing key.

A change made through one gateway is in force on the other when its call returns, and audited
once; one
gateway is SIGKILLed in the middle of a burst; afterwards ``strongroom audit verify`` passes
over the records both wrote, every 2xx response has its record, and sequence numbers have no
gap or duplicate. Needs Redis, PostgreSQL and SoftHSM2 (scripts/system-deps.sh); fails, not
skips, without them.
"""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis

from audit.postgres_store import grant_append_only, install_schema

pytestmark = pytest.mark.integration

ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
MODULE = "/usr/lib/softhsm/libsofthsm2.so"
BODY = {"model": "demo-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


_CREATE_AUDIT_KEY = """
import sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from keys import Pkcs11Provider, Secret
provider = Pkcs11Provider.connect(sys.argv[1], sys.argv[2], Secret(sys.argv[3]), "strongroom-audit")
ref = provider.initialize()
raw = provider.signing_public_key(ref.key_id, ref.version)
key = Ed25519PublicKey.from_public_bytes(raw)
sys.stdout.write(key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode())
"""


@pytest.fixture
def pinned_key(softhsm_token: Any, tmp_path: Path) -> Path:
    """Creates the audit signing key on the token, as an operator would, and pins its public key
    in a file outside every data directory."""
    made = softhsm_token.run_python(_CREATE_AUDIT_KEY, MODULE, softhsm_token.label, softhsm_token.pin)
    assert made.returncode == 0, made.stderr
    path = tmp_path / "audit-public-key.pem"
    path.write_text(made.stdout)
    return path


@pytest.fixture
def databases() -> Iterator[dict[str, str]]:
    """An audit schema the gateways reach only as an append-only role, and a policy schema."""
    suffix = uuid.uuid4().hex[:10]
    audit_schema, policy_schema, role = f"audit_ha_{suffix}", f"policy_ha_{suffix}", f"audit_ha_{suffix}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        install_schema(admin, audit_schema)
        grant_append_only(admin, audit_schema, role)
    yield {
        "STRONGROOM_AUDIT__BACKEND": "postgres",
        "STRONGROOM_AUDIT__POSTGRES_DSN": f"host=127.0.0.1 port=5432 user={role} dbname=test",
        "STRONGROOM_AUDIT__POSTGRES_SCHEMA": audit_schema,
        "STRONGROOM_ACCESS__BACKEND": "postgres",
        "STRONGROOM_ACCESS__POSTGRES_DSN": ADMIN_DSN,
        "STRONGROOM_ACCESS__POSTGRES_SCHEMA": policy_schema,
    }
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA "{audit_schema}" CASCADE')
        admin.execute(f'DROP SCHEMA IF EXISTS "{policy_schema}" CASCADE')
        admin.execute(f'DROP OWNED BY "{role}"')
        admin.execute(f'DROP ROLE "{role}"')


def _stored(env: dict[str, str]) -> tuple[list[int], set[str], list[str]]:
    """Sequence numbers, request ids and admin-change actors as PostgreSQL holds them."""
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{env["STRONGROOM_AUDIT__POSTGRES_SCHEMA"]}"')
        rows = conn.execute("SELECT seq, event_type, event FROM audit_records ORDER BY seq").fetchall()
    events = [(seq, kind, json.loads(body)) for seq, kind, body in rows]
    return (
        [seq for seq, _, _ in events],
        {e.get("request_id", "") for _, _, e in events},
        [e.get("subject", "") for _, kind, e in events if kind == "admin_change"],
    )


def test_two_gateways_one_log_one_policy(
    tmp_path: Path, serve: Any, softhsm_token: Any, pinned_key: Path, databases: dict
) -> None:
    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        raise AssertionError(f"this test needs Redis on 127.0.0.1:6379 ({exc})") from exc
    prefix = f"test-{uuid.uuid4().hex}"
    env = {
        **databases,
        "STRONGROOM_REDIS_URL": "redis://127.0.0.1:6379/0",
        "STRONGROOM_QUOTA__KEY_PREFIX": f"{prefix}:quota",
        "STRONGROOM_AUTH__REVOCATION_KEY_PREFIX": f"{prefix}:revoked:",
        "STRONGROOM_ACCESS__CHANNEL": f"{prefix}:policy",
        "STRONGROOM_AUDIT__SIGNING_KEY_PROVIDER": "pkcs11",
        "STRONGROOM_AUDIT__SIGNING_PKCS11_TOKEN_LABEL": softhsm_token.label,
        "STRONGROOM_AUDIT__SIGNING_PKCS11_PIN_ENV": "TEST_AUDIT_PIN",
        "STRONGROOM_AUDIT__CREATE_SIGNING_KEY": "false",
        "TEST_AUDIT_PIN": softhsm_token.pin,
        "SOFTHSM2_CONF": softhsm_token.conf,
        "STRONGROOM_AUDIT__PUBLIC_KEY_FILE": str(pinned_key),
    }
    (tmp_path / "one").mkdir()
    (tmp_path / "two" / "data" / "keys").mkdir(parents=True)
    with ExitStack() as stack:
        one = stack.enter_context(serve(tmp_path / "one", extra_env=env))
        for name in ("dev-signing-key.pem", "dev-signing-key.pub.pem"):  # one token issuer for both
            shutil.copy(one.data_dir / "keys" / name, tmp_path / "two" / "data" / "keys" / name)
        two = stack.enter_context(serve(tmp_path / "two", extra_env=env))
        assert one.data_dir != two.data_dir

        # One policy: a change through gateway one is in force on gateway two when its call
        # returns (gateway two's lease on the old version has run out by then): no sleep, no retry.
        admin = {"authorization": f"Bearer {one.token('root', 'admin')}"}
        dave = {"authorization": f"Bearer {one.token('dave', 'trader')}"}
        grant = {"role": "trader", "pattern": "demo-chat", "action": "chat"}

        def status_on_two() -> int:
            return httpx.post(f"{two.v1}/chat/completions", json=BODY, headers=dave, timeout=60).status_code

        assert status_on_two() == 404  # not allowed: answered like an unknown model
        for path, expected in (("grants", 200), ("grants/remove", 404), ("grants", 200)):
            change = httpx.post(f"{one.base_url}/admin/{path}", json=grant, headers=admin, timeout=30)
            assert change.status_code in (200, 201), change.text
            assert status_on_two() == expected, f"gateway two after {path}"

        # One log: a burst through both; gateway two is SIGKILLed in the middle of it.
        def call(i: int) -> tuple[int, str]:
            base = (one if i % 2 else two).v1
            try:
                r = httpx.post(f"{base}/chat/completions", json=BODY, headers=dave, timeout=60)
            except httpx.HTTPError:
                return 0, ""  # gateway two's connections die with it
            return r.status_code, r.headers.get("x-request-id", "")

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            burst = [pool.submit(call, i) for i in range(120)]
            while sum(f.done() for f in burst) < 30:
                time.sleep(0.01)
            two.proc.send_signal(signal.SIGKILL)
            results = [f.result() for f in burst]
        served = {rid for status, rid in results if status == 200}
        assert len(served) >= 30 and any(status == 0 for status, _ in results)
        verify_live = httpx.get(f"{one.base_url}/audit/verify", headers=admin, timeout=60)
        assert verify_live.status_code == 200 and verify_live.json()["ok"] is True, verify_live.text

    # Both gateways are down now (one stopped cleanly): the CLI verifies the shared log.
    check = one.cli("audit", "verify", check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    seqs, request_ids, actors = _stored(env)
    assert seqs == list(range(1, len(seqs) + 1)), "sequence numbers have a gap or a duplicate"
    assert served <= request_ids, f"2xx responses without a record: {sorted(served - request_ids)[:5]}"
    assert actors.count("root") == 3, "each change must be audited once, by the gateway that made it"
