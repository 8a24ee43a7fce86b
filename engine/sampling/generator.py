"""Per-sequence random generators, so a seeded request's tokens do not depend on its neighbours."""

from __future__ import annotations

import hashlib

import torch

_SEED_MASK = (1 << 63) - 1


def derive_seed(seed: int, index: int) -> int:
    """The seed of child ``index`` of an ``n > 1`` request; child 0 keeps the request's seed.

    Hashing (rather than ``seed + index``) keeps request seed 1's second child apart from request
    seed 2's first.
    """
    if index < 0:
        raise ValueError("child index must be >= 0")
    if index == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & _SEED_MASK


def make_generator(seed: int | None, index: int, device: torch.device | str) -> torch.Generator | None:
    """A generator for child ``index`` of a request, or None when the request has no seed."""
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    # manual_seed takes any Python int but wraps negatives; mask keeps distinct seeds distinct.
    generator.manual_seed(derive_seed(seed, index) & _SEED_MASK)
    return generator
