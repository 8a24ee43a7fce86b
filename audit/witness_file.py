"""The append-only witness file: one signed, chained JSON line per published checkpoint.

    {"v": 1, "n": 1, "prev": line_genesis(log_id),   "checkpoint": {...}, "signature": ...}
    {"v": 1, "n": 2, "prev": SHA-256(line 1 bytes),  "checkpoint": {...}, "signature": ...}

    line_genesis(log_id) = SHA-256("strongroom.audit.witness.genesis.v1\\n" || log_id)
    signature            = Ed25519 over signing_bytes("witness", {v, n, prev, checkpoint})

Editing a line breaks its signature and the next line's ``prev``; deleting or reordering lines
breaks the chain; lines re-chained by hand need the signing key. What a file cannot show is its
own last lines cut off: keep it where the audit store's owner cannot write (another volume or
owner, ``chattr +a`` so that even root must first lift the flag, or a log shipper's source).

Appends take an exclusive ``flock`` and re-read the last line under it, so the gateway and a CLI
on one host chain correctly; the file is opened ``O_APPEND`` (all ``chattr +a`` allows) and
every line is fsynced. A line torn by a crash is ended with a newline and skipped by readers;
the chain continues from the last whole line, so dropping a real line this way still shows.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from audit.checkpoint import Checkpoint, unsigned_payload
from audit.signer import CheckpointSigner, CheckpointVerifier
from audit.witness import WitnessError

_TAIL_WINDOW = 64 << 10
_NEWEST_LINES = 16
"""How many of the last lines ``newest`` reads: a CLI and the gateway may publish out of order."""


class WitnessLine(msgspec.Struct, frozen=True, kw_only=True):
    v: int = 1
    n: int
    prev: str
    checkpoint: Checkpoint
    signature: str = ""

    def payload(self) -> dict[str, Any]:
        return unsigned_payload(self)


def line_genesis(log_id: str) -> str:
    return hashlib.sha256(b"strongroom.audit.witness.genesis.v1\n" + log_id.encode()).hexdigest()


class FileWitness:
    """Publishes to, and reads back, one witness file. Reading needs no signer."""

    def __init__(self, path: Path, signer: CheckpointSigner | None = None) -> None:
        self._path = path
        self._signer = signer
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileWitness({str(self._path)!r})"

    def publish(self, checkpoint: Checkpoint) -> None:
        if self._signer is None:
            raise WitnessError("a read-only witness cannot publish")
        self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self._lock:
            fd = os.open(self._path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                last, is_torn = _last_entry(fd)
                if last is None:
                    n, prev = 1, line_genesis(checkpoint.log_id)
                else:
                    n, prev = last[1].n + 1, _line_hash(last[0])
                unsigned = WitnessLine(n=n, prev=prev, checkpoint=checkpoint)
                signature = self._signer.sign("witness", unsigned.payload())
                line = msgspec.json.encode(msgspec.structs.replace(unsigned, signature=signature))
                os.write(fd, (b"\n" if is_torn else b"") + line + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)  # also releases the flock

    def close(self) -> None:
        """Nothing held open between appends."""

    def witnessed(self, verifier: CheckpointVerifier, log_id: str) -> Iterator[Checkpoint]:
        """Every line checked: signature under the trusted key, chain, log id. A missing file holds none."""
        if not self._path.exists():
            return
        expected_n, expected_prev = 1, line_genesis(log_id)
        with self._path.open("rb") as f:
            for raw_line in f:
                raw = raw_line.rstrip(b"\n")
                if not raw or not raw_line.endswith(b"\n"):
                    continue  # a last line without its newline is torn
                try:
                    line = _decode(raw)
                except WitnessError:
                    continue  # a torn line ended by a later append: the chain still shows a dropped one
                if line.checkpoint.log_id != log_id:
                    raise WitnessError(f"witness line {line.n} belongs to another audit log")
                if line.n != expected_n or line.prev != expected_prev:
                    raise WitnessError(f"witness line {expected_n} was edited, removed or reordered")
                _check_signature(line, verifier)
                yield line.checkpoint
                expected_n, expected_prev = line.n + 1, _line_hash(raw)

    def newest(self, verifier: CheckpointVerifier) -> Checkpoint | None:
        if not self._path.exists():
            return None
        with self._path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            tail = os.pread(f.fileno(), _TAIL_WINDOW, max(0, size - _TAIL_WINDOW))
        lines = list(_whole_lines(tail))[1 if size > _TAIL_WINDOW else 0 :][-_NEWEST_LINES:]
        newest: Checkpoint | None = None
        for raw in lines:
            try:
                line = _decode(raw)
            except WitnessError:
                continue
            _check_signature(line, verifier)
            if newest is None or line.checkpoint.index > newest.index:
                newest = line.checkpoint
        return newest


def _decode(raw: bytes) -> WitnessLine:
    try:
        return msgspec.json.decode(raw, type=WitnessLine)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WitnessError("unreadable witness line") from exc


def _check_signature(line: WitnessLine, verifier: CheckpointVerifier) -> None:
    cp = line.checkpoint
    if not verifier.is_valid("witness", line.payload(), line.signature) or not verifier.is_valid(
        "checkpoint", cp.payload(), cp.signature
    ):
        raise WitnessError(f"witness line {line.n} is not signed by the trusted key")


def _line_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _whole_lines(data: bytes) -> Iterator[bytes]:
    """Non-empty lines; a last line without its newline is torn and left out."""
    parts = data.split(b"\n")
    for part in parts[:-1]:
        if part:
            yield part


def _last_entry(fd: int) -> tuple[tuple[bytes, WitnessLine] | None, bool]:
    """The file's last whole, readable line (None when empty), and whether a torn fragment ends it."""
    size = os.fstat(fd).st_size
    start = max(0, size - _TAIL_WINDOW)
    data = os.pread(fd, size - start, start)
    is_torn = bool(data) and not data.endswith(b"\n")
    lines = list(_whole_lines(data))[1 if start > 0 else 0 :]  # a window's first line may be cut
    for raw in reversed(lines):
        try:
            return (raw, _decode(raw)), is_torn
        except WitnessError:
            continue
    if start > 0:
        raise WitnessError(f"no readable line in the last {_TAIL_WINDOW} bytes of the witness file")
    return None, is_torn
