"""A token quota holds to within one request's ``max_tokens`` (issue 18, #9).

The prompt's cost used to be guessed as bytes / 3 and corrected after the answer, so concurrent
requests with punctuation-heavy prompts (about one token per byte) overran the quota ~3 times.
Now the engine counts the prompt with the model's own template and tokenizer before the
reservation. Real gateway, real demo engine with its real BPE tokenizer.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.auth.dev_issuer import DevIssuer

pytestmark = pytest.mark.integration

TOKENS_PER_WINDOW = 3000
MAX_TOKENS = 8
NUM_REQUESTS = 24


def _punctuation_prompt(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("!?.,;:-()[]{}'\"/\\|@#$%^&*+=<>~`") for _ in range(400))


def test_concurrent_punctuation_heavy_requests_stay_within_the_token_quota(
    tmp_path: Path, serve: Any
) -> None:
    env = {
        "STRONGROOM_QUOTA__DEFAULT": (
            f"{{requests_per_minute = 10000, tokens_per_minute = {TOKENS_PER_WINDOW}, "
            "concurrent_requests = 64, max_tokens_ceiling = 1000}"
        ),
        "STRONGROOM_QUOTA__WINDOW_S": "86400",  # one window for the whole test
    }
    with serve(tmp_path, extra_env=env) as gw:
        token = DevIssuer.load_or_create(gw.data_dir).mint("ann", ["admin"])
        headers = {"authorization": f"Bearer {token}"}

        async def one(client: httpx.AsyncClient, i: int) -> httpx.Response:
            body = {
                "model": "demo-chat",
                "messages": [{"role": "user", "content": _punctuation_prompt(i)}],
                "max_tokens": MAX_TOKENS,
            }
            return await client.post(f"{gw.v1}/chat/completions", json=body, headers=headers)

        async def burst() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=NUM_REQUESTS)
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                return await asyncio.gather(*(one(client, i) for i in range(NUM_REQUESTS)))

        answers = asyncio.run(burst())
    served = [a.json()["usage"] for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(served) + len(refused) == NUM_REQUESTS, {a.status_code for a in answers}
    assert refused and served, "the burst must reach the limit for the test to mean anything"
    # The prompts really are expensive: bytes / 3 would have guessed about a third of this.
    assert min(u["prompt_tokens"] for u in served) > 2 * 400 / 3
    used = sum(u["total_tokens"] for u in served)
    assert used <= TOKENS_PER_WINDOW + MAX_TOKENS, (used, len(served))
