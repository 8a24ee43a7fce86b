from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from bench.engine.host_profile import main
from bench.engine.random_model import build_random_qwen3


def test_host_only_profile_runs_the_engines_host_path_on_the_cpu(tmp_path: Path) -> None:
    model_dir = build_random_qwen3(tmp_path / "model", shape="tiny", dtype="float32")
    for text in ("final", "delta"):
        args = [
            "--host-only",
            "--model-dir",
            str(model_dir),
            "--scale",
            "0.05",
            "--skip",
            "2",
            "--steps",
            "3",
        ]
        out = tmp_path / f"{text}.json"
        result = CliRunner().invoke(main, [*args, "--output-text", text, "--out", str(out)])
        assert result.exit_code == 0, result.output
        timing = re.search(r"3 steps at (\d+) running \((\w+) text\): ([\d.]+) ms/step", result.output)
        assert timing is not None, result.output
        assert int(timing[1]) > 0 and timing[2] == text and float(timing[3]) > 0
        record = json.loads(out.read_text())
        assert record["output_text"] == text and record["num_running"] == int(timing[1])
        assert record["ms_per_step"] > 0 and record["provenance"]["git_commit"]
        # The profile names the engine's own step, not a stand-in.
        assert "llm_engine.py" in result.output and "scheduler.py" in result.output
