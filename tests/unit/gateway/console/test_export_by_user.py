"""Issue 24: export by user from the console. The JSONL bundle holds only that user's records and
``strongroom audit verify --file`` accepts it offline with the console's public key; the CSV
holds the same rows; an empty selection or a bad time is a plain 400; every export is recorded."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from litestar.testing import AsyncTestClient

from audit.log import AuditLog
from common.audit_event import AuditEvent, Decision, EventType
from policies.authorizer import Authorizer
from strongroom.cli.audit import audit
from tests.unit.gateway.console.console_app import XSS, console_app, details, sign_in


async def _seed(log: AuditLog, authorizer: Authorizer) -> None:
    for subject in ("alice", "bob", "alice", XSS, "alice"):
        await log.append(
            AuditEvent(
                event_type=EventType.INFERENCE, decision=Decision.ALLOW, subject=subject, model="demo-chat"
            )
        )


def test_an_officer_exports_one_users_records_and_the_cli_verifies_them_offline(tmp_path: Path) -> None:
    async def go() -> tuple[bytes, bytes, bytes]:
        state: dict[str, Any] = {}
        async with AsyncTestClient(console_app(tmp_path, state, seed=_seed)) as client:
            await sign_in(client, tmp_path, "wang", "compliance")
            page = await client.get("/console/audit/export")
            assert 'name="subject"' in page.text
            url = "/console/audit/export/download"
            jsonl = await client.get(url, params={"format": "jsonl", "subject": "alice"})
            assert jsonl.status_code == 200, jsonl.text
            assert jsonl.headers["content-disposition"].startswith('attachment; filename="audit-user-')
            as_csv = await client.get(url, params={"format": "csv", "subject": "alice"})
            assert as_csv.status_code == 200 and as_csv.headers["content-type"].startswith("text/csv")
            nobody = await client.get(url, params={"format": "jsonl", "subject": "nobody"})
            assert nobody.status_code == 400 and "no records of that user" in nobody.text
            bad_time = await client.get(
                url, params={"format": "csv", "subject": "alice", "since": "yesterday"}
            )
            assert bad_time.status_code == 400 and "RFC 3339" in bad_time.text
            key = await client.get("/console/audit/public-key")
            exports = [
                d
                for _, d, _ in await details(state["log"], "wang")
                if d.startswith("console export ") and "user" in d
            ]
            assert exports[:2] == [
                "console export jsonl user 'alice' start..end",
                "console export csv user 'alice' start..end",
            ]
            return jsonl.content, as_csv.content, key.content

    bundle_bytes, csv_bytes, key_bytes = asyncio.run(go())
    lines = [json.loads(line) for line in bundle_bytes.splitlines()]
    records = [line for line in lines if line["type"] == "record"]
    assert len(records) == 3 and {r["subject"] for r in records} == {"alice"}
    rows = list(csv.DictReader(io.StringIO(csv_bytes.decode())))
    assert [int(r["seq"]) for r in rows] == [r["seq"] for r in records]
    assert {r["subject"] for r in rows} == {"alice"}

    bundle, key = tmp_path / "alice.jsonl", tmp_path / "audit-public-key.pem"
    bundle.write_bytes(bundle_bytes)
    key.write_bytes(key_bytes)
    verified = CliRunner().invoke(audit, ["verify", "--file", str(bundle), "--public-key", str(key)])
    assert verified.exit_code == 0 and verified.output.startswith("OK: 3 records"), verified.output
    for line in (0, 1):  # the header's selection, a record's subject
        edited = bundle_bytes.splitlines()
        edited[line] = edited[line].replace(b'"alice"', b'"alicf"')
        bundle.write_bytes(b"\n".join(edited) + b"\n")
        tampered = CliRunner().invoke(audit, ["verify", "--file", str(bundle), "--public-key", str(key)])
        assert tampered.exit_code == 1, line
