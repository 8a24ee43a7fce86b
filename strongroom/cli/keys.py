"""CLI: ``strongroom keys init|rotate|show`` and ``strongroom models seal|verify|unseal|register|list|pin|unregister``.

Commands print key ids, versions and public keys, never key material. Passphrases come from
``keys.passphrase_env`` or a hidden prompt; HSM PINs only from ``keys.pkcs11_pin_env``.
Every key operation is recorded with the operator's OS user and host (``OperatorSink``: through
the running gateway, or into the log when none runs); export refuses to start unrecorded.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import socket
from pathlib import Path

import click

from audit.security_operation import OperatorSink
from keys.config import KeysConfig
from keys.errors import KeysError
from keys.factory import build_provider, key_file_path, seal_registry
from keys.key_audit import key_event, record_all
from keys.key_file_provider import KeyFileProvider
from keys.manifest import read_verified_manifest
from keys.pkcs11_provider import Pkcs11Provider
from keys.provider import KeyProvider, KeyRef
from keys.rotation import default_model_dirs
from keys.rotation import rotate as rotate_models
from keys.seal_registry import SealRegistry
from keys.sealed_model import admission, unseal_model, verify_model
from keys.sealer import seal_model
from keys.secret import Secret
from strongroom.config import load_settings
from strongroom.progress_bar import ProgressBar

_config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None, envvar="STRONGROOM_CONFIG",
    help="Strongroom TOML config (default: built-in defaults + env overrides).",
)  # fmt: skip


def load_keys_settings(config_path: str | None) -> tuple[Path, KeysConfig]:
    """(data_dir, [keys] section) of the settings."""
    settings = load_settings(config_path)
    return Path(settings.data_dir), settings.keys


def _provider(config_path: str | None) -> KeyProvider:
    data_dir, config = load_keys_settings(config_path)
    passphrase = None
    needs_prompt = config.provider == "file" and not config.passphrase_env
    if needs_prompt and KeyFileProvider.needs_passphrase(key_file_path(config, data_dir)):
        passphrase = Secret(click.prompt("Key file passphrase", hide_input=True))
    return build_provider(config, data_dir, passphrase=passphrase)


def _operator_sink(config_path: str | None) -> OperatorSink:
    settings = load_settings(config_path)
    return OperatorSink(settings.audit, settings.data_path)


def _record(config_path: str | None, operation: str, ref: KeyRef, provider: str, model: str = "*") -> None:
    """Record an operation already done (init, seal); raises AuditRequiredError if it cannot be."""
    event = key_event(
        operation, ref, model=model, process=f"cli-{operation}:{os.getpid()}", provider=provider
    )
    asyncio.run(record_all(_operator_sink(config_path), [event]))


def _fail(exc: KeysError) -> click.ClickException:
    return click.ClickException(exc.message)


def _registry(config_path: str | None, provider: KeyProvider) -> SealRegistry:
    data_dir, config = load_keys_settings(config_path)
    return seal_registry(config, data_dir, provider)


def _operator() -> str:
    """Who ran this command, for the registry (OS user at host)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def _configured_name(config_path: str | None, model_dir: str) -> str | None:
    """The name a configured model serves ``model_dir`` under (what the engine would bind it to)."""
    settings = load_settings(config_path)
    target = Path(model_dir).resolve()
    for spec in settings.engine.models:
        if settings.resolve(spec.path).resolve() == target:
            return spec.sealed_model_id or spec.name
    return None


keys = click.Group("keys", help="Master keys that guard sealed models.")
models = click.Group("models", help="Seal, verify and (explicitly) export model directories.")


@keys.command("init")
@_config_option
@click.option(
    "--passphrase/--no-passphrase", default=False, help="Protect the key file with a prompted passphrase."
)
def init(config_path: str | None, passphrase: bool) -> None:
    """Create the master key (version 1): a 0600 key file, or objects on the PKCS#11 token."""
    data_dir, config = load_keys_settings(config_path)
    try:
        if config.provider == "pkcs11":
            provider = build_provider(config, data_dir)
            assert isinstance(provider, Pkcs11Provider)
            ref = provider.initialize()
            click.echo(f"created {ref} on token {config.pkcs11_token_label!r}")
            _record(config_path, "init", ref, provider.kind)
            return
        secret = None
        if config.passphrase_env:
            secret = Secret.from_env(config.passphrase_env)
        elif passphrase:
            secret = Secret(click.prompt("New passphrase", hide_input=True, confirmation_prompt=True))
        created = KeyFileProvider.create(key_file_path(config, data_dir), passphrase=secret)
        click.echo(f"created {created.current()} in {created.path} (mode 0600)")
        _record(config_path, "init", created.current(), created.kind)
    except KeysError as exc:
        raise _fail(exc) from None


