"""Per-entity precision, recall and F2 of our detectors on the labelled zh+en corpus, and of
Microsoft Presidio's pattern recognizers (no NLP model) on the same corpus, in the same run;
then the evasion corpus (``bench/filters/evasion.py``): recall on evasions, input and streamed,
look-alikes flagged and the false-positive rate on benign financial texts.

    .venv/bin/python -m bench.filters.quality --num 6000 --seed 0
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import click

from bench.filters.corpus import Sample, generate
from bench.filters.results import RESULTS, provenance
from filters.action import Action
from filters.detectors import builtin_detectors
from filters.normalized import normalize
from filters.scanner import Scanner

CHECKSUM_BACKED = ("payment_card", "cn_resident_id", "cn_credit_code", "iban")
PRESIDIO_TYPES = {
    "CREDIT_CARD": ("payment_card",),
    "EMAIL_ADDRESS": ("email",),
    "IBAN_CODE": ("iban",),
    "IP_ADDRESS": ("ipv4",),
    "US_SSN": ("us_ssn",),
    "PHONE_NUMBER": ("phone", "cn_mobile"),
}

Prediction = tuple[str, int, int]


def ours(samples: list[Sample]) -> list[list[Prediction]]:
    detectors = builtin_detectors()
    scanner = Scanner(detectors)
    actions = {d.name: Action.FLAG for d in detectors}
    out = []
    for sample in samples:
        norm = normalize(sample.text)
        preds = []
        for m in scanner.scan(norm.text, actions).matches:
            start, end = norm.to_original(m.start, m.end)
            preds.append((m.detector, start, end))
        out.append(preds)
    return out


def presidio(samples: list[Sample]) -> tuple[list[list[tuple[tuple[str, ...], int, int]]], list[str]]:
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UsSsnRecognizer,
    )

    recognizers = [
        CreditCardRecognizer(),
        EmailRecognizer(),
        IbanRecognizer(),
        IpRecognizer(),
        UsSsnRecognizer(),
        PhoneRecognizer(),  # phonenumbers-based, default regions; not a PatternRecognizer
    ]
    out = []
    for sample in samples:
        preds = []
        for rec in recognizers:
            for r in rec.analyze(sample.text, entities=rec.supported_entities, nlp_artifacts=None):
                if r.score > 0 and r.entity_type in PRESIDIO_TYPES:
                    preds.append((PRESIDIO_TYPES[r.entity_type], r.start, r.end))
        out.append(preds)
    return out, [type(r).__name__ for r in recognizers]


def score(
    samples: list[Sample], predictions: list[list[Any]], types: tuple[str, ...]
) -> dict[str, dict[str, float]]:
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    for sample, preds in zip(samples, predictions, strict=True):
        golds = [(e.type, e.start, e.end) for e in sample.entities]
        matched: set[int] = set()
        for ptype, start, end in preds:
            ptypes = ptype if isinstance(ptype, tuple) else (ptype,)
            hit = next(
                (i for i, (g, gs, ge) in enumerate(golds) if g in ptypes and start < ge and gs < end), None
            )
            if hit is None:
                for t in ptypes[:1]:
                    fp[t] += 1
            elif hit not in matched:
                matched.add(hit)
                tp[golds[hit][0]] += 1
        for i, (g, _, _) in enumerate(golds):
            if i not in matched:
                fn[g] += 1
    table = {}
    for t in types:
        p = tp[t] / (tp[t] + fp[t]) if tp[t] + fp[t] else 0.0
        r = tp[t] / (tp[t] + fn[t]) if tp[t] + fn[t] else 0.0
        f2 = 5 * p * r / (4 * p + r) if p + r else 0.0
        table[t] = {
            "precision": round(p, 4),
            "recall": round(r, 4),
            "f2": round(f2, 4),
            "tp": tp[t],
            "fp": fp[t],
            "fn": fn[t],
        }
    return table


def evasion_figures(seed: int) -> dict[str, Any]:
    """The evasion corpus (``bench/filters/evasion.py``) through the packaged policy's
    ``check_request``: recall on evasions, look-alikes flagged, precision, benign false positives,
    and recall on single-message evasions streamed as a response in 1-5 character chunks."""
    import random
    from pathlib import Path

    from bench.filters.evasion import Case, benign, evasions, look_alikes
    from bench.filters.evasion import score as score_cases
    from filters import FilterConfig, FilterContext, FilterPipeline

    pipeline = FilterPipeline.from_config(FilterConfig(), Path("."))
    ctx = FilterContext(roles=("user",), model="bench")
    rng = random.Random(seed)

    def found(case: Case) -> set[str]:
        return {f.type for f in pipeline.check_request(case.texts, ctx).findings}

    def streamed(case: Case) -> set[str]:
        sf, text, i = pipeline.stream(ctx), case.texts[0], 0
        while i < len(text):
            size = rng.randint(1, 5)
            sf.feed(text[i : i + size])
            i += size
        sf.finish()
        return {f.type for f in sf.findings}

    cases = {
        "evasions": evasions(seed, 600),
        "look_alikes": look_alikes(seed, 600),
        "benign": benign(seed, 1000),
    }
    recall = score_cases(cases["evasions"], found, expect=True)
    flagged = score_cases(cases["look_alikes"], found, expect=False)
    fps = score_cases(cases["benign"], found, expect=False)
    single = [c for c in cases["evasions"] if len(c.messages) == 1]
    in_stream = score_cases(single, streamed, expect=True)
    by_type: dict[str, dict[str, float]] = {}
    for kind in sorted({c.type for c in cases["evasions"]}):
        of_kind = [c for c in cases["evasions"] if c.type == kind]
        by_type[kind] = {"recall": score_cases(of_kind, found, expect=True).rate}
    return {
        "seed": seed,
        "num_evasions": recall.num_cases,
        "num_look_alikes": flagged.num_cases,
        "num_benign": fps.num_cases,
        "evasion_recall": recall.rate,
        "evasion_recall_by_type": by_type,
        "streamed_evasion_recall": in_stream.rate,
        "look_alikes_flagged": flagged.rate,
        "precision": round(recall.num_hits / max(1, recall.num_hits + flagged.num_hits), 4),
        "benign_false_positive_rate": fps.rate,
        "missed_examples": recall.missed,
        "benign_flagged_examples": fps.missed,
    }


@click.command()
@click.option("--num", default=6000, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--out", default="filters_quality.json", show_default=True, help="File name under bench/results."
)
def main(num: int, seed: int, out: str) -> None:
    samples = generate(num, seed)
    types = tuple(sorted({e.type for s in samples for e in s.entities}))
    result: dict[str, Any] = {
        **provenance("bench.filters.quality"),
        "num_samples": len(samples),
        "seed": seed,
    }
    result["num_positive"] = sum(len(s.entities) for s in samples)
    result["ours"] = score(samples, ours(samples), types)
    try:
        preds, names = presidio(samples)
        covered = tuple(t for t in types if any(t in v for v in PRESIDIO_TYPES.values()))
        result["presidio"] = score(samples, preds, covered)
        result["presidio_recognizers"] = names
        import presidio_analyzer

        result["presidio_version"] = getattr(presidio_analyzer, "__version__", "2.2.x")
    except ImportError as exc:
        result["presidio"] = f"not installed: {exc}"
    targets = {t: (0.99 if t in CHECKSUM_BACKED else 0.95) for t in types}
    result["targets"] = targets
    result["meets_targets"] = {
        t: result["ours"][t]["precision"] >= targets[t] and result["ours"][t]["recall"] >= targets[t]
        for t in types
        if t in CHECKSUM_BACKED or t in ("phone", "cn_mobile", "email")
    }
    result["evasion"] = evasion_figures(seed)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
