from pathlib import Path

import msgspec
import pytest
from filter_fixtures import write_policy

from filters import FilterConfig, FilterContext, FilterPipeline


def test_config_paths_are_relative_to_data_dir(tmp_path: Path) -> None:
    write_policy(tmp_path / "policies")
    (tmp_path / "extra.txt").write_text("套现\n", encoding="utf-8")
    config = FilterConfig(policy_file="policies/policy.toml", keyword_files=("extra.txt",))
    pipeline = FilterPipeline.from_config(config, tmp_path)
    assert pipeline.check_request(["不要套 现"], FilterContext()).texts == ["不要[REDACTED:KEYWORD]"]


def test_config_rejects_nonsense_and_is_frozen() -> None:
    with pytest.raises(ValueError):
        FilterConfig(max_scan_chars=0)
    config = msgspec.convert({"max_scan_chars": 20}, FilterConfig)
    assert config.max_scan_chars == 20
    assert FilterPipeline.from_config(config, ".").max_scan_chars == 20
    with pytest.raises(AttributeError):
        config.max_scan_chars = 5  # type: ignore[misc]