_json_option = click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")


@keys.command("show")
@_config_option
@_json_option
def show(config_path: str | None, as_json: bool) -> None:
    """List key versions and their state (ids and public keys only)."""
    try:
        for info in _provider(config_path).versions():
            if as_json:
                row = {
                    "ref": str(info.ref),
                    "status": info.status.value,
                    "signing_public_key": info.signing_public_key,
                }
                click.echo(json.dumps(row))
            else:
                click.echo(f"{info.ref}\t{info.status.value}\t{info.signing_public_key or '-'}")
    except KeysError as exc:
        raise _fail(exc) from None


@keys.command("rotate")
@_config_option
@click.argument("model_dirs", nargs=-1, type=click.Path(file_okay=False, exists=True))
def rotate(config_path: str | None, model_dirs: tuple[str, ...]) -> None:
    """New key version; rewrap MODEL_DIRS (default: every sealed model under <data_dir>/models); retire the old."""
    data_dir, _ = load_keys_settings(config_path)
    dirs = list(model_dirs) or default_model_dirs(data_dir)
    try:
        provider = _provider(config_path)
        with ProgressBar("rewrapping models") as bar:
            report = rotate_models(
                provider,
                dirs,
                audit=_operator_sink(config_path),
                process=f"cli-rotate:{os.getpid()}",
                registry=_registry(config_path, provider),
                progress=bar,
            )
    except KeysError as exc:
        raise _fail(exc) from None
    click.echo(f"now {report.new_key}; rewrapped {len(report.rewrapped)} model(s)")
    for ref in report.retired:
        click.echo(f"retired {ref}")
    for ref in report.kept:
        click.echo(f"kept {ref}: a registered model is still wrapped under it")


@models.command("seal")
@_config_option
@click.argument("src", type=click.Path(file_okay=False, exists=True))
@click.argument("dst", type=click.Path(file_okay=False))
@click.option("--model-id", default=None, help="Model id bound into the seal (default: DST's name).")
def seal(config_path: str | None, src: str, dst: str, model_id: str | None) -> None:
    """Seal the model directory SRC into DST and register it as the newest sealing of its model."""
    try:
        provider = _provider(config_path)
        registry = _registry(config_path, provider)
        name = model_id or Path(dst).name
        with ProgressBar(f"sealing {name}") as bar:
            manifest = seal_model(
                src, dst, name, provider, registry=registry, sealed_by=_operator(), progress=bar
            )
        sealing = registry.read().find(manifest.seal_id)
        if sealing is None:  # seal_model registers it under the registry's lock
            raise KeysError(f"{dst}: sealed but not registered")
        _record(config_path, "seal", provider.current(), provider.kind, model=manifest.model_id)
    except KeysError as exc:
        raise _fail(exc) from None
    click.echo(
        f"sealed {len(manifest.files)} file(s) as {manifest.model_id!r} v{sealing.version} "
        f"(seal {manifest.seal_id}) into {dst}"
    )


@models.command("verify")
@_config_option
@click.argument("model_dir", type=click.Path(file_okay=False, exists=True))
@click.option(
    "--name", default=None,
    help="Model id the sealing must be bound to (default: the configured model at MODEL_DIR, if any).",
)  # fmt: skip
def verify(config_path: str | None, model_dir: str, name: str | None) -> None:
    """Check the signature, every chunk and every file's SHA-256, the name binding and the registry."""
    try:
        provider = _provider(config_path)
        expected = name or _configured_name(config_path, model_dir)
        if expected is None:
            expected = read_verified_manifest(Path(model_dir), provider)[0].model_id
        admit = admission(expected, _registry(config_path, provider))
        with ProgressBar(f"verifying {expected}") as bar:
            report = verify_model(
                model_dir,
                provider,
                audit=_operator_sink(config_path),
                process=f"cli-verify:{os.getpid()}",
                admit=admit,
                progress=bar,
            )
    except KeysError as exc:
        raise _fail(exc) from None
    click.echo(
        f"ok {report.model_id}: {len(report.files)} file(s), {report.total_bytes} bytes, key {report.key}, "
        f"manifest sha256:{report.manifest_sha256}"
    )


