"""The one rule for run ids, checked where a run is started and where one is created.

Every backend stores a run id as text and indexes it. Without one rule, an id
one backend accepts is refused by another with a raw driver error (Postgres
refuses NUL in text and indexes at most ~2,700 bytes per key; DuckDB and
Python's UTF-8 codec refuse lone surrogates), so a run exported from one
journal could not be imported into another.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_RUN_ID_BYTES", "check_run_id"]

#: The longest run id, in bytes of its UTF-8 encoding (well under Postgres's index-key limit).
MAX_RUN_ID_BYTES = 1024


def check_run_id(run_id: Any, *, where: str = "run_id") -> str:
    """Return ``run_id`` when it is a valid run id, else raise ``ValueError`` saying why.

    A run id is a non-empty ``str`` of valid Unicode (no lone surrogates: it
    encodes as UTF-8), without NUL characters, at most :data:`MAX_RUN_ID_BYTES`
    bytes long in UTF-8. Other characters (spaces, ``[/]``, newlines...) are
    allowed: the CLI prints ids as data, escaping what a terminal would interpret.

    Args:
        run_id: the id to check.
        where: what to call it in the message (e.g. ``"run_id"``, ``"the .rdj file's run id"``).

    Returns:
        ``run_id`` itself.

    Raises:
        ValueError: ``run_id`` is not a string, is empty, holds NUL or a lone
            surrogate, or is too long (the message names the rule and the offset).
    """
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"{where} must be a non-empty string, not {run_id!r}")
    if "\x00" in run_id:
        raise ValueError(
            f"{where} {run_id[:80]!r} holds a NUL character (at index {run_id.index(chr(0))}); "
            "run ids are text without NUL on every backend: choose an id without it"
        )
    try:
        size = len(run_id.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{where} {run_id[:80]!r} is not valid Unicode: a lone surrogate at index "
            f"{exc.start}; run ids must encode as UTF-8 (decode bytes with "
            "errors='replace' or choose another id)"
        ) from None
    if size > MAX_RUN_ID_BYTES:
        raise ValueError(
            f"{where} {run_id[:40]!r}... is {size} bytes long in UTF-8, over the limit of "
            f"{MAX_RUN_ID_BYTES}; use a shorter id (e.g. a hash of the long one)"
        )
    return run_id
