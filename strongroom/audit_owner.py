"""What the ``serve`` supervisor owns when several gateway workers serve: the one audit writer.

    supervisor: AuditLog (writer lock, chain, group commit, checkpoints, witness, lifecycle records)
                ├── AuditFeedServer  <run_dir>/audit.sock   the workers' appends (``audit.feed``)
                └── WriterSocket     <database>.sock         operator commands (SQLite only)

Before any worker starts, the supervisor also does the first-start work that must happen once:
it opens (creating and sealing, or verifying) the policy store, and creates the dev issuer's
key, so that workers starting together never race to create two different ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from audit.feed_server import AuditFeedServer
from audit.log import AuditLog
from audit.writer_socket import WriterSocket
from gateway.auth.dev_issuer import DevIssuer
from gateway.services import open_authorizer

if TYPE_CHECKING:
    from strongroom.config import Settings

__all__ = ["AuditOwner"]


class AuditOwner:
    def __init__(self, log: AuditLog, feed: AuditFeedServer, writer_socket: WriterSocket | None) -> None:
        self.log = log
        self.feed = feed
        self._writer_socket = writer_socket

    def __repr__(self) -> str:
        return f"AuditOwner({self.log!r}, feed={self.feed!r})"

    @classmethod
    async def open(cls, settings: Settings, feed_path: Path) -> AuditOwner:
        data_dir = settings.data_path
        log = await AuditLog.open(settings.audit, data_dir)
        try:
            authorizer = await open_authorizer(settings, log, None)  # seeds or verifies; audits a refusal
            await authorizer.stop()
            if settings.auth.dev_issuer:
                DevIssuer.load_or_create(data_dir)
            writer_socket = None
            if settings.audit.backend == "sqlite":
                db_path = settings.audit.resolve(data_dir, settings.audit.sqlite_path)
                writer_socket = await WriterSocket.start(log, db_path, data_dir)
            feed = await AuditFeedServer.start(log, data_dir, feed_path)
        except BaseException:
            await log.close()
            raise
        return cls(log, feed, writer_socket)

    async def close(self) -> None:
        """After every worker has stopped: their last records are in, then the final checkpoint."""
        await self.feed.close()
        if self._writer_socket is not None:
            await self._writer_socket.close()
        await self.log.close()
