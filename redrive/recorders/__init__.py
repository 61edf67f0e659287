"""Recorders: tools, model callables, SDK clients and recorded values."""

import typing as _typing

from .._lazy import lazy_names as _lazy_names
from ..replay import add_pause_rule as _add_pause_rule
from ..replay import set_error_classifier as _install_classifier
from ._failures import classify_error
from ._pauses import PROVIDER_PAUSE_RULES as _PROVIDER_PAUSE_RULES
from .model import model
from .tools import guess_restart_safe, tool
from .values import now, random, uuid4

if _typing.TYPE_CHECKING:
    from ._wrap import wrap

__all__ = [
    "classify_error",
    "guess_restart_safe",
    "model",
    "now",
    "random",
    "tool",
    "uuid4",
    "wrap",
]

# the engine reads provider and framework knowledge as data: this table's verdicts
_install_classifier(classify_error)
# and the provider rows of the pause table: a rate limit or a quota pauses a run
for _rule in _PROVIDER_PAUSE_RULES:
    _add_pause_rule(_rule)


if not _typing.TYPE_CHECKING:  # type checkers see ``wrap``'s import above, not a catch-all
    # wrapping an SDK client needs the HTTP recording machinery (transports, streams, the
    # provider views, urllib.parse, gzip); decorated tools and model callables do not
    __getattr__, __dir__ = _lazy_names(__name__, {"wrap": "._wrap"}, globals())