@models.command("register")
@_config_option
@click.argument("model_dir", type=click.Path(file_okay=False, exists=True))
def register(config_path: str | None, model_dir: str) -> None:
    """Register a sealing made elsewhere (or before the registry) as the newest of its model."""
    try:
        provider = _provider(config_path)
        manifest, _, digest = read_verified_manifest(Path(model_dir), provider)
        sealing = _registry(config_path, provider).register(
            manifest.model_id, manifest.seal_id, digest, model_dir, _operator()
        )
        _record(config_path, "register", provider.current(), provider.kind, model=sealing.model_id)
    except KeysError as exc:
        raise _fail(exc) from None
    click.echo(
        f"registered {sealing.model_id!r} v{sealing.version} (seal {sealing.seal_id}) at {sealing.path}"
    )


@models.command("list")
@_config_option
@_json_option
def list_sealings(config_path: str | None, as_json: bool) -> None:
    """Every registered sealing: model, version, seal id, manifest digest, path; pins marked."""
    try:
        body = _registry(config_path, _provider(config_path)).read()
    except KeysError as exc:
        raise _fail(exc) from None
    for s in sorted(body.sealings, key=lambda s: (s.model_id, s.version)):
        is_pinned = body.pins.get(s.model_id) == s.seal_id
        if as_json:
            row = {
                "model_id": s.model_id,
                "version": s.version,
                "seal_id": s.seal_id,
                "manifest_sha256": s.manifest_sha256,
                "path": s.path,
                "pinned": is_pinned,
            }
            click.echo(json.dumps(row))
            continue
        pinned = "\tpinned" if is_pinned else ""
        click.echo(f"{s.model_id}\tv{s.version}\t{s.seal_id}\tsha256:{s.manifest_sha256}\t{s.path}{pinned}")


@models.command("pin")
@_config_option
@click.argument("model_id")
@click.argument("seal_id", required=False)
@click.option("--unpin", is_flag=True, default=False, help="Serve the newest sealing again.")
def pin(config_path: str | None, model_id: str, seal_id: str | None, unpin: bool) -> None:
    """Serve SEAL_ID for MODEL_ID although a newer sealing is registered (roll back on purpose)."""
    if unpin == (seal_id is not None):
        raise click.UsageError("give either SEAL_ID or --unpin")
    try:
        provider = _provider(config_path)
        sealing = _registry(config_path, provider).pin(model_id, seal_id)
        _record(config_path, "unpin" if unpin else "pin", provider.current(), provider.kind, model=model_id)
    except KeysError as exc:
        raise _fail(exc) from None
    if sealing is None:
        click.echo(f"unpinned {model_id!r}: the newest registered sealing serves")
    else:
        click.echo(
            f"pinned {model_id!r} to v{sealing.version} (seal {sealing.seal_id}); restart engines to apply"
        )


@models.command("unregister")
@_config_option
@click.argument("seal_id")
def unregister(config_path: str | None, seal_id: str) -> None:
    """Forget a destroyed sealing, so rotation no longer needs it and may retire its key version."""
    try:
        provider = _provider(config_path)
        sealing = _registry(config_path, provider).unregister(seal_id)
        _record(config_path, "unregister", provider.current(), provider.kind, model=sealing.model_id)
    except KeysError as exc:
        raise _fail(exc) from None
    click.echo(f"unregistered {sealing.model_id!r} v{sealing.version} (seal {seal_id}, {sealing.path})")


@models.command("unseal")
@_config_option
@click.argument("model_dir", type=click.Path(file_okay=False, exists=True))
@click.argument("dst", type=click.Path(file_okay=False))
@click.option(
    "--export", is_flag=True, default=False, help="Required: confirms writing plaintext weights to disk."
)
def unseal(config_path: str | None, model_dir: str, dst: str, export: bool) -> None:
    """Export MODEL_DIR as plaintext into DST (needs --export)."""
    if not export:
        raise click.ClickException("unsealing writes plaintext weights to disk: add --export to confirm")
    try:
        with ProgressBar(f"exporting {Path(model_dir).name}") as bar:
            unseal_model(
                model_dir,
                dst,
                _provider(config_path),
                export=export,
                audit=_operator_sink(config_path),
                process=f"cli-unseal:{os.getpid()}",
                progress=bar,
            )
    except KeysError as exc:
        raise _fail(exc) from None
    click.echo(f"exported plaintext to {dst}")
