"""The ``strongroom`` group and its own commands (serve, engine, config); the other groups are mounted."""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

import click

from gateway.errors import ConfigError
from strongroom.config import CONFIG_ENV, load_settings

__all__ = ["main"]

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar=CONFIG_ENV,
    help="TOML settings file (default: embedded defaults; env STRONGROOM_CONFIG).",
)


def _user_errors() -> tuple[type[Exception], ...]:
    """Errors that mean "this input or setting is wrong": one line for the user, no traceback."""
    from audit.errors import AuditError
    from filters.errors import FilterError
    from keys.errors import KeysError

    return (ConfigError, AuditError, KeysError, FilterError)


class _Main(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _user_errors() as exc:
            raise click.ClickException(str(exc) or type(exc).__name__) from None


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Strongroom: an on-prem LLM gateway with a security and compliance layer."""
    # Keys, audit log, policies, sealed models: everything under the data directory is the
    # service user's alone (files 0600, folders 0700), the engine it starts included.
    os.umask(0o077)


@main.command()
@config_option
@click.option("--host", default=None, help="Override server.host.")
@click.option("--port", type=int, default=None, help="Override server.port.")
@click.option("--grpc-port", type=int, default=None, help="Override grpc.port (the gRPC API).")
@click.option("--stub-engine", is_flag=True, help="Serve a model-free stub engine (gateway benchmarks).")
def serve(
    config_path: str | None, host: str | None, port: int | None, grpc_port: int | None, stub_engine: bool
) -> None:
    """Start the gateway and, unless server.engine_urls is set, one local engine instance."""
    import msgspec

    from gateway.app import build_app
    from gateway.services import Services
    from gateway.telemetry import Telemetry
    from strongroom.banner import banner
    from strongroom.gateway_worker import num_workers
    from strongroom.listener import Listener, check_gateway_exposure, check_port_free
    from strongroom.supervisor import EngineSupervisor

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = load_settings(config_path)
    # --host and --port become the settings, so every check and /metrics see the real address.
    server = msgspec.structs.replace(
        settings.server, host=host or settings.server.host, port=port or settings.server.port
    )
    grpc = msgspec.structs.replace(settings.grpc, port=grpc_port or settings.grpc.port)
    settings = msgspec.structs.replace(settings, server=server, grpc=grpc)
    _refuse_on_problems(settings, "serve")
    try:
        check_gateway_exposure(settings)
        listener = Listener(server.tls, server.limits, resolve=settings.resolve, where="server")
        if grpc.enabled:
            check_port_free(server.host, grpc.port, "the gRPC API ([grpc] port)")
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    settings.data_path.mkdir(parents=True, exist_ok=True)
    _check_audit_volume(settings)
    _exit_on_sigterm()
    supervisor = None
    urls = settings.server.engine_urls
    if not urls:
        supervisor = EngineSupervisor(settings, config_path, stub=stub_engine)
        supervisor.start()
        urls = (supervisor.url,)
    try:
        workers = num_workers(settings)
        if workers > 1:
            from strongroom.gateway_workers import serve_workers

            click.echo(
                banner(settings, server.host, server.port, scheme=listener.scheme, config_path=config_path)
            )
            try:
                serve_workers(settings, config_path, num_workers=workers, engine=supervisor)
            except RuntimeError as exc:  # a worker that could not start
                raise click.ClickException(str(exc)) from None
            return
        telemetry = Telemetry.install(settings.telemetry)
        alive = supervisor.is_alive if supervisor is not None else None
        app = build_app(
            lambda: Services.create(settings, urls, is_process_alive=alive),
            telemetry,
            max_body_bytes=settings.server.max_body_bytes,
        )
        click.echo(
            banner(settings, server.host, server.port, scheme=listener.scheme, config_path=config_path)
        )
        listener.serve(app, host=server.host, port=server.port, drain_s=server.drain_s)
    finally:
        if supervisor is not None:
            supervisor.stop()


def _refuse_on_problems(settings: Any, role: Any) -> None:
    """Run ``config check``'s checks: errors stop the start, all listed; warnings are logged."""
    from strongroom.config_check import ConfigCheck

    problems = ConfigCheck(settings, role).problems()
    for warning in (p for p in problems if p.is_warning):
        logging.getLogger("strongroom.config").warning("%s", warning)
    errors = [p for p in problems if not p.is_warning]
    if errors:
        raise click.ClickException(
            "refusing to start; `strongroom config check` lists the same:\n  " + "\n  ".join(errors)
        )


def _check_audit_volume(settings: Any) -> None:
    """A volume too small for the SQLite audit log stops ``serve`` with one line, before the engine."""
    if settings.audit.backend != "sqlite":
        return
    from audit.errors import AuditUnavailableError
    from audit.sqlite_store import require_free_space

    try:
        require_free_space(settings.audit.resolve(settings.data_path, settings.audit.sqlite_path).parent)
    except AuditUnavailableError as exc:
        raise click.ClickException(str(exc)) from None


def _exit_on_sigterm() -> None:
    """SIGTERM (systemd, Kubernetes) ends ``serve`` through its clean-up, engine included.

    uvicorn handles the signal itself while it runs, then restores this handler and raises the
    signal again; with the default handler the process would die there, before the ``finally``
    that stops the engine, leaving it running with its memory.
    """
    import signal

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


@main.command(hidden=True)
@config_option
@click.option("--fd", type=int, required=True, help="The listening socket `serve` passes down.")
@click.option("--index", type=int, required=True, help="This worker's number, 0..workers-1.")
@click.option(
    "--run-dir", type=click.Path(file_okay=False), required=True, help="The supervisor's run folder."
)
@click.option(
    "--engine-url", "engine_urls", multiple=True, help="The supervised engine (when serve runs one)."
)
def worker(config_path: str | None, fd: int, index: int, run_dir: str, engine_urls: tuple[str, ...]) -> None:
    """One gateway worker of `strongroom serve` (server.workers > 1); not for direct use."""
    from pathlib import Path

    from strongroom.gateway_worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    _exit_on_sigterm()
    run_worker(load_settings(config_path), fd=fd, index=index, run_dir=Path(run_dir), engine_urls=engine_urls)


@main.command(hidden=False)
@config_option
@click.option("--fd", type=int, default=None, help="Serve on this inherited socket (used by `serve`).")
@click.option("--host", default=None, help="Override engine_listener.host (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Override engine_listener.port (default 8100).")
@click.option("--stub", is_flag=True, help="Model-free stub backend (benchmarks).")
def engine(config_path: str | None, fd: int | None, host: str | None, port: int | None, stub: bool) -> None:
    """Run one engine instance (the [engine] section) speaking the engine protocol."""
    import msgspec

    from strongroom.engine_process import run_engine

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = load_settings(config_path)
    if fd is None:  # a supervised engine was checked by its `serve`
        host = host or settings.engine_listener.host
        listener = msgspec.structs.replace(settings.engine_listener, host=host)
        _refuse_on_problems(msgspec.structs.replace(settings, engine_listener=listener), "engine")
    try:
        run_engine(
            settings,
            fd=fd,
            host=host or settings.engine_listener.host,
            port=port or settings.engine_listener.port,
            stub=stub,
        )
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@main.command("engine-rank")
@config_option
def engine_rank(config_path: str | None) -> None:
    """One rank (not 0) of a tensor- or pipeline-parallel engine whose rank 0 runs elsewhere.

    Reads torchrun's variables: MASTER_ADDR and MASTER_PORT (rank 0's host and port), RANK,
    WORLD_SIZE (tensor_parallel_size x pipeline_parallel_size) and LOCAL_RANK (the GPU here).
    Rank 0 waits for it when [engine] spawned_ranks leaves its rank to other hosts; it serves
    until rank 0 stops, with the same [engine] settings and its models under its data_dir."""
    from engine.errors import EngineConfigError
    from strongroom.engine_process import run_engine_rank

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        run_engine_rank(load_settings(config_path))
    except EngineConfigError as exc:
        raise click.ClickException(exc.message) from None


@main.group()
def config() -> None:
    """Inspect the settings."""


@config.command("show")
@config_option
def config_show(config_path: str | None) -> None:
    """Print the effective settings (defaults < file < environment) as JSON, secrets redacted."""
    import msgspec

    from strongroom.redaction import redacted

    shown = redacted(msgspec.to_builtins(load_settings(config_path)))
    click.echo(msgspec.json.format(msgspec.json.encode(shown), indent=2))


@config.command("check")
@config_option
@click.option(
    "--role",
    type=click.Choice(["serve", "engine"]),
    default="serve",
    show_default=True,
    help="The process the config is for: `strongroom serve` or a standalone `strongroom engine`.",
)
@click.option("--connect", is_flag=True, help="Also reach Redis and PostgreSQL.")
@click.option("--strict", is_flag=True, help="Warnings fail the check too.")
@click.option(
    "--json", "as_json", is_flag=True, help='One {"severity", "problem"} JSON object per line, on stdout.'
)
def config_check(config_path: str | None, role: str, connect: bool, strict: bool, as_json: bool) -> None:
    """Check a config with the files, secrets and services it names; one line per problem.

    Exit status: 0 when it would start, 1 on any error (or warning with --strict)."""
    import json

    from strongroom.config_check import ConfigCheck

    settings = load_settings(config_path)
    problems = ConfigCheck(settings, "engine" if role == "engine" else "serve").problems(connect=connect)
    for problem in problems:
        severity = "warning" if problem.is_warning else "error"
        if as_json:
            click.echo(json.dumps({"severity": severity, "problem": str(problem)}))
        else:
            click.echo(f"{severity}: {problem}", err=True)
    failed = [p for p in problems if strict or not p.is_warning]
    if failed:
        raise SystemExit(1)
    if not as_json:
        click.echo(f"ok: {config_path or 'embedded defaults'} ({role}, {len(problems)} warning(s))")


@config.command("example")
def config_example() -> None:
    """Print every settings key with its documentation and default, as TOML."""
    from strongroom.config_reference import ConfigReference

    click.echo(ConfigReference().render(), nl=False)


def _mount(group: click.Group, module: str, attr: str, name: str | None = None) -> None:
    mod: Any = importlib.import_module(module)
    group.add_command(getattr(mod, attr), name=name)


_NO_BENCH = (
    "strongroom bench runs from a source checkout: bench/ is not installed with the package. "
    "Run it from the repository root (e.g. `python -m strongroom bench ...` there)."
)


def _mount_bench(group: click.Group) -> None:
    """Mount ``bench.cli``; where ``bench`` is absent (an installed wheel) the command says why."""
    try:
        _mount(group, "bench.cli", "bench")
    except ModuleNotFoundError as error:
        if error.name not in ("bench", "bench.cli"):
            raise  # bench is there but one of its own dependencies is not: show that

        @group.command(
            "bench",
            add_help_option=False,
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        )
        def bench() -> None:
            raise click.ClickException(_NO_BENCH)


def _build() -> None:
    _mount(main, "strongroom.cli.token", "token")
    _mount(main, "strongroom.cli.admin", "admin")
    admin = main.commands.get("admin")
    if isinstance(admin, click.Group):
        _mount(admin, "strongroom.cli.token", "revoke")
    _mount(main, "strongroom.cli.audit", "audit")
    _mount(main, "strongroom.cli.filters", "filters")
    _mount(main, "strongroom.cli.keys", "keys")
    _mount(main, "strongroom.cli.keys", "models")
    _mount_bench(main)


_build()
