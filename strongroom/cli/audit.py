"""``strongroom audit``: tail, search, verify, export, public-key, archive.

Commands run beside a live gateway: they read through a read-only view of the store and append
through the gateway that owns the log (``OperatorLog``), so they never checkpoint, truncate or
delete anything it writes, and a command that only reads leaves the log as it found it.
Searches and exports made here are themselves audited, under the operating-system user.
"""

from __future__ import annotations

import asyncio
import getpass
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import click
import msgspec

from audit.bundle import verify_bundle
from audit.config import AuditConfig
from audit.errors import AuditConfigError, AuditIntegrityError, AuditUnavailableError
from audit.operator_log import OperatorLog
from audit.query import AuditQuery
from audit.record import AuditRecord, iso_to_us
from audit.signer import CheckpointVerifier
from audit.verifier import VerifyReport
from common.audit_event import AuditEvent, Decision, EventType
from strongroom.config import load_settings
from strongroom.progress_bar import ProgressBar

T = TypeVar("T")

config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None, envvar="STRONGROOM_CONFIG"
)


def _settings(config_path: str | None) -> tuple[AuditConfig, Path]:
    settings = load_settings(config_path)
    return settings.audit, settings.data_path


def _with_log(
    config_path: str | None, action: Callable[[OperatorLog], Awaitable[T]], *, may_create: bool = False
) -> T:
    cfg, data_dir = _settings(config_path)
    store = cfg.resolve(data_dir, cfg.sqlite_path)
    if cfg.backend == "sqlite" and not may_create and not store.exists():
        # Reading a log must never start a new one (and a new signing key) in the wrong directory.
        raise click.ClickException(
            f"no audit log at {store}: pass the gateway's --config (data_dir is {data_dir})"
        )

    async def run() -> T:
        log = OperatorLog(cfg, data_dir, may_create_key=may_create)
        try:
            return await action(log)
        finally:
            await log.close()

    try:
        return asyncio.run(run())
    except AuditUnavailableError as exc:  # no log yet, or the gateway refused the access record
        raise click.ClickException(str(exc)) from None


async def _audit_access(log: OperatorLog, what: str) -> None:
    await log.append(
        AuditEvent(
            event_type=EventType.AUDIT_ACCESS,
            decision=Decision.ALLOW,
            subject=getpass.getuser(),
            client_app="strongroom-cli",
            endpoint=f"cli:audit {what.split(' ', 1)[0]}",
            detail=what,
        )
    )


def format_record(record: AuditRecord) -> str:
    e = record.event
    who = e.subject or "-"
    roles = ",".join(e.roles) or "-"
    parts = [
        f"#{record.seq}",
        record.time,
        str(e.event_type),
        str(e.decision),
        f"subject={who}",
        f"roles={roles}",
    ]
    if e.model:
        parts.append(f"model={e.model}")
    if e.status:
        parts.append(f"status={e.status}")
    if e.reason:
        parts.append(f"reason={e.reason!r}")
    if e.findings:
        parts.append("findings=" + ",".join(f"{f.type}x{f.count}:{f.action}" for f in e.findings))
    return " ".join(parts)


def _print_records(records: list[AuditRecord], as_json: bool) -> None:
    for record in records:
        click.echo(msgspec.json.encode(record).decode() if as_json else format_record(record))


def _print_report(report: VerifyReport) -> None:
    if report.ok:
        click.echo(
            f"OK: {report.num_records} records, {report.num_checkpoints} checkpoints, "
            f"last seq {report.last_seq}, signed through {report.sealed_seq}, "
            f"witnessed through {report.witnessed_seq}"
        )
        return
    click.echo(f"FAILED at record {report.first_bad_seq}: {report.problem}", err=True)
    sys.exit(1)


audit = click.Group("audit", help="Inspect, verify and export the tamper-evident audit log.")


@audit.command()
@config_option
@click.option("-n", "num", default=20, show_default=True, help="How many of the newest records.")
@click.option("--json", "as_json", is_flag=True, help="One JSON record per line.")
def tail(config_path: str | None, num: int, as_json: bool) -> None:
    """Print the newest records."""
    records = _with_log(config_path, lambda log: log.tail(num))
    _print_records(records, as_json)


@audit.command()
@config_option
@click.option("--since", default=None, help="RFC 3339 start (inclusive).")
@click.option("--until", default=None, help="RFC 3339 end (exclusive).")
@click.option("--subject", default=None)
@click.option("--role", default=None)
@click.option("--model", default=None)
@click.option("--decision", default=None, type=click.Choice([d.value for d in Decision]))
@click.option("--event-type", default=None, type=click.Choice([t.value for t in EventType]))
@click.option("--finding", default=None, help="Filter finding type.")
@click.option("--limit", default=100, show_default=True)
@click.option("--cursor", default=None)
@click.option("--json", "as_json", is_flag=True)
def search(config_path: str | None, as_json: bool, **filters: str | int | None) -> None:
    """Search records; prints a cursor for the next page when there is one."""
    query = msgspec.convert(filters, AuditQuery)

    async def run(log: OperatorLog) -> tuple[list[AuditRecord], str | None]:
        await _audit_access(log, f"search {msgspec.json.encode(query).decode()}")
        page = await log.search(query)
        return page.records, page.next_cursor

    records, cursor = _with_log(config_path, run)
    _print_records(records, as_json)
    if cursor:
        click.echo(f"next cursor: {cursor}", err=True)


