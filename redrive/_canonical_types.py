"""The ext type codes, limits and value classes of the canonical encoding.

What both directions of :mod:`redrive._canonical` (encoding) and
:mod:`redrive._canonical_decode` (decoding) share. Public through
:mod:`redrive.frames`.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

#: Deepest nesting accepted by :func:`canonical` and :func:`decode`.
MAX_DEPTH: Final = 256

_EXT_DATETIME_AWARE = 1
_EXT_DATETIME_NAIVE = 2
_EXT_DATE = 3
_EXT_TIME = 4
_EXT_UUID = 5
_EXT_DECIMAL = 6
_EXT_BIGINT = 7
_EXT_TIMEDELTA = 8
_EXT_PREFIX = 9

#: Most digits accepted for a big int (CPython's int/str conversion limit).
_MAX_TEXT = 4300


@attrs.frozen
class PrefixRef:
    """A list stored as a prefix of the previous request's list plus a tail (ext type 9).

    That is: "the first ``count`` items of the same list in the previous
    request of this step name, then ``tail``".

    Model requests re-send the whole conversation, so without this a journal
    grows quadratically with the number of steps. Only the replay cursor and
    :func:`redrive.replay.expand_frames` resolve these references.
    """

    count: int
    tail: list[Any]


# -- stored values (see :mod:`redrive._stored`) -------------------------------------------

_EXT_STORED = 10


@attrs.frozen
class StoredValue:
    """A value a step hands back, packed faithfully by :func:`encode_value` (ext type 10).

    Put it in a frame's payload where the value goes: the canonical encoding
    writes its bytes as they are, so the payload stays canonical while the value
    keeps its types and dict key order. Decoding the frame gives the value back
    (see :func:`decode_value`).
    """

    data: bytes
