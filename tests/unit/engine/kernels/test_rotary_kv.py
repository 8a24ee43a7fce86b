"""The Triton RoPE and KV-cache write against the torch layers, over the pool's strided views."""

from __future__ import annotations

import pytest
import torch

from engine.kernels import kv_write, rotary, rotary_kv_write
from engine.layers import RMSNorm, RotaryEmbedding
from engine.quantization.kv_quant import KVScales, quantize_kv

_LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}


def _inputs(
    device: str, dtype: torch.dtype, tokens: int, heads: int, kv_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # q, k, v as views into one fused qkv output, as the model produces them.
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim).to(dtype).to(device)
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    positions = torch.randint(0, 4000, (tokens,)).to(device)
    return (
        positions,
        q.view(tokens, heads, head_dim),
        k.view(tokens, kv_heads, head_dim),
        v.view(tokens, kv_heads, head_dim),
    )


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 3e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scaling", [None, _LLAMA3])
def test_rotary_matches_the_torch_layer(device: str, dtype: torch.dtype, scaling: dict | None) -> None:  # type: ignore[type-arg]
    rope = RotaryEmbedding(32, 500000.0, scaling).to(device)
    positions, q, k, _ = _inputs(device, dtype, 7, 4, 2, 32)
    got_q, got_k = rotary(positions, q, k, rope.inv_freq)
    want_q, want_k = rope(positions, q, k)
    torch.testing.assert_close(got_q, want_q, **_tol(dtype))
    torch.testing.assert_close(got_k, want_k, **_tol(dtype))


