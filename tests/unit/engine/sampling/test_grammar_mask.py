"""The grammar mask on CPU: only grammar-allowed tokens survive, only on constrained rows."""

from __future__ import annotations

import json

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.core.structured_output import StructuredOutput
from engine.errors import InvalidRequestError
from engine.loading.demo import build_demo_files
from engine.sampling import GrammarCompiler, Sampler, SamplingRow
from engine.sampling.grammar_mask import GrammarMask, unpack_bits
from engine.sampling.mask_buffer import MaskBuffer
from engine.text.tokenizer import Tokenizer

_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[GrammarCompiler, Tokenizer, int]:
    from tokenizers import Tokenizer as HFTokenizer

    files = build_demo_files("demo-chat")
    config = json.loads(files["config.json"])
    hf = HFTokenizer.from_str(files["tokenizer.json"].decode())
    compiler = GrammarCompiler(hf.to_str(), config["vocab_size"], {config["eos_token_id"]})
    return compiler, hf, config["eos_token_id"]  # type: ignore[return-value]


def _allowed(compiler: GrammarCompiler, matcher, vocab: int) -> set[int]:  # type: ignore[no-untyped-def]
    logits = torch.zeros(1, vocab)
    GrammarMask().apply(logits, [matcher])
    return set(torch.nonzero(logits[0] == 0).flatten().tolist())


