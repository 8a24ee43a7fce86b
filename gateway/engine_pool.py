"""The engine instances behind the gateway and which of them host which model.

A request goes to the least-busy healthy engine that hosts its model. Two loops keep that true:

- a heartbeat per engine (``Heartbeat``: a health probe every ``interval_s``, each bounded by
  ``timeout_s``) takes an engine out of service after ``misses`` silent probes in a row, or at
  once when the local supervisor reports its process gone, and aborts every request in flight on
  it, so a dead or hung engine costs a fast 503 or a stream's error event, never a wait; the
  same probe puts an engine back within one interval of its answering again;
- a slower refresh re-reads each engine's model list, stats and key-operation events. A slow
  answer there never takes an engine out of service: a busy engine is not a dead one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

import msgspec

from audit.errors import AuditUnavailableError
from common.audit_event import AuditEvent
from common.audit_sink import AuditSink
from engine.errors import EngineError
from engine.serving.client import EngineClient
from engine.serving.protocol import KeyOperationEvent, ModelCard
from keys.key_audit import KeyOperation

log = logging.getLogger("strongroom.gateway")

__all__ = ["EnginePool", "Heartbeat", "ProcessProbe"]

ProcessProbe = Callable[[str], bool]
"""False when the engine at this URL is known to have exited (the local supervisor knows at once)."""


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True):
    interval_s: float = 0.25
    """Pause between two health probes of one engine."""
    timeout_s: float = 0.75
    """A probe with no answer within this long is a miss."""
    misses: int = 2
    """Misses in a row that take an engine out of service (a hang is noticed within about
    ``misses * (interval_s + timeout_s)``)."""


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
        self.num_missed = 0


class EnginePool:
    """Routes by model name over a fixed list of engine clients."""

    def __init__(
        self,
        clients: Sequence[EngineClient],
        *,
        refresh_s: float = 5.0,
        heartbeat: Heartbeat | None = None,
        is_process_alive: ProcessProbe | None = None,
        audit: AuditSink | None = None,
    ) -> None:
        self._members = [_Member(c) for c in clients]
        self._audit = audit
        self._refresh_s = refresh_s
        self._heartbeat = heartbeat or Heartbeat()
        self._is_process_alive = is_process_alive
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.refresh()
        self._tasks = [asyncio.create_task(self._refresh_loop(), name="engine-pool-refresh")]
        self._tasks += [
            asyncio.create_task(self._heartbeat_loop(m), name=f"engine-heartbeat-{i}")
            for i, m in enumerate(self._members)
        ]

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for m in self._members:
            await m.client.aclose()

    async def _heartbeat_loop(self, member: _Member) -> None:
        beat = self._heartbeat
        while True:
            await asyncio.sleep(beat.interval_s)
            try:
                await self._beat(member, beat)
            except Exception:  # the loop must outlive any one bad answer
                log.exception("engine heartbeat failed")

    async def _beat(self, member: _Member, beat: Heartbeat) -> None:
        exited = self._exited(member)
        if not exited and await member.client.is_ready(beat.timeout_s):
            member.num_missed = 0
            if not member.healthy:
                await self._refresh_one(member, reviving=True)
            return
        member.num_missed += 1
        if member.healthy and (exited or member.num_missed >= beat.misses):
            why = "its process exited" if exited else f"{member.num_missed} health probes unanswered"
            self._take_down(member, why)

    def _runs(self, member: _Member) -> bool:
        """False, and the member out of service, once its supervisor says its process exited.

        Asked on every routing decision, not only by the heartbeat: a probe that started just
        before the death was known connects to the socket the supervisor keeps and waits its whole
        timeout, so the heartbeat alone can take ``interval + timeout`` (a second) to see an exit
        the supervisor already knows of. The question costs one ``poll`` or ``stat``."""
        if not self._exited(member):
            return True
        self._take_down(member, "its process exited")
        return False

    def _exited(self, member: _Member) -> bool:
        """The member's supervisor says its process exited (False where there is no supervisor)."""
        return self._is_process_alive is not None and not self._is_process_alive(member.client.base_url)

    def _take_down(self, member: _Member, why: str) -> None:
        log.warning("engine %s is out of service: %s", member.client.base_url, why)
        member.healthy = False
        member.client.reset(f"engine out of service: {why}")

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self.refresh()
            except Exception:  # the loop must outlive any one bad answer
                log.exception("engine pool refresh failed")

    async def refresh(self) -> None:
        await asyncio.gather(*(self._refresh_one(m) for m in self._members))

    async def _refresh_one(self, member: _Member, *, reviving: bool = False) -> None:
        """Re-read the model list; healthy again only when reviving (the heartbeat decides health)."""
        try:
            info = await member.client.info()
        except EngineError as exc:
            if not member.instance_id:
                member.healthy = False  # never answered: not in service yet
            log.warning("engine %s did not describe itself: %s", member.client.base_url, exc)
            return
        if not (reviving or member.healthy or not member.instance_id):
            return  # out of service: only the heartbeat brings it back
        if info.instance_id != member.instance_id:
            member.num_audited = 0
        await self._record_engine_events(member, info.instance_id, info.key_operations)
        member.models = {card.name: card for card in info.models}
        member.failed_models = dict(info.failed_models)
        member.instance_id = info.instance_id
        member.stats = dict(info.stats)
        member.healthy = True

    async def _record_engine_events(
        self, member: _Member, instance_id: str, events: list[KeyOperationEvent]
    ) -> None:
        """Copy the engine's key operations (model unseals) into the audit log, each once."""
        if self._audit is None:
            return
        for event in events[member.num_audited :]:
            try:
                await self._audit.append(_key_operation_record(event, instance_id))
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
        return any(m.healthy and m.models and self._runs(m) for m in self._members)

    def models(self) -> dict[str, ModelCard]:
        """Every model some healthy engine hosts."""
        out: dict[str, ModelCard] = {}
        for m in self._members:
            if m.healthy and self._runs(m):
                for name, card in m.models.items():
                    out.setdefault(name, card)
        return out

    def known_model(self, name: str) -> bool:
        """Hosted now, or configured on an engine that is down (503 rather than 404)."""
        return any(name in m.models or name in m.failed_models for m in self._members)

    def pick(self, model: str) -> tuple[EngineClient, str] | None:
        """The least-busy healthy engine hosting ``model`` and its instance id, or None."""
        candidates = [m for m in self._members if m.healthy and model in m.models and self._runs(m)]
        if not candidates:
            return None
        best = min(candidates, key=lambda m: m.in_flight)
        return best.client, best.instance_id

    def num_in_flight(self) -> int:
        """Generations this gateway has at its engines now."""
        return sum(m.in_flight for m in self._members)

    @contextlib.contextmanager
    def track(self, client: EngineClient) -> Iterator[None]:
        member = next(m for m in self._members if m.client is client)
        member.in_flight += 1
        try:
            yield
        finally:
            member.in_flight -= 1

    def engine_stats(self) -> list[tuple[str, dict[str, float]]]:
        """(instance id, last stats) of every engine in service, for /metrics."""
        return [(m.instance_id, m.stats) for m in self._members if m.healthy]

    def describe(self) -> list[dict[str, object]]:
        return [
            {
                "url": m.client.base_url,
                "instance_id": m.instance_id,
                "healthy": m.healthy,
                "models": sorted(m.models),
                "quantization": {name: card.quantization for name, card in sorted(m.models.items())},
                "kv_cache_dtype": {name: card.kv_cache_dtype for name, card in sorted(m.models.items())},
                "failed_models": m.failed_models,
                "in_flight": m.in_flight,
                "stats": m.stats,
            }
            for m in self._members
        ]


def _key_operation_record(event: KeyOperationEvent, instance_id: str) -> AuditEvent:
    """The audit record of an engine's key operation: the one the keys package writes for it."""
    operation = KeyOperation(
        operation=event.operation,
        key_id=event.key_id,
        key_version=event.key_version,
        model=event.model,
        process=event.process,
        provider=event.provider,
    )
    record = operation.audit_event(error=event.error)
    return msgspec.structs.replace(record, engine_instance=record.engine_instance or instance_id)