def _pool(device: str, dtype: torch.dtype, kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    pool = torch.zeros(6, 2, 2, 4, kv_heads, head_dim, dtype=dtype, device=device)
    return pool[:, 1, 0], pool[:, 1, 1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rotary_and_cache_write(device: str, dtype: torch.dtype) -> None:
    rope = RotaryEmbedding(16, 10000.0).to(device)
    positions, q, k, v = _inputs(device, dtype, 5, 4, 2, 16)
    k_cache, v_cache = _pool(device, dtype, 2, 16)
    slots = torch.tensor([3, 9, -1, 0, 22], device=device)  # -1: a padding row, stored nowhere
    got_q = rotary_kv_write(positions, q, k, v, rope.inv_freq, k_cache, v_cache, slots)
    want_q, want_k = rope(positions, q, k)
    torch.testing.assert_close(got_q, want_q, **_tol(dtype))
    for row, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        torch.testing.assert_close(k_cache[slot // 4, slot % 4], want_k[row], **_tol(dtype))
        torch.testing.assert_close(v_cache[slot // 4, slot % 4], v[row], atol=0, rtol=0)
    written = {s for s in slots.tolist() if s >= 0}
    untouched = [s for s in range(24) if s not in written]
    assert not k_cache.flatten(0, 1)[untouched].any() and not v_cache.flatten(0, 1)[untouched].any()


def test_kv_write_stores_k_unchanged(device: str) -> None:
    _, _, k, v = _inputs(device, torch.bfloat16, 3, 4, 2, 16)
    k_cache, v_cache = _pool(device, torch.bfloat16, 2, 16)
    slots = torch.tensor([5, 1, 17], device=device)
    kv_write(k, v, k_cache, v_cache, slots)
    torch.testing.assert_close(k_cache.flatten(0, 1)[slots], k, atol=0, rtol=0)
    torch.testing.assert_close(v_cache.flatten(0, 1)[slots], v, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scales", [KVScales(), KVScales(0.5, 3.0)])
def test_fp8_cache_stores_the_rounded_values(device: str, dtype: torch.dtype, scales: KVScales) -> None:
    # The bits the torch path stores: E4M3 of (the kernel's own rope(k), v) / scale, nothing else.
    rope = RotaryEmbedding(16, 10000.0).to(device)
    positions, q, k, v = _inputs(device, dtype, 5, 4, 2, 16)
    slots = torch.tensor([3, 9, -1, 0, 22], device=device)
    k_plain, v_plain = _pool(device, dtype, 2, 16)
    want_q = rotary_kv_write(positions, q, k, v, rope.inv_freq, k_plain, v_plain, slots)
    k_fp8, v_fp8 = _pool(device, torch.float8_e4m3fn, 2, 16)
    got_q = rotary_kv_write(positions, q, k, v, rope.inv_freq, k_fp8, v_fp8, slots, scales=scales)
    assert torch.equal(got_q, want_q)
    for got, plain, scale in ((k_fp8, k_plain, scales.k), (v_fp8, v_plain, scales.v)):
        assert torch.equal(got.view(torch.uint8), quantize_kv(plain, scale).view(torch.uint8))
    assert k_fp8.float().abs().sum() > 0
    k_fp8.zero_(), v_fp8.zero_()
    kv_write(k, v, k_fp8, v_fp8, slots, scales=scales)
    stored = slots[slots >= 0]
    assert torch.equal(
        k_fp8.flatten(0, 1)[stored].view(torch.uint8), quantize_kv(k[slots >= 0], scales.k).view(torch.uint8)
    )
    assert torch.equal(
        v_fp8.flatten(0, 1)[stored].view(torch.uint8), quantize_kv(v[slots >= 0], scales.v).view(torch.uint8)
    )


def test_cache_of_another_dtype_is_rejected(device: str) -> None:
    _, _, k, v = _inputs(device, torch.bfloat16, 3, 4, 2, 16)
    k_cache, v_cache = _pool(device, torch.float16, 2, 16)
    with pytest.raises(ValueError, match=r"KV cache of torch\.float16"):
        kv_write(k, v, k_cache, v_cache, torch.tensor([5, 1, 17], device=device))


def test_non_contiguous_head_dim_is_rejected(device: str) -> None:
    q = torch.randn(2, 16, 4, device=device).transpose(1, 2)
    with pytest.raises(ValueError, match="contiguous"):
        rotary(torch.zeros(2, dtype=torch.long, device=device), q, q, torch.ones(8, device=device))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_real_shapes_on_gpu() -> None:
    rope = RotaryEmbedding(128, 500000.0, _LLAMA3).to("cuda")
    positions, q, k, v = _inputs("cuda", torch.bfloat16, 513, 32, 8, 128)
    pool = torch.zeros(64, 2, 2, 16, 8, 128, dtype=torch.bfloat16, device="cuda")
    k_cache, v_cache = pool[:, 0, 0], pool[:, 0, 1]
    slots = torch.randperm(64 * 16, device="cuda")[:513]
    got_q = rotary_kv_write(positions, q, k, v, rope.inv_freq, k_cache, v_cache, slots)
    want_q, want_k = rope(positions, q, k)
    torch.testing.assert_close(got_q, want_q, atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(k_cache.flatten(0, 1)[slots], want_k, atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(v_cache.flatten(0, 1)[slots], v, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_norm_fused_before_rotary_and_cache_write(device: str, dtype: torch.dtype) -> None:
    # Qwen3: RMSNorm over every q and k head, then RoPE, then the cache write — one launch.
    rope = RotaryEmbedding(16, 10000.0).to(device)
    q_norm, k_norm = RMSNorm(16, 1e-6).to(device), RMSNorm(16, 1e-6).to(device)
    with torch.no_grad():
        q_norm.weight.copy_(torch.rand(16) + 0.5)
        k_norm.weight.copy_(torch.rand(16) + 0.5)
    q_norm, k_norm = q_norm.to(dtype), k_norm.to(dtype)
    positions, q, k, v = _inputs(device, dtype, 5, 4, 2, 16)
    k_cache, v_cache = _pool(device, dtype, 2, 16)
    slots = torch.tensor([3, 9, -1, 0, 22], device=device)
    got_q = rotary_kv_write(
        positions,
        q,
        k,
        v,
        rope.inv_freq,
        k_cache,
        v_cache,
        slots,
        qk_norm=(q_norm.weight, k_norm.weight, 1e-6),
    )
    want_q, want_k = rope(positions, q_norm(q), k_norm(k))
    torch.testing.assert_close(got_q, want_q, **_tol(dtype))
    for row, slot in enumerate(slots.tolist()):
        if slot >= 0:
            torch.testing.assert_close(k_cache[slot // 4, slot % 4], want_k[row], **_tol(dtype))
            torch.testing.assert_close(v_cache[slot // 4, slot % 4], v[row], atol=0, rtol=0)
    # Without the norm the same inputs give different q: the flag is not a no-op.
    plain_q = rotary_kv_write(positions, q, k, v, rope.inv_freq, k_cache, v_cache, slots)
    assert not torch.allclose(plain_q, got_q, **_tol(dtype))
