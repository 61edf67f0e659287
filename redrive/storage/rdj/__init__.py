"""The ``.rdj`` file: one run, exported to a single self-checking file.

The format (layout, records, checks) is described in :mod:`._format`; the
reader in :mod:`._reader`; :class:`RdjJournal` opens a file as a read-only
journal; :func:`export_run` and :func:`import_run` move runs between
journals and files.
"""

from ._format import MAGIC, MAX_RECORD, RDJ_VERSION, RdjHeader
from ._journal import RdjJournal
from ._reader import read_header
from ._text import TEXT_SUFFIXES, export_text, import_text, is_text_path, read_text, text_lines
from ._transfer import export_run, import_run

__all__ = [
    "MAGIC",
    "MAX_RECORD",
    "RDJ_VERSION",
    "RdjHeader",
    "RdjJournal",
    "TEXT_SUFFIXES",
    "export_run",
    "export_text",
    "import_run",
    "import_text",
    "is_text_path",
    "read_header",
    "read_text",
    "text_lines",
]
