"""Opening the DuckDB journal's file: one writable object per file, its lock, a background open.

Part of :mod:`.duckdb` (see its docstring for why and when the file is opened
in the background, and why one object per file).
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import fcntl
import os
import threading
import weakref
from typing import Final, Protocol

from ..errors import JournalLockedError
from ._duckdb_store import _locked_elsewhere, _Store
from ._framelog import MAGIC_V1 as _LOG_MAGIC_V1
from ._framelog import START as _LOG_START
from ._logformat import _zeros_from


class _Holder(Protocol):
    """What the file registry reads of the journal object claiming a file."""

    @property
    def path(self) -> str: ...

    @property
    def closed(self) -> bool: ...


#: Seconds after opening at which the DuckDB file is opened in the background
#: (when the log holds an unfinished run; an operation needing the tables opens it sooner).
OPEN_DELAY: Final = 0.05


#: Writable DuckDB journals open in this process, by the file's real path and identity.
_OPEN: dict[str | tuple[int, int], weakref.ref[_Holder]] = {}
_OPEN_LOCK = threading.Lock()


class _Opening:
    """A :class:`_Store` opened (``duckdb.connect`` + meta check) off the resume path.

    The open runs on the thread of the first operation that needs the tables,
    or, once :meth:`start` was called, on a background thread ``delay``
    seconds later, whichever comes first (exactly one of them runs it). The
    journal starts the background open only when its log holds an unfinished
    run (a process resuming it writes soon, and its first write needs the
    tables); a process that only replays runs held in the log never opens
    DuckDB. Why the delay: DuckDB's connect holds the GIL for parts of its
    20-40 ms, so a thread started at once stalls the calling thread just when
    it reads the log and replays the run to resume (measured: resume @10 steps
    2.9x the memory journal with an immediate thread, 1.7x with the open
    deferred); once the resumed run makes its first live call (seconds of
    waiting on a model), the open costs nothing.

    At interpreter exit (:func:`_quiesce`), a background open that has not
    started is cancelled and one in flight is waited for: a daemon thread
    still inside DuckDB when the interpreter finalizes is killed there, which
    aborts the process.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._store: _Store | None = None
        self._error: BaseException | None = None
        self._claim_lock = threading.Lock()
        self._claimed = False
        self._done = threading.Event()
        self._cancelled = threading.Event()

    def start(self, delay: float) -> None:
        """Open on a background thread ``delay`` seconds from now unless claimed first.

        Nothing starts once the interpreter is exiting (the open then runs on
        the thread that needs the tables, if any).
        """
        with _PENDING_LOCK:
            if _EXITING:
                return
            _PENDING.add(self)
        # A low-level thread: threading.Thread.start() waits until the new thread
        # has been scheduled and has run its bootstrap, which on a loaded machine
        # cost milliseconds on the resume path (3 ms of a 6 ms resume, profiled);
        # this one is started without waiting. It is a daemon (not joined at exit:
        # _quiesce waits for it instead) and catches everything it raises (see _open).
        _thread.start_new_thread(self._background, (delay,))

    def _claim(self) -> bool:
        with self._claim_lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def _background(self, delay: float) -> None:
        if not self._cancelled.wait(delay) and self._claim():
            self._open()

    def _open(self) -> None:
        try:
            self._store = _Store(self._path, read_only=False)
        except BaseException as exc:  # handed to the thread that needs the tables
            self._error = exc
        finally:
            self._done.set()

    @property
    def started(self) -> bool:
        """True once the open has started (or ended); False while it may still be cancelled."""
        return self._claimed

    def abandon(self) -> _Store | None:
        """Cancel the open if it did not start; else wait for it and return the store (or None)."""
        if self._claim():
            # the timer thread is not woken: it ends at its delay, finding the open
            # claimed (waking it made the closing thread wait for a GIL hand-off,
            # 5 ms on a loaded machine, in about half the closes measured)
            self._done.set()
            return None
        self._done.wait()
        return self._store

    def settle(self) -> None:
        """Cancel the open if it did not start (waking its timer), else wait for it to end."""
        if self._claim():
            self._cancelled.set()
            self._done.set()
        else:
            self._done.wait()

    def wait(self) -> tuple[_Store | None, BaseException | None]:
        """Open now or wait for the background open; return ``(store, None)``/``(None, error)``."""
        if self._claim():
            self._cancelled.set()
            self._open()
        else:
            self._done.wait()
        return self._store, self._error