def test_mask_allows_exactly_the_grammar_continuations(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, hf, eos = demo
    matcher = compiler.matcher(StructuredOutput.json_schema(_SCHEMA))
    allowed = _allowed(compiler, matcher, compiler.vocab_size)
    texts = {hf.decode([t]) for t in allowed}
    assert texts and all('{"ok":'.startswith(t) for t in texts), texts
    assert eos not in allowed  # nothing to end yet
    for token in hf.encode('{"ok":true}').ids:
        matcher.accept(token)
    assert matcher.is_complete
    assert _allowed(compiler, matcher, compiler.vocab_size) == {eos}  # only EOS once complete


def test_only_constrained_rows_are_touched(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, _, _ = demo
    logits = torch.randn(3, compiler.vocab_size)
    before = logits.clone()
    matcher = compiler.matcher(StructuredOutput.json_object())
    index = GrammarMask().apply(logits, [None, matcher, None])
    assert index is not None and index.tolist() == [1]
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    assert torch.isinf(logits[1]).sum() > compiler.vocab_size // 2
    assert GrammarMask().apply(logits, [None, None, None]) is None


def test_batched_fill_matches_one_by_one(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, hf, _ = demo
    matchers = [compiler.matcher(StructuredOutput.json_schema(_SCHEMA)) for _ in range(4)]
    for token in hf.encode('{"ok":').ids:
        matchers[1].accept(token)
    batched = torch.zeros(4, compiler.vocab_size)
    GrammarMask().apply(batched, matchers)
    for i, m in enumerate(matchers):
        assert _allowed(compiler, m, compiler.vocab_size) == set(
            torch.nonzero(batched[i] == 0).flatten().tolist()
        )


def test_greedy_sampler_picks_the_best_allowed_token(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, hf, _ = demo
    logits = torch.zeros(2, compiler.vocab_size)
    logits[:, hf.token_to_id("x")] = 10.0  # the free favourite, not JSON
    brace = hf.token_to_id("{")
    logits[:, brace] = 5.0
    params = SamplingParams(temperature=0)
    rows = [
        SamplingRow(
            params=params,
            prompt_token_ids=(),
            output_token_ids=(),
            grammar=compiler.matcher(StructuredOutput.json_object()),
        ),
        SamplingRow(params=params, prompt_token_ids=(), output_token_ids=()),
    ]
    argmax = logits.argmax(dim=-1)
    out = Sampler()(logits, rows, argmax)
    assert out.token_ids.tolist() == [brace, hf.token_to_id("x")]


def test_invalid_schema_names_response_format(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, _, _ = demo
    with pytest.raises(InvalidRequestError, match="strin") as err:
        compiler.matcher(
            StructuredOutput.json_schema({"type": "object", "properties": {"a": {"type": "strin"}}})
        )
    assert err.value.param == "response_format"
    with pytest.raises(InvalidRequestError) as err:
        compiler.matcher(StructuredOutput.lark("start: (("))
    assert err.value.param == "response_format"


def test_compiled_grammars_are_cached_by_schema_hash(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, _, _ = demo
    schema = {"type": "object", "properties": {"cache_probe": {"type": "integer"}}}  # no other test's
    before = compiler.num_cached
    compiler.matcher(StructuredOutput.json_schema(schema))
    compiler.matcher(StructuredOutput.json_schema(dict(schema)))
    assert compiler.num_cached == before + 1  # the equal schema reused the first compilation
    compiler.matcher(StructuredOutput.json_schema({**schema, "required": ["cache_probe"]}))
    assert compiler.num_cached == before + 2
    assert StructuredOutput.json_schema(_SCHEMA).key != StructuredOutput.json_object().key


def test_structured_output_validates_its_shape() -> None:
    with pytest.raises(InvalidRequestError):
        StructuredOutput(kind="json_schema")
    with pytest.raises(InvalidRequestError):
        StructuredOutput(kind="json_object", grammar="start: 'a'")
    with pytest.raises(InvalidRequestError, match="ignore_eos"):
        SamplingParams(structured=StructuredOutput.json_object(), ignore_eos=True)
    assert "ok" not in repr(StructuredOutput.json_schema(_SCHEMA))


def test_lark_grammar_is_a_general_seam(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, hf, _ = demo
    matcher = compiler.matcher(StructuredOutput.lark('start: "<call>" %json{"type": "integer"} "</call>"'))
    for token in hf.encode("<call>42</call>").ids:
        matcher.accept(token)
    assert matcher.is_complete


def test_host_path_matches_the_unpacked_reference() -> None:
    # The CPU path unpacks with numpy; the reference with torch ops: same bits either way.
    words = torch.randint(
        -(2**31), 2**31 - 1, (3, 5), dtype=torch.int32, generator=torch.Generator().manual_seed(0)
    )
    vocab = 5 * 32 - 7
    buffer = MaskBuffer(torch.device("cpu"), vocab)
    buffer.reserve(3)
    buffer.host[:3] = words
    logits = torch.randn(4, vocab)
    want = logits.clone()
    allowed = unpack_bits(words, torch.arange(32, dtype=torch.int32), vocab)
    want[2] = want[2].masked_fill(~allowed[0], float("-inf"))
    want[0] = want[0].masked_fill(~allowed[2], float("-inf"))
    GrammarMask._apply_on_host(logits, buffer, [2, -1, 0])
    assert torch.equal(logits, want)
    assert allowed[0, 0].item() == bool(words[0, 0].item() & 1)


def _masked(matchers, vocab: int, mask: GrammarMask, device: str = "cpu") -> torch.Tensor:  # type: ignore[no-untyped-def]
    logits = torch.zeros(len(matchers), vocab, device=device)
    mask.apply(logits, matchers)
    return torch.isinf(logits).cpu()


def test_prefetched_masks_are_those_of_a_fill_at_apply(demo, device: str) -> None:  # type: ignore[no-untyped-def]
    compiler, hf, _ = demo
    vocab = compiler.vocab_size
    spec = StructuredOutput.json_schema(_SCHEMA)
    ahead = [compiler.matcher(spec) for _ in range(4)]
    fresh = [compiler.matcher(spec) for _ in range(4)]
    prefix = hf.encode('{"ok":').ids
    for token in prefix:
        ahead[1].accept(token)
        fresh[1].accept(token)
    mask = GrammarMask()
    # Prefetched: rows 0, 1 and 3 and a sequence that left the batch; row 2 is new this step.
    gone = compiler.matcher(spec)
    mask.prefetch([ahead[3], ahead[1], gone, ahead[0]], torch.device(device))
    ahead[0].accept(prefix[0])  # moved on after the prefetch began: its mask is filled again
    fresh[0].accept(prefix[0])
    batch = [ahead[0], None, ahead[1], ahead[2], ahead[3]]
    got = _masked(batch, vocab, mask, device)
    want = _masked([fresh[0], None, fresh[1], fresh[2], fresh[3]], vocab, GrammarMask(), device)
    assert torch.equal(got, want)
    assert not got[1].any() and got[0].sum() != got[2].sum()  # the free row, two different places
    # Nothing prefetched is left over for the call after.
    assert torch.equal(_masked(batch, vocab, mask, device), want)


def test_a_matcher_waits_for_a_fill_that_reads_it(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, hf, _ = demo
    matcher = compiler.matcher(StructuredOutput.json_schema(_SCHEMA))
    mask = GrammarMask()
    mask.prefetch([matcher], torch.device("cpu"))
    reading = matcher.reading
    assert reading is not None
    matcher.accept(hf.encode("{").ids[0])
    assert reading.done() and matcher.reading is None and matcher.num_accepted == 1


def test_one_of_takes_a_document_of_either_schema(demo) -> None:  # type: ignore[no-untyped-def]
    compiler, hf, _ = demo
    call = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    spec = StructuredOutput.one_of([_SCHEMA, call])
    for doc in ('{"ok":false}', '{"city":"Bern"}'):
        matcher = compiler.matcher(spec)
        for token in hf.encode(doc).ids:
            matcher.accept(token)
        assert matcher.is_complete
    with pytest.raises(RuntimeError, match="refused"):
        matcher = compiler.matcher(spec)
        for token in hf.encode('{"city":true}').ids:
            matcher.accept(token)