@audit.command()
@config_option
@click.option("--file", "bundle", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option(
    "--public-key",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Trusted Ed25519 key (PEM), outside the data directory; overrides audit.public_key_file.",
)
def verify(config_path: str | None, bundle: str | None, public_key: str | None) -> None:
    """Verify the live log (archives, records, checkpoints, witnesses), or with --file a bundle offline.

    Exit status: 0 verified, 1 failed, 3 newest checkpoint stale and not final, 4 verified but
    against an unpinned key with create_signing_key off (production): authenticity not vouched for.
    """
    cfg, _ = _settings(config_path)
    key_path = Path(public_key) if public_key is not None else None
    if bundle is not None:
        key_path = key_path or (Path(cfg.public_key_file) if cfg.public_key_file else None)
        if key_path is None:
            raise click.UsageError("--file needs --public-key: a bundle is never trusted for its own key")
        verifier = CheckpointVerifier.from_pem(key_path.read_bytes())
        if cfg.public_key_fingerprint not in (None, verifier.fingerprint):
            raise click.UsageError(f"{key_path} is not the key pinned by audit.public_key_fingerprint")
        _print_report(verify_bundle(Path(bundle), verifier))
        return

    async def run(log: OperatorLog) -> VerifyReport:
        return await log.verify(key_path)

    try:
        report = _with_log(config_path, run)
    except (AuditConfigError, AuditIntegrityError) as exc:
        click.echo(f"FAILED: {exc}", err=True)
        sys.exit(1)
    _print_report(report)
    if not report.key_pinned:
        click.echo(
            "WARNING: no trusted public key is pinned (audit.public_key_file, "
            "audit.public_key_fingerprint or --public-key): the log was checked against the key in "
            "its own data directory, which proves it consistent, not authentic",
            err=True,
        )
    if report.newest_checkpoint_time and not report.newest_checkpoint_final:
        age_s = time.time() - iso_to_us(report.newest_checkpoint_time) / 1e6
        if age_s > 2 * cfg.checkpoint_interval_s:
            click.echo(
                f"WARNING: newest checkpoint is {age_s:.0f} s old and not final: the writer stopped "
                "uncleanly or the log's tail was removed",
                err=True,
            )
            sys.exit(3)
    if not report.key_pinned and not cfg.create_signing_key:
        sys.exit(4)


@audit.command()
@config_option
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True)
@click.option("--first-seq", default=1, show_default=True)
@click.option("--last-seq", default=None, type=int)
def export(config_path: str | None, output: str, fmt: str, first_seq: int, last_seq: int | None) -> None:
    """Export a contiguous range (JSONL bundles are sealed and verify offline)."""

    async def run(log: OperatorLog) -> int:
        await _audit_access(log, f"export {fmt} {first_seq}..{last_seq or 'end'} to {output}")
        return await log.export(Path(output), fmt=fmt, first_seq=first_seq, last_seq=last_seq, progress=bar)

    with ProgressBar(f"exporting to {Path(output).name}") as bar:
        count = _with_log(config_path, run)
    click.echo(f"exported {count} records to {output}")


@audit.command("public-key")
@config_option
@click.option("--fingerprint", is_flag=True, help="Print the key's sha256 fingerprint, for pinning.")
def public_key(config_path: str | None, fingerprint: bool) -> None:
    """Print the checkpoint-signing public key (PEM), to pin it and verify offline."""
    if fingerprint:
        click.echo(
            _with_log(config_path, lambda log: _const(log.signer.verifier.fingerprint), may_create=True)
        )
        return
    pem = _with_log(config_path, lambda log: _const(log.signer.public_key_pem()), may_create=True)
    click.echo(pem.decode(), nl=False)


async def _const(value: T) -> T:
    return value


@audit.command("archive")
@config_option
def archive_command(config_path: str | None) -> None:
    """Move records older than retention_online_days into a sealed segment file, then check all segments.

    With PostgreSQL this needs the schema owner's DSN: the gateway's append-only role cannot delete.
    """

    async def run(log: OperatorLog) -> tuple[str, bool, str]:
        entry = await log.archive()
        report = await log.verify_archives()
        moved = (
            "nothing old enough"
            if entry is None
            else f"records {entry.first_seq}..{entry.last_seq} to {entry.path}"
        )
        return moved, report.ok, report.problem

    moved, ok, problem = _with_log(config_path, run)
    click.echo(f"archived {moved}")
    if not ok:
        click.echo(f"FAILED: archives do not verify: {problem}", err=True)
        sys.exit(1)
