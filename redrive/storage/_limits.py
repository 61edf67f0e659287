"""The one size limit of every journal, defined once (pure).

:data:`MAX_VALUE` bounds one frame (its payload plus its name and key) and a
run's output, on every backend and every path (the ``.rdlog`` write path of
DuckDB, DuckDB's tables, Postgres, ``.rdj`` export and import). It is checked
when a value is written, before anything is acknowledged, so a journal never
holds a value one of its readers refuses. The other limits are derived from it
with room for the fields around a value, so a reader always accepts what a
writer wrote.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LOG_RECORD_LIMIT", "MAX_VALUE", "RDJ_RECORD_LIMIT"]

#: Largest frame (payload + name + key bytes) or run output a journal accepts, in bytes.
MAX_VALUE: Final = 32 * 1024 * 1024
#: Largest ``.rdj`` record (one frame, or the run header holding the output), in bytes.
RDJ_RECORD_LIMIT: Final = 2 * MAX_VALUE
#: Largest ``.rdlog`` record body (one append: several frames and a run row), in bytes.
LOG_RECORD_LIMIT: Final = 1024 * 1024 * 1024
