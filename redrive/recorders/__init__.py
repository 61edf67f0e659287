"""Recorders: tools, model callables, SDK clients and recorded values."""

from ..replay import add_pause_rule as _add_pause_rule
from ..replay import set_error_classifier as _install_classifier
from ._failures import classify_error
from ._pauses import PROVIDER_PAUSE_RULES as _PROVIDER_PAUSE_RULES
from ._wrap import wrap
from .model import model
from .tools import guess_restart_safe, tool
from .values import now, random, uuid4

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