#: Background opens started (weakly held), settled at interpreter exit.
_PENDING: weakref.WeakSet[_Opening] = weakref.WeakSet()
_PENDING_LOCK = threading.Lock()
_EXITING = False


def _quiesce() -> None:
    """At interpreter exit: cancel the background opens not started, wait for those in flight.

    Registered with :mod:`atexit` (which runs before the interpreter
    finalizes and stops daemon threads); no background open starts after it.
    """
    global _EXITING
    with _PENDING_LOCK:
        _EXITING = True
        pending = list(_PENDING)
    for opening in pending:
        opening.settle()


atexit.register(_quiesce)


def _abandon(opening: _Opening) -> None:
    """Cancel or close a background open whose journal was dropped without close()."""
    with contextlib.suppress(Exception):
        store = opening.abandon()
        if store is not None:
            store.close()


def _log_holds_records(path: str) -> bool:
    """True when the log file at ``path`` has bytes past its header other than zeros.

    A log left by a killed writer may end in its preallocated zero tail (see
    :mod:`._framelog`): zeros from the header to the end mean no records.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= _LOG_START:
                return False
            if f.read(len(_LOG_MAGIC_V1)) == _LOG_MAGIC_V1:
                return True
            return not _zeros_from(f, _LOG_START, size)
    except OSError:
        return False


def _claim(key: str | tuple[int, int], path: str, journal: _Holder) -> None:
    """Register ``journal`` as the writable journal of file ``key`` in this process.

    Args:
        key: the file's real path, or its ``(device, inode)`` once it exists.
        path: the path the journal was opened with (for the message).
        journal: the journal object claiming the file.

    Raises:
        JournalLockedError: another live writable journal object has the file.
    """
    with _OPEN_LOCK:
        ref = _OPEN.get(key)
        other = ref() if ref is not None else None
        if other is not None and other is not journal and not other.closed:
            same = (
                f"the same file as {other.path!r} (device {key[0]}, inode {key[1]})"
                if isinstance(key, tuple)
                else repr(key)
            )
            raise JournalLockedError(
                f"DuckDB journal {path!r} is {same}, which is already open for writing in "
                "this process (another DuckDBJournal object holds it, possibly through "
                "another path or a hard link). Two journal objects on one file would each "
                "keep their own writes not yet checkpointed, so both could claim and run the "
                "same step. Reuse the open journal object, or get one journal per file per "
                "process from redrive.storage.shared_journal(path).",
                path=path,
            )
        _OPEN[key] = weakref.ref(journal)


def _release(key: str | tuple[int, int], journal: _Holder) -> None:
    with _OPEN_LOCK:
        ref = _OPEN.get(key)
        if ref is not None and ref() in (journal, None):
            del _OPEN[key]


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _lock_file(path: str, journal: _Holder) -> tuple[int, tuple[int, int]] | None:
    """Claim an existing database file by identity and take an OS lock on it.

    The file is claimed by ``(device, inode)``, so a hard link or any second
    path to it is the same file; then an exclusive ``flock`` is taken on an
    open file description of its own, which conflicts with every other open
    of the file (in this process or another), unlike DuckDB's own ``fcntl``
    locks, which one process never conflicts with.

    Returns:
        ``(descriptor holding the lock, (device, inode))``, or None when the
        file does not exist yet.

    Raises:
        JournalLockedError: another journal object, or another process, holds it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        ident = (st.st_dev, st.st_ino)
        _claim(ident, path, journal)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _release(ident, journal)
            raise _locked_elsewhere(
                path, False, "another redrive journal holds an exclusive lock on the file"
            ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd, ident
