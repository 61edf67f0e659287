"""The DuckDB journal: the embedded default (a file path, or ``":memory:"`` in DuckDB).

Writes take the fast durable path: each append is one record in an
append-only log next to the database (``<file>.rdlog``) and one fsync. The
log holds the live set and the recent past, the tables hold history: at
checkpoints (every :data:`CHECKPOINT_FRAMES` frames, and on close) the log is
rewritten atomically with the records of the runs it keeps, and every other
run moves into DuckDB's tables in bulk. It keeps the unfinished runs, then
the newest ended runs (at most 32, ended within the hour), as long as the
frames kept stay within half the threshold; once the log is over 8 MiB at a
checkpoint, every ended run moves. A close with nothing to move (the log holds
only runs it keeps) leaves the log as it is and does not open the tables: a
process that resumed a run and stopped before writing, or replayed a run that
ended recently, closes in about a millisecond. The tables serve queries
(``redrive sql``), the run index and reads, while the per-step commit cost
stays close to the fsync floor. Reads merge the tables with the records held
in the log, so they always see every acknowledged write.

Opening is cheap when the log holds records: the log is read on the calling
thread and the DuckDB file is opened later: by the first operation that
needs the tables, or, when the log holds an unfinished run (whose resumer
writes soon), on a background thread :data:`OPEN_DELAY` seconds after
opening; a background open is cancelled, or waited for, at interpreter exit.
Reading a run held in the log and re-driving its recorded
steps does not need the tables; the first write waits for the open, so nothing
is acknowledged (no claim, so no side effect) before the file is known to be a
journal this redrive may write. An error opening the file
(:class:`~redrive.errors.JournalLockedError`,
:class:`~redrive.errors.JournalFormatError`) is then raised by the first
operation that needs the tables (``runs()``, reading a run the log does not
hold wholly, a write, a checkpoint, ``close()`` when it has records to move
or the open had started), with the same message; a journal that only read
runs held in the log closes without opening the file (the next open raises it). A
new file, a read-only open, ``":memory:"`` and an empty log open the file at
once, as before.

DuckDB lets one process at a time open a database file for writing, and while
it does, no other process can open the file at all (not even read-only). A
second process gets :class:`~redrive.errors.JournalLockedError`; for many
workers use the Postgres journal. Within a process the journal is thread-safe,
and there must be one journal object per file: a second writable
``DuckDBJournal`` on the same file in the same process also raises
:class:`~redrive.errors.JournalLockedError` (each object would hold its own
writes not yet checkpointed, so both could claim the same step). The file is
known by identity (device and inode, plus an exclusive ``flock`` on it), not
by path: a hard link or a second path to the file is the same file. Share one
object, e.g. with :func:`redrive.storage.shared_journal`.
"""

from __future__ import annotations

from ._duckdb_journal import _PAGE as _PAGE
from ._duckdb_journal import CHECKPOINT_FRAMES, DuckDBJournal
from ._duckdb_store import _PAGE_SQL as _PAGE_SQL
from ._duckdb_store import _Store as _Store

__all__ = ["CHECKPOINT_FRAMES", "DuckDBJournal"]

# named (in reprs and tracebacks) and pickled under this module, where it is imported from
DuckDBJournal.__module__ = __name__
