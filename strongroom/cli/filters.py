"""``strongroom filters``: commands for policy owners.

    echo "卡号 6222 0212 3456 7890 128" | strongroom filters scan --policy draft.toml
    {"blocked": false, "findings": [{"type": "payment_card", "start": 3, "end": 26, "action": "mask"}]}

Offsets are in characters of the original stdin text. Values are never printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from filters.action import Direction
from filters.context import FilterContext
from filters.errors import PolicyError
from filters.pipeline import FilterPipeline
from strongroom.config import load_settings


@click.group("filters")
def filters() -> None:
    """Content-filter tools."""


@filters.command("scan")
@click.option("--config", "config_path", envvar="STRONGROOM_CONFIG", default=None, help="Settings TOML.")
@click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Try a draft policy file instead of the active one.",
)
@click.option("--direction", type=click.Choice([d.value for d in Direction]), default="request")
@click.option("--role", "roles", multiple=True, help="Caller role (repeatable).")
@click.option("--model", default="", help="Model name the rules are evaluated for.")
def scan(
    config_path: str | None, policy: Path | None, direction: str, roles: tuple[str, ...], model: str
) -> None:
    """Read text on stdin and print the findings as JSON under the active (or draft) policy."""
    settings = load_settings(config_path)
    config = settings.filters
    if policy is not None:
        config = msgspec.structs.replace(config, policy_file=str(policy.resolve()))
    try:
        pipeline = FilterPipeline.from_config(config, settings.data_path)
    except PolicyError as exc:
        raise click.ClickException(str(exc)) from exc
    text = sys.stdin.read()
    hits, blocked = pipeline.hits(text, FilterContext(roles=roles, model=model), Direction(direction))
    click.echo(msgspec.json.encode({"blocked": blocked, "findings": hits}).decode())
