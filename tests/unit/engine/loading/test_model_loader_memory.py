"""Loading with ``quantization = "fp8"`` never holds the model in full precision: the peak memory
of the load is about the FP8 model plus one checkpoint shard (``engine.loading.model_loader``).

Peak resident memory (``VmHWM``) of a fresh process, with glibc returning every large block to
the system as it is freed (``MALLOC_MMAP_THRESHOLD_``), so that the high-water mark follows the
bytes torch holds. A Llama of 4 layers (hidden 512, MLP 2048: 64 MB in float32, 17 MB in FP8)
saved in 4 MB shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_MEASURE = """
import sys, torch
from pathlib import Path
torch.set_num_threads(1)
from engine.config import ModelSpec
from engine.loading.hosted_model import HostedModel
from engine.loading.model_source import DirectorySource

def status(key):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key))
    return int(line.split()[1]) * 1024

with torch.device("meta"):  # meta-device ops import their registrations once, before the baseline
    torch.nn.Linear(4, 4)(torch.ones(1, 4)).sum()
base = status("VmRSS")
path, quantization = Path(sys.argv[1]), sys.argv[2] or None
spec = ModelSpec(name="m", path=str(path), quantization=quantization)
hosted = HostedModel.load(spec, DirectorySource(path), dtype="float32", device=torch.device("cpu"))
held = sum(p.numel() * p.element_size() for p in hosted.model.parameters())
print(status("VmHWM") - base, held)
"""


def _peak(path: Path, quantization: str) -> tuple[int, int]:
    root = str(Path(__file__).resolve().parents[4])  # this checkout, not an installed copy
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), quantization],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    peak, held = out.stdout.split()
    return int(peak), int(held)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_fp8_load_peaks_near_the_fp8_model(tmp_path: Path, bpe_tokenizer) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = bpe_tokenizer(None)
    config = LlamaConfig(
        hidden_size=512, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=4, vocab_size=tok.get_vocab_size(), max_position_embeddings=128,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path, max_shard_size="4MB")
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    plain_peak, plain_held = _peak(tmp_path, "")
    fp8_peak, fp8_held = _peak(tmp_path, "fp8")
    assert fp8_held < plain_held / 3  # the linear layers are a quarter of their float32 size
    # Beyond the model it keeps, an FP8 load takes what a plain load takes (a shard in memory, the
    # tokenizer, ...) and a little more (one tensor quantizing), never the float32 model: the
    # load that quantized after loading everything peaked 50 MB higher here.
    assert fp8_peak - fp8_held < plain_peak - plain_held + (12 << 20), (fp8_peak, plain_peak)
