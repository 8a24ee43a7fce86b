"""``config show`` masks every value that can carry a secret, whatever form the DSN takes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from strongroom.config import load_settings
from strongroom.redaction import MASK, redact_settings

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://audit:pa%40ss@db:5432/sr", f"postgresql://audit:{MASK}@db:5432/sr"),
        ("host=db user=audit password=s3cret dbname=sr", f"host=db user=audit password={MASK} dbname=sr"),
        ("host=db password = 'with space' dbname=sr", f"host=db password = {MASK} dbname=sr"),
        ("host=db user=audit dbname=sr", "host=db user=audit dbname=sr"),
    ],
)
def test_dsn_passwords_are_masked_in_every_form(dsn: str, shown: str) -> None:
    settings = load_settings(
        None,
        environ={
            "STRONGROOM_AUDIT__BACKEND": "postgres",
            "STRONGROOM_AUDIT__POSTGRES_DSN": dsn,
            "STRONGROOM_AUDIT__WITNESS_POSTGRES_DSN": dsn,
        },
    )
    out = redact_settings(msgspec.to_builtins(settings))
    assert out["audit"]["postgres_dsn"] == out["audit"]["witness_postgres_dsn"] == shown


def test_config_show_prints_no_secret_of_the_environment(tmp_path: Path) -> None:
    env = {
        "PYTHONPATH": str(REPO),
        "STRONGROOM_REDIS_URL": "rediss://default:redis-pw-123@redis:6380/0",
        "STRONGROOM_AUDIT__BACKEND": "postgres",
        "STRONGROOM_AUDIT__POSTGRES_DSN": "postgresql://audit:pg-pw-456@db/sr",
        "STRONGROOM_TELEMETRY__OTLP_HEADERS": '{ authorization = "Bearer otlp-789" }',
    }
    done = subprocess.run(
        [sys.executable, "-m", "strongroom", "config", "show"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=True,
    )
    for secret in ("redis-pw-123", "pg-pw-456", "otlp-789"):
        assert secret not in done.stdout
    shown = json.loads(done.stdout)
    assert shown["redis_url"] == f"rediss://default:{MASK}@redis:6380/0"
    assert shown["telemetry"]["otlp_headers"] == {"authorization": MASK}
