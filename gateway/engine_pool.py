"""The engine instances behind the gateway and which of them host which model.

A background task refreshes each engine's model list; a request goes to the least-busy healthy
engine that hosts its model. An engine that stops answering drops out until it answers again,
so a dead engine costs a 503, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence

import msgspec

from audit.errors import AuditUnavailableError
from audit.event import AuditEvent
from audit.sink import AuditSink
from engine.client import EngineClient
from engine.errors import EngineError
from engine.protocol import ModelCard

log = logging.getLogger("strongroom.gateway")

__all__ = ["EnginePool"]


class _Member:
    def __init__(self, client: EngineClient) -> None:
        self.client = client
        self.models: dict[str, ModelCard] = {}
        self.failed_models: dict[str, str] = {}
        self.instance_id = ""
        self.healthy = False
        self.in_flight = 0
        self.stats: dict[str, float] = {}
        self.num_audited = 0


class EnginePool:
    """Routes by model name over a fixed list of engine clients."""

    def __init__(
        self, clients: Sequence[EngineClient], *, refresh_s: float = 5.0, audit: AuditSink | None = None
    ) -> None:
        self._members = [_Member(c) for c in clients]
        self._audit = audit
        self._refresh_s = refresh_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._refresh_loop(), name="engine-pool-refresh")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for m in self._members:
            await m.client.aclose()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self.refresh()
            except Exception:  # the loop must outlive any one bad answer
                log.exception("engine pool refresh failed")

    async def refresh(self) -> None:
        await asyncio.gather(*(self._refresh_one(m) for m in self._members))

    async def _refresh_one(self, member: _Member) -> None:
        try:
            info = await member.client.info()
        except EngineError as exc:
            if member.healthy:
                log.warning("engine %s is down: %s", member.client.base_url, exc)
            member.healthy = False
            return
        if info.instance_id != member.instance_id:
            member.num_audited = 0
        await self._record_engine_events(member, info.instance_id, info.audit_events)
        member.models = {card.name: card for card in info.models}
        member.failed_models = dict(info.failed_models)
        member.instance_id = info.instance_id
        member.stats = dict(info.stats)
        member.healthy = True

    async def _record_engine_events(
        self, member: _Member, instance_id: str, events: list[AuditEvent]
    ) -> None:
        """Copy the engine's key operations (model unseals) into the audit log, each once."""
        if self._audit is None:
            return
        for event in events[member.num_audited :]:
            try:
                await self._audit.append(
                    msgspec.structs.replace(event, engine_instance=event.engine_instance or instance_id)
                )
            except AuditUnavailableError:
                return  # retried on the next refresh
            member.num_audited += 1

    def mark_down(self, client: EngineClient) -> None:
        """Called when a request found the engine unreachable; the next refresh may revive it."""
        for m in self._members:
            if m.client is client:
                m.healthy = False

    @property
    def is_ready(self) -> bool:
        return any(m.healthy and m.models for m in self._members)

    def models(self) -> dict[str, ModelCard]:
        """Every model some healthy engine hosts."""
        out: dict[str, ModelCard] = {}
        for m in self._members:
            if m.healthy:
                for name, card in m.models.items():
                    out.setdefault(name, card)
        return out

    def known_model(self, name: str) -> bool:
        """Hosted now, or configured on an engine that is down (503 rather than 404)."""
        return any(name in m.models or name in m.failed_models for m in self._members)

    def pick(self, model: str) -> tuple[EngineClient, str] | None:
        """The least-busy healthy engine hosting ``model`` and its instance id, or None."""
        candidates = [m for m in self._members if m.healthy and model in m.models]
        if not candidates:
            return None
        best = min(candidates, key=lambda m: m.in_flight)
        return best.client, best.instance_id

    @contextlib.contextmanager
    def track(self, client: EngineClient) -> Iterator[None]:
        member = next(m for m in self._members if m.client is client)
        member.in_flight += 1
        try:
            yield
        finally:
            member.in_flight -= 1

    def describe(self) -> list[dict[str, object]]:
        return [
            {
                "url": m.client.base_url,
                "instance_id": m.instance_id,
                "healthy": m.healthy,
                "models": sorted(m.models),
                "failed_models": m.failed_models,
                "in_flight": m.in_flight,
                "stats": m.stats,
            }
            for m in self._members
        ]
