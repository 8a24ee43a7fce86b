"""Speed of the content filter on one core, with Presidio's pattern recognizers as the peer.

    .venv/bin/python -m bench.filters.speed

- all detectors (normalization, every built-in detector, keyword and injection lists of the
  packaged policy) on a 2 KB mixed zh+en prompt: p50 / p99 per scan;
- Presidio's pattern recognizers (credit card, e-mail, IBAN, IP, US SSN) on the same prompt;
- keyword matching, 10,000 terms, mixed Chinese text: chars/s for ahocorasick_rs and
  pyahocorasick automata, and for our KeywordDetector (normalization and skeleton included);
- the stream filter: added time per chunk (4-character chunks) and the hold-back length, and
  per delta size against the windowed filter it replaced (``bench.filters.stream``).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.filters.results import RESULTS, pin_one_core, provenance
from filters import FilterConfig, FilterContext, FilterPipeline
from filters.detectors.keyword import KeywordDetector, skeleton
from filters.normalized import normalize

CTX = FilterContext(roles=("user",), model="qwen")


def prompt_2kb(rng: random.Random) -> str:
    parts = [
        "您好，我想咨询一下账户的问题。我的银行卡号是6222 0212 3456 7890 128，绑定的手机是13812345678。",
        "Please also update my email to zhang.san@example.com and check the server 10.1.2.3 logs. ",
        "昨天在网上银行转账的时候系统提示风控拦截，客服说需要提供身份证号11010519491231002X进行核实。",
        "The wire to IBAN DE89 3704 0044 0532 0130 00 failed twice; my SSN is 078-05-1120 if needed. ",
        "另外我们公司的统一社会信用代码是91350100M000100Y43，麻烦一起更新到对公账户资料里面。",
        "Thanks a lot for your help, and sorry for the long message — our treasury team is waiting. ",
    ]
    text = ""
    while len(text.encode()) < 2048:
        text += rng.choice(parts)
    encoded = text.encode()[:2048]
    return encoded.decode(errors="ignore")


def timed(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    for _ in range(20):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples) * 1e3, 4),
        "p99_ms": round(samples[int(len(samples) * 0.99) - 1] * 1e3, 4),
        "mean_ms": round(statistics.fmean(samples) * 1e3, 4),
    }


def bench_pipeline(pipeline: FilterPipeline, prompt: str) -> dict[str, Any]:
    ruleset = pipeline.ruleset
    actions = ruleset.actions_for(pipeline_direction(), CTX)
    norm = normalize(prompt)
    per_detector = {}
    for d in ruleset.scanner.detectors:
        per_detector[d.name] = timed(lambda d=d: d.scan(norm.text), 300)["p50_ms"]
    return {
        "prompt_chars": len(prompt),
        "prompt_bytes": len(prompt.encode()),
        "check_request": timed(lambda: pipeline.check_request([prompt], CTX), 2000),
        "scan_only": timed(lambda: ruleset.scanner.scan(normalize(prompt).text, actions), 2000),
        "normalize": timed(lambda: normalize(prompt), 2000),
        "per_detector_p50_ms": per_detector,
    }


def pipeline_direction() -> Any:
    from filters.action import Direction

    return Direction.REQUEST


def bench_presidio(prompt: str) -> dict[str, Any] | str:
    try:
        from presidio_analyzer.predefined_recognizers import (
            CreditCardRecognizer,
            EmailRecognizer,
            IbanRecognizer,
            IpRecognizer,
            UsSsnRecognizer,
        )
    except ImportError as exc:
        return f"not installed: {exc}"
    recs = [CreditCardRecognizer(), EmailRecognizer(), IbanRecognizer(), IpRecognizer(), UsSsnRecognizer()]

    def run() -> None:
        for rec in recs:
            rec.analyze(prompt, entities=rec.supported_entities, nlp_artifacts=None)

    return {"recognizers": [type(r).__name__ for r in recs], **timed(run, 500)}


def bench_keywords(rng: random.Random) -> dict[str, Any]:
    import ahocorasick
    import ahocorasick_rs

    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    terms = set()
    while len(terms) < 9000:
        terms.add("".join(rng.choice(cjk) for _ in range(rng.randint(2, 6))))
    while len(terms) < 10000:
        terms.add("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 10))))
    term_list = sorted(terms)
    pool = [*cjk[:1500], *"abcdefghij0123456789 ，。"]
    text = "".join(rng.choice(pool) if rng.random() < 0.3 else rng.choice(cjk) for _ in range(1_000_000))
    skel = skeleton(normalize(text).text)
    rs = ahocorasick_rs.AhoCorasick(term_list)
    py = ahocorasick.Automaton()
    for i, t in enumerate(term_list):
        py.add_word(t, i)
    py.make_automaton()
    detector = KeywordDetector("keyword", term_list)

    def rate(fn: Callable[[], object], n: int) -> float:
        best = min(_once(fn) for _ in range(3))
        return round(n / best / 1e6, 2)

    return {
        "num_terms": len(term_list),
        "text_chars": len(text),
        "num_hits": len(detector.scan(normalize(text).text)),
        "ahocorasick_rs_mchars_per_s": rate(
            lambda: rs.find_matches_as_indexes(skel, overlapping=True), len(skel)
        ),
        "pyahocorasick_mchars_per_s": rate(lambda: sum(1 for _ in py.iter(skel)), len(skel)),
        "keyword_detector_scan_mchars_per_s": rate(lambda: detector.scan(text), len(text)),
        "keyword_detector_with_normalize_mchars_per_s": rate(
            lambda: detector.scan(normalize(text).text), len(text)
        ),
    }


def _once(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_stream(pipeline: FilterPipeline, response: str, chunk: int = 4) -> dict[str, Any]:
    chunks = [response[i : i + chunk] for i in range(0, len(response), chunk)]
    per_feed: list[float] = []
    first_release_chunk = None
    for _ in range(30):
        sf = pipeline.stream(CTX)
        for i, c in enumerate(chunks):
            t0 = time.perf_counter()
            step = sf.feed(c)
            per_feed.append(time.perf_counter() - t0)
            if first_release_chunk is None and step.release:
                first_release_chunk = i
        sf.finish()
    per_feed.sort()
    sf = pipeline.stream(CTX)
    return {
        "chunk_chars": chunk,
        "hold_back_chars": sf.hold_len,
        "first_release_after_chunks": first_release_chunk,
        "per_chunk_p50_ms": round(statistics.median(per_feed) * 1e3, 4),
        "per_chunk_p99_ms": round(per_feed[int(len(per_feed) * 0.99) - 1] * 1e3, 4),
        "first_chunk_ms": round(per_feed[0] * 1e3, 4),
    }


def main() -> None:
    pin_one_core()
    rng = random.Random(0)
    pipeline = FilterPipeline.from_config(FilterConfig(), Path("."))
    prompt = prompt_2kb(rng)
    result: dict[str, Any] = {**provenance("bench.filters.speed"), "one_core": True}
    result["ours_2kb"] = bench_pipeline(pipeline, prompt)
    result["presidio_2kb"] = bench_presidio(prompt)
    result["keywords"] = bench_keywords(rng)
    result["stream"] = bench_stream(pipeline, prompt)
    from bench.filters.stream import filter_costs  # imports this module: not at the top

    result["stream_by_delta"] = filter_costs(pipeline, prompt, repeat=3)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "filters_speed.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
