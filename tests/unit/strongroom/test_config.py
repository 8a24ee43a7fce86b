from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import ConfigError
from strongroom.config import Settings, load_settings
from strongroom.config_reference import ConfigReference

REPO = Path(__file__).resolve().parents[3]


def test_defaults_need_no_file_and_no_environment() -> None:
    settings = load_settings(None, environ={})
    assert settings == Settings()
    assert settings.server.host == "127.0.0.1" and settings.server.port == 8000
    assert [m.name for m in settings.engine.models] == ["demo-chat", "demo-base", "demo-embed"]
    assert [m.kind for m in settings.engine.models] == [None, None, "embedding"]
    assert settings.redis_url is None


def test_file_overrides_defaults_and_environment_overrides_file(tmp_path: Path) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text('data_dir = "/srv/x"\n[server]\nport = 9000\nhost = "0.0.0.0"\n')
    from_file = load_settings(cfg, environ={})
    assert from_file.server.port == 9000 and from_file.server.host == "0.0.0.0"
    assert from_file.data_dir == "/srv/x"
    env = {"STRONGROOM_SERVER__PORT": "9100", "STRONGROOM_DATA_DIR": "/srv/y"}
    both = load_settings(cfg, environ=env)
    assert both.server.port == 9100 and both.server.host == "0.0.0.0" and both.data_dir == "/srv/y"


def test_config_path_from_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text("[server]\nport = 9300\n")
    assert load_settings(None, environ={"STRONGROOM_CONFIG": str(cfg)}).server.port == 9300


def test_environment_values_parse_as_toml() -> None:
    env = {
        "STRONGROOM_ENGINE__MODELS": '[{name = "m", path = "/models/m", dtype = "bfloat16"}]',
        "STRONGROOM_SERVER__ENGINE_URLS": '["https://10.0.0.1:8100"]',
        "STRONGROOM_TELEMETRY__SERVICE_NAME": "gw-eu",
    }
    s = load_settings(None, environ=env)
    assert s.engine.models[0].name == "m" and s.engine.models[0].dtype == "bfloat16"
    assert s.server.engine_urls == ("https://10.0.0.1:8100",)
    assert s.telemetry.service_name == "gw-eu"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[server]\nprot = 1\n", "server.'prot'"),
        ("[serverr]\nport = 1\n", "'serverr'"),
        ('[engine]\nmodels = [{name = "m", path = "p", dtyp = "x"}]\n', "engine.models.0.'dtyp'"),
    ],
)
def test_unknown_keys_are_errors_at_any_depth(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match="unknown setting") as err:
        load_settings(cfg, environ={})
    assert needle in str(err.value)


def test_unknown_environment_section_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unknown settings section"):
        load_settings(None, environ={"STRONGROOM_SERVR__PORT": "1"})


def test_bad_values_name_the_problem(tmp_path: Path) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text('[server]\nport = "eighty"\n')
    with pytest.raises(ConfigError, match=r"server.port"):
        load_settings(cfg, environ={})
    cfg.write_text("[server]\nport = 70000\n")
    with pytest.raises(ConfigError, match="65535"):
        load_settings(cfg, environ={})
    cfg.write_text('[server]\nengine_urls = ["ftp://x"]\n')
    with pytest.raises(ConfigError, match="not an http"):
        load_settings(cfg, environ={})


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "absent.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\nport=1")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_settings(bad, environ={})


def test_relative_paths_resolve_under_the_data_dir(tmp_path: Path) -> None:
    s = load_settings(None, environ={"STRONGROOM_DATA_DIR": str(tmp_path)})
    assert s.resolve("models/x") == tmp_path / "models/x"
    assert s.resolve("/abs/y") == Path("/abs/y")


def test_every_key_is_documented_and_the_example_is_current() -> None:
    ref = ConfigReference()
    text = ref.render()
    assert ref.undocumented == [], f"settings without a docstring: {ref.undocumented}"
    example = (REPO / "deploy" / "strongroom.example.toml").read_text()
    assert example == text, "deploy/strongroom.example.toml is stale: run `strongroom config example`"


def test_the_example_file_loads_back(tmp_path: Path) -> None:
    # Uncommenting every simple key of the reference gives exactly the defaults.
    lines = []
    for line in (REPO / "deploy" / "strongroom.example.toml").read_text().splitlines():
        if line.startswith("[") or (line.startswith("# ") and " = " in line and "(unset" not in line):
            body = line if line.startswith("[") else line[2:]
            if body.startswith("[") or body.split(" = ")[0].isidentifier():
                lines.append(body)
    cfg = tmp_path / "all.toml"
    cfg.write_text("\n".join(lines) + "\n")
    assert load_settings(cfg, environ={}) == Settings()
