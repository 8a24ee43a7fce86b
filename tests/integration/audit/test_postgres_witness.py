"""The PostgreSQL witness: a table only its own role writes; a cut store shows against it.

Uses the shared server at 127.0.0.1:5432 with unique schemas and roles per test: the audit store
(schema owner = the admin, gateway role INSERT/SELECT) and the witness (its own schema and role).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest

from audit.config import AuditConfig
from audit.log import AuditLog
from audit.postgres_store import PostgresStore, grant_append_only, install_schema
from audit.witness import WitnessError
from audit.witness_postgres import grant_witness_role, install_witness_schema
from tests.audit_doubles import sample_event

pytestmark = pytest.mark.integration
ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"


def _dsn(role: str) -> str:
    return f"host=127.0.0.1 port=5432 user={role} dbname=test"


@pytest.fixture
def pg() -> Iterator[SimpleNamespace]:
    admin = psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=3)
    suffix = uuid.uuid4().hex[:10]
    ns = SimpleNamespace(
        schema=f"audit_w_{suffix}",
        role=f"audit_app_{suffix}",
        witness_schema=f"audit_witness_{suffix}",
        witness_role=f"audit_wit_{suffix}",
    )
    for role in (ns.role, ns.witness_role):
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    install_schema(admin, ns.schema)
    grant_append_only(admin, ns.schema, ns.role)
    install_witness_schema(admin, ns.witness_schema)
    grant_witness_role(admin, ns.witness_schema, ns.witness_role)
    try:
        yield ns
    finally:
        for schema in (ns.schema, ns.witness_schema):
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        for role in (ns.role, ns.witness_role):
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')
        admin.close()


def _config(pg: SimpleNamespace) -> AuditConfig:
    return AuditConfig(
        checkpoint_every=4,
        witness_file="",
        witness_postgres_dsn=_dsn(pg.witness_role),
        witness_postgres_schema=pg.witness_schema,
    )


async def _open(pg: SimpleNamespace, data: Path, **kwargs) -> AuditLog:
    return await AuditLog.open(_config(pg), data, store=PostgresStore(_dsn(pg.role), pg.schema), **kwargs)


def test_a_tail_cut_by_the_store_owner_shows_against_the_postgres_witness(pg, tmp_path: Path) -> None:
    async def write() -> None:
        log = await _open(pg, tmp_path)
        for i in range(12):
            await log.append(sample_event(i))
        report = await log.verify()
        await log.close()
        assert report.ok and report.witnessed_seq == report.sealed_seq > 0, report.problem

    asyncio.run(write())
    with psycopg.connect(ADMIN_DSN, autocommit=True) as owner:  # the store's owner may delete
        owner.execute(f'DELETE FROM "{pg.schema}".audit_records WHERE seq > 6')
        owner.execute(f'DELETE FROM "{pg.schema}".audit_checkpoints WHERE seq > 6')

    async def verify() -> str:
        log = await _open(pg, tmp_path, record_lifecycle=False, check_witness=False)
        report = await log.verify()
        await log.close()
        assert not report.ok
        return report.problem

    assert "witnessed but is missing" in asyncio.run(verify())
    with pytest.raises(WitnessError, match="truncated or rolled back"):
        asyncio.run(_open(pg, tmp_path))


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {w}.audit_witness SET body = 'x'",
        "DELETE FROM {w}.audit_witness",
        "TRUNCATE {w}.audit_witness",
    ],
)
def test_the_witness_role_can_only_append(pg, tmp_path: Path, statement: str) -> None:
    async def write() -> None:
        log = await _open(pg, tmp_path)
        await log.close()

    asyncio.run(write())
    with psycopg.connect(_dsn(pg.witness_role), autocommit=True) as conn:
        assert conn.execute(f'SELECT count(*) FROM "{pg.witness_schema}".audit_witness').fetchone()[0] >= 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement.format(w=f'"{pg.witness_schema}"'))


def test_the_audit_role_cannot_touch_the_witness(pg) -> None:
    with (
        psycopg.connect(_dsn(pg.role), autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(
            f"INSERT INTO \"{pg.witness_schema}\".audit_witness (log_id, idx, body) VALUES ('l', 1, 'x')"
        )
