"""A cached JWKS endpoint: keys by kid, refreshed rarely, kept through outages for a bounded time.

Timeline of one cache (``cache_s`` fresh, ``cooldown_s`` between fetches, ``max_stale_s`` outage)::

    good fetch ─── fresh: serve from memory ───┬── stale: refetch (at most once per cooldown)
                                               │     ok   -> fresh again
                                               │     fail -> keep old keys ...
    ──────────────── max_stale_s after the last good fetch ──> drop keys, deny (fail closed)

An unknown kid triggers a refetch, also at most once per cooldown, so a stream of tokens with
random kids cannot turn the gateway into a load generator against the IdP. A successful fetch
replaces the whole set: a key the IdP withdrew stops verifying at the next fetch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import httpx

from gateway.auth.verification_key import KeyFormatError, VerificationKey

__all__ = ["JwksCache", "JwksUnavailableError", "UnknownKeyError"]

_log = logging.getLogger(__name__)
_MAX_JWKS_BYTES = 1 << 20


class JwksUnavailableError(Exception):
    """No usable key set: never fetched successfully, or the last good fetch is too old."""


class UnknownKeyError(Exception):
    """The key set is current but holds no key with the requested kid."""


class JwksCache:
    """Keys of one JWKS URL. Safe for concurrent use within one event loop."""

    def __init__(
        self,
        url: str,
        http: httpx.AsyncClient,
        *,
        cache_s: float = 300.0,
        refetch_cooldown_s: float = 30.0,
        max_stale_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._url = url
        self._http = http
        self._cache_s = cache_s
        self._cooldown_s = refetch_cooldown_s
        self._max_stale_s = max_stale_s
        self._clock = clock
        self._keys: dict[str, VerificationKey] | None = None
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._lock = asyncio.Lock()
        self.num_fetches = 0
        """HTTP requests made so far (successful or not)."""

    async def key(self, kid: str) -> VerificationKey:
        """The key with ``kid``; raises ``UnknownKeyError`` or ``JwksUnavailableError``."""
        keys = await self.keys()
        if kid in keys:
            return keys[kid]
        if self._clock() - self._attempted_at >= self._cooldown_s:
            await self._fetch_once(after=self._attempted_at)
            keys = self._usable_keys()
            if kid in keys:
                return keys[kid]
        raise UnknownKeyError(kid)

    async def keys(self) -> dict[str, VerificationKey]:
        """All current keys by kid, fetching first if the set is missing or past ``cache_s``."""
        now = self._clock()
        is_stale = now - self._fetched_at >= self._cache_s
        if is_stale and now - self._attempted_at >= self._cooldown_s:
            await self._fetch_once(after=self._attempted_at)
        return self._usable_keys()

    def _usable_keys(self) -> dict[str, VerificationKey]:
        if self._keys is None:
            raise JwksUnavailableError("JWKS never fetched successfully")
        if self._clock() - self._fetched_at > self._max_stale_s:
            self._keys = None
            raise JwksUnavailableError("JWKS outage longer than max_stale_s")
        return self._keys

    async def _fetch_once(self, *, after: float) -> None:
        """Fetch unless another task already attempted a fetch since ``after``."""
        async with self._lock:
            if self._attempted_at > after:
                return
            self._attempted_at = self._clock()
            self.num_fetches += 1
            try:
                keys = await self._download()
            except (httpx.HTTPError, ValueError) as exc:
                _log.warning("JWKS fetch from %s failed: %s", self._url, type(exc).__name__)
                return
            self._keys = keys
            self._fetched_at = self._attempted_at

    async def _download(self) -> dict[str, VerificationKey]:
        response = await self._http.get(self._url, follow_redirects=False)
        response.raise_for_status()
        if len(response.content) > _MAX_JWKS_BYTES:
            raise ValueError("JWKS document too large")
        document = json.loads(response.content)
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise ValueError("JWKS document has no 'keys' list")
        keys: dict[str, VerificationKey] = {}
        for jwk in document["keys"]:
            if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
                continue
            try:
                key = VerificationKey.from_jwk(jwk)
            except KeyFormatError as exc:
                _log.warning("JWKS %s: skipping key: %s", self._url, exc)
                continue
            keys.setdefault(key.kid, key)
        return keys
