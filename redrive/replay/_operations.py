"""The operation ledger: a run's logical operations and their idempotency keys.

A logical operation is one intended tool call across its attempts; it keeps
one idempotency key (DESIGN invariant 12). The rule: a call of a tool with
the same canonical arguments (the same match key) as an operation whose last
attempt failed with a retryable error is a retry of that operation and reuses
its key; any other call (the first, or one after a success or a permanent
error) starts a new operation with a new key. Parallel identical calls each
take their own open operation (oldest first).

The ledger also remembers the calls of side-effecting tools that ran and
failed: the same call again in the run is blocked (it may have taken effect),
unless it is a retry the operation asked for.

The run feeds it every attempt it replays or makes, so after a resume it
holds what the interrupted execution held: the keys are read from the
journal (each ``tool_start`` records the key its body received).
"""

from __future__ import annotations

__all__ = ["OperationLedger"]


class OperationLedger:
    """The logical operations of one run, per tool name and canonical arguments (match key)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], list[str]] = {}
        self._failed: dict[tuple[str, str], str] = {}
        #: seq of the last failed attempt of a side-effecting call, per (tool, match key)
        self._blocked: dict[tuple[str, str], int] = {}
        #: tool calls whose last failed attempt asked to be called again (a retry signal)
        self._asked: set[tuple[str, str]] = set()

    def take(self, name: str, match_key: str) -> str | None:
        """Begin a new attempt of ``name`` with arguments ``match_key``.

        Returns:
            The key of the open operation this call retries (now no longer
            open: its attempt is under way), or None for a new operation.
        """
        keys = self._open.get((name, match_key))
        if not keys:
            return None
        key = keys.pop(0)
        if not keys:
            del self._open[(name, match_key)]
        return key

    def began(self, name: str, match_key: str, key: str) -> None:
        """An attempt of the operation ``key`` began (replayed or re-run): it is no longer open."""
        keys = self._open.get((name, match_key))
        if keys and key in keys:
            keys.remove(key)
            if not keys:
                del self._open[(name, match_key)]

    def failed(
        self, name: str, match_key: str, key: str, *, retryable: bool, retry_requested: bool = False
    ) -> None:
        """An attempt of the operation ``key`` raised: a retryable error leaves it open.

        So does a retry signal (``retry_requested``): the body asked to be
        called again, so the next same call is a retry of this operation (see
        :meth:`retry_requested`) until an attempt fails without asking.
        """
        self._failed[(name, match_key)] = key
        if retry_requested:
            self._asked.add((name, match_key))
        else:
            self._asked.discard((name, match_key))
        if retryable or retry_requested:
            keys = self._open.setdefault((name, match_key), [])
            if key not in keys:
                keys.append(key)

    def retry_requested(self, name: str, match_key: str) -> bool:
        """True when the last failed attempt of ``name`` with ``match_key`` asked for a retry."""
        return (name, match_key) in self._asked

    def note_failure(
        self,
        name: str,
        match_key: str,
        seq: int,
        key: str,
        *,
        side_effecting: bool,
        retryable: bool,
        asked_again: bool,
    ) -> None:
        """Remember a failed attempt (live or replayed) for the calls that follow it.

        A body that ran and failed may have had its side effect, retryable or
        not: the same call again in this run is blocked unless the tool is
        restart safe (``side_effecting`` False), or the body asked to be called
        again (a retry signal, read by the engine from :meth:`retry_requested`).
        A retryable error or a retry signal leaves the operation open, so its
        retry keeps the key.
        """
        if side_effecting:
            self.ran_and_failed(name, match_key, seq)
        self.failed(name, match_key, key, retryable=retryable, retry_requested=asked_again)

    def peek(self, name: str, match_key: str) -> str | None:
        """The key a retry of ``name`` with ``match_key`` would name (None: a new operation).

        The open operation's key, else the key of the last failed attempt (what
        a blocked retry of a non-restart-safe tool names).
        """
        keys = self._open.get((name, match_key))
        return keys[0] if keys else self._failed.get((name, match_key))

    def ran_and_failed(self, name: str, match_key: str, seq: int) -> None:
        """A side-effecting call's body ran at ``seq`` and failed: the same call is blocked."""
        self._blocked[(name, match_key)] = seq

    def blocked_at(self, name: str, match_key: str) -> int | None:
        """The seq of a failed attempt that blocks calling ``name`` with ``match_key``, or None."""
        return self._blocked.get((name, match_key))
