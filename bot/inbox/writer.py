"""Storing deliveries from the webhook endpoint (:class:`InboxWriter`) and, on SQLite,
checkpointing the write-ahead log off the acknowledgement path (:class:`Checkpointer`)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine

from bot.inbox import store

log = logging.getLogger(__name__)

WRITER_BATCH = 256


class InboxWriter:
    """Stores deliveries; :meth:`submit` returns True when the row was inserted, False for a
    duplicate ``delivery_id``, and raises the database error if the commit failed (nothing
    is acknowledged then).  ``on_commit`` is called after each successful commit.

    Two ways, chosen by ``inline``:

    * inline (SQLite with ``synchronous=NORMAL``, the default): the insert runs on the event
      loop on one raw ``sqlite3`` connection.  A WAL commit without fsync costs ~0.15 ms of
      CPU, less than handing the row to another thread and back, which on a busy 2-core
      machine waits for the scheduler twice (``benchmarks/webhook_load.py``: p99 12 ms
      inline vs 25-200 ms through a thread under the same load).
    * a writer thread (PostgreSQL, or SQLite ``FULL``): commits whatever arrived together in
      one transaction (group commit), so an fsync or a network round trip never blocks the
      event loop and one fsync serves many deliveries.
    """

    def __init__(self, engine: Engine, on_commit: Any = None, *, inline: bool = False) -> None:
        self.engine = engine
        self.on_commit = on_commit
        self.inline = inline and engine.dialect.name == "sqlite"
        self._raw: Any = None
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="campaign-bot-inbox", daemon=True)

    def start(self) -> None:
        """Open the inline connection, or start the writer thread."""
        if self.inline:
            self._raw = self._open_raw()
            # the event loop must not wait long on a lock: 5 s, then 503 (GitHub shows it)
            self._raw.execute("PRAGMA busy_timeout=5000")
        else:
            self._thread.start()

    def _open_raw(self) -> Any:
        raw = self.engine.raw_connection()  # one writer connection, no ORM overhead
        # An automatic checkpoint would run inside some acknowledgement's commit (copying the
        # WAL into the database file: tens of ms); the Checkpointer thread does it instead.
        raw.execute("PRAGMA wal_autocheckpoint=0")
        return raw

    @property
    def alive(self) -> bool:
        """True while the writer can store deliveries."""
        return self._raw is not None if self.inline else self._thread.is_alive()

    def stop(self) -> None:
        """Finish queued inserts, then stop."""
        if self.inline:
            if self._raw is not None:
                self._raw.close()
                self._raw = None
            return
        self._q.put(None)
        self._thread.join(30)

    async def submit(self, row: store.NewDelivery) -> bool:
        """Store ``row``; see the class docstring."""
        if self.inline:
            inserted = self._commit(self._raw, [row])[0]
            if self.on_commit is not None:
                self.on_commit()
            return inserted
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._q.put((row, fut, loop))
        return await fut

    def _run(self) -> None:
        raw = self._open_raw() if self.engine.dialect.name == "sqlite" else None
        try:
            self._loop_batches(raw)
        finally:
            if raw is not None:
                raw.close()

    def _commit(self, raw: Any, rows: list[store.NewDelivery]) -> Sequence[bool]:
        if raw is None:
            with self.engine.begin() as conn:
                return store.insert_deliveries(conn, rows)
        try:
            res = store.insert_deliveries_sqlite(raw, rows)
            raw.commit()
            return res
        except BaseException:
            raw.rollback()
            raise

    def _loop_batches(self, raw: Any) -> None:
        stop = False
        while not stop:
            item = self._q.get()
            if item is None:
                break
            batch = [item]
            while len(batch) < WRITER_BATCH:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            try:
                results: Sequence[bool | BaseException] = self._commit(raw, [b[0] for b in batch])
            except Exception as exc:  # noqa: BLE001 - reported to every waiting request
                log.exception("could not store %d deliveries", len(batch))
                results = [exc] * len(batch)
            else:
                if self.on_commit is not None:
                    self.on_commit()
            for (_row, fut, loop), res in zip(batch, results, strict=True):
                loop.call_soon_threadsafe(_resolve, fut, res)


class Checkpointer:
    """SQLite only: a thread that runs ``PRAGMA wal_checkpoint(PASSIVE)`` every ``interval``
    seconds on its own connection (PASSIVE never blocks the inbox writer), because the
    writer's automatic checkpoints are off."""

    def __init__(self, engine: Engine, interval: float = 1.0) -> None:
        self.engine = engine
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="campaign-bot-checkpoint",
                                        daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Run a last checkpoint and stop."""
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(self.interval)
            try:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("WAL checkpoint failed")
            if stopping:
                return


def _resolve(fut: asyncio.Future[bool], res: bool | BaseException) -> None:
    if fut.done():
        return
    if isinstance(res, BaseException):
        fut.set_exception(res)
    else:
        fut.set_result(res)
