"""The one-pass Gumbel-max sampling kernel: greedy rows exact, sampled rows from softmax(logits / T)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.kernels import gumbel_argmax


def test_greedy_rows_are_the_argmax_with_the_lowest_index_on_ties(device: str) -> None:
    logits = torch.randn(3, 10_000)
    logits[1, 7] = logits[1, 9_500] = 50.0  # a tie across chunks: the lower index wins
    logits[2, 900] = logits[2, 901] = 60.0  # a tie inside one block
    temperature = torch.zeros(3)
    got = gumbel_argmax(logits.to(device), temperature.to(device), seed=1).cpu()
    assert got.tolist() == logits.argmax(dim=-1).tolist()
    assert got[1] == 7 and got[2] == 900


def test_sampled_frequencies_follow_the_tempered_softmax(device: str) -> None:
    vocab, rows, temperature = 6, 600, 0.7
    row = torch.tensor([1.0, 0.5, -0.3, 2.0, float("-inf"), 0.0])
    logits = row.expand(rows, vocab).contiguous()
    got = gumbel_argmax(logits.to(device), torch.full((rows,), temperature).to(device), seed=7).cpu()
    want = torch.softmax(row / temperature, dim=0)
    counts = torch.bincount(got, minlength=vocab).float()
    assert counts[4] == 0  # a -inf logit is never drawn
    # Each frequency within 5 standard errors of its probability (binomial); a biased or
    # noiseless kernel (always token 3) fails this by far.
    for p, c in zip(want.tolist(), counts.tolist(), strict=True):
        assert abs(c / rows - p) <= 5 * math.sqrt(p * (1 - p) / rows) + 1e-9


def test_same_seed_same_tokens_other_seed_other_tokens(device: str) -> None:
    logits = torch.zeros(64, 500).to(device)  # uniform: every token as likely
    temperature = torch.ones(64).to(device)
    a = gumbel_argmax(logits, temperature, seed=3)
    b = gumbel_argmax(logits, temperature, seed=3)
    c = gumbel_argmax(logits, temperature, seed=4)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert len(set(a.tolist())) > 32  # rows draw independently, not one shared token


def test_mixed_rows_and_low_precision_logits(device: str) -> None:
    logits = (torch.randn(4, 1500) * 4).to(torch.bfloat16)
    logits[0, 123] = 100.0  # a sampled row whose top token dominates still draws it
    temperature = torch.tensor([1.0, 0.0, 0.5, 0.0])
    got = gumbel_argmax(logits.to(device), temperature.to(device), seed=11).cpu()
    assert got.dtype == torch.long and got.shape == (4,)
    assert got[0] == 123
    assert got[1] == logits[1].float().argmax() and got[3] == logits[3].float().argmax()


def test_bad_shapes_are_refused(device: str) -> None:
    logits = torch.randn(3, 10).to(device)
    with pytest.raises(ValueError, match="temperature"):
        gumbel_argmax(logits, torch.ones(2).to(device), seed=0)
    with pytest.raises(ValueError, match="contiguous"):
        gumbel_argmax(logits.t(), torch.ones(10).to(device), seed=0)
    assert gumbel_argmax(torch.empty(0, 10).to(device), torch.empty(0).to(device), seed=0).shape == (0,)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_real_vocab_on_gpu() -> None:
    vocab, rows = 151_936, 4096
    logits = torch.randn(256, vocab, device="cuda")
    greedy = gumbel_argmax(logits, torch.zeros(256, device="cuda"), seed=0)
    assert torch.equal(greedy, logits.argmax(dim=-1))
    # Six live tokens spread over the chunks of a real vocabulary, the rest -inf.
    cols = torch.tensor([0, 9000, 40_000, 80_000, 120_000, vocab - 1])
    values = torch.tensor([1.0, 0.5, -0.3, 2.0, 0.2, 0.0])
    sparse = torch.full((rows, vocab), float("-inf"), device="cuda")
    sparse[:, cols.cuda()] = values.cuda()
    got = gumbel_argmax(sparse, torch.full((rows,), 0.6, device="cuda"), seed=5).cpu()
    want = torch.softmax(values / 0.6, dim=0)
    for col, p in zip(cols.tolist(), want.tolist(), strict=True):
        freq = (got == col).float().mean().item()
        assert abs(freq - p) <= 5 * math.sqrt(p * (1 - p) / rows)
    assert torch.isin(got, cols).all()


def test_the_sampler_route_follows_its_generator_and_skips_what_it_cannot_serve(device: str) -> None:
    from engine.core.sampling_params import SamplingParams
    from engine.sampling import Sampler, SamplingRow
    from engine.sampling.sampler import _single_pass

    plain = SamplingRow(params=SamplingParams(temperature=0.8), prompt_token_ids=(), output_token_ids=())
    greedy = SamplingRow(params=SamplingParams(temperature=0), prompt_token_ids=(), output_token_ids=())
    top_k = SamplingRow(
        params=SamplingParams(temperature=0.8, top_k=5), prompt_token_ids=(), output_token_ids=()
    )
    seeded = SamplingRow(
        params=SamplingParams(temperature=0.8, seed=1),
        prompt_token_ids=(),
        output_token_ids=(),
        generator=torch.Generator().manual_seed(1),
    )
    assert _single_pass(plain) and _single_pass(greedy)
    assert not _single_pass(top_k) and not _single_pass(seeded)

    logits = torch.zeros(32, 300).to(device)
    rows = [plain] * 31 + [greedy]

    def draw(seed: int) -> list[int]:
        sampler = Sampler(torch.Generator().manual_seed(seed))
        out: list[int] = sampler._gumbel(logits, rows, [r is greedy for r in rows]).tolist()
        return out

    first = draw(7)
    assert first == draw(7)  # the engine's configured seed decides unseeded draws
    assert first != draw(8)
    assert first[-1] == 0  # the greedy row: argmax of equal logits is the first
