"""``strongroom config show`` prints no secret (issue 18, #9): it printed ``postgres_dsn`` in clear."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from strongroom.cli import main
from strongroom.redaction import REDACTED, redacted

SECRETS = ("pg-s3cret", "kv-s3cret", "r3dis-pw", "otlp-t0ken", "jwks-pw")


def test_config_show_redacts_every_secret_and_keeps_the_rest(tmp_path: Path) -> None:
    cfg = tmp_path / "strongroom.toml"
    cfg.write_text(
        'redis_url = "rediss://:r3dis-pw@cache.internal:6380/2"\n'
        "[audit]\n"
        'postgres_dsn = "postgresql://strongroom:pg-s3cret@db.internal:5432/audit?sslmode=require"\n'
        "[telemetry]\n"
        'otlp_endpoint = "https://otel.internal:4318"\n'
        'otlp_headers = { authorization = "Bearer otlp-t0ken" }\n'
        "[[auth.issuers]]\n"
        'issuer = "https://idp.internal"\n'
        'audiences = ["strongroom"]\n'
        'jwks_url = "https://svc:jwks-pw@idp.internal/jwks"\n'
    )
    result = CliRunner().invoke(main, ["config", "show", "--config", str(cfg)], env={"STRONGROOM_CONFIG": ""})
    assert result.exit_code == 0, result.output
    for secret in SECRETS:
        assert secret not in result.output
    shown = json.loads(result.output)
    assert (
        shown["audit"]["postgres_dsn"]
        == f"postgresql://strongroom:{REDACTED}@db.internal:5432/audit?sslmode=require"
    )
    assert shown["redis_url"] == f"rediss://:{REDACTED}@cache.internal:6380/2"
    assert shown["telemetry"]["otlp_headers"] == {"authorization": REDACTED}
    # Where a secret lives is configuration, not a secret: it stays readable.
    assert shown["server"]["engine_token_env"] == "STRONGROOM_ENGINE_TOKEN"
    assert shown["keys"]["key_file"] == "keys/master.key"


def test_secret_shapes_whatever_the_key_is_called() -> None:
    raw = {
        "policy_store": {"dsn": "host=db user=app password='kv s3cret' dbname=p"},
        "hsm": {"user_pin": "1234", "pin_env": "HSM_PIN", "so_password": "x", "token_label": "t"},
        "limits": {"max_tokens_ceiling": 100, "tokens_per_minute": 5},
        "urls": ["https://u:pw@a/b", "https://a/b"],
    }
    assert redacted(raw) == {
        "policy_store": {"dsn": f"host=db user=app password={REDACTED} dbname=p"},
        "hsm": {"user_pin": REDACTED, "pin_env": "HSM_PIN", "so_password": REDACTED, "token_label": "t"},
        "limits": {"max_tokens_ceiling": 100, "tokens_per_minute": 5},
        "urls": [f"https://u:{REDACTED}@a/b", "https://a/b"],
    }
