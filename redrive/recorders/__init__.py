"""Recorders: tools, model callables, SDK clients and recorded values."""

from ..replay import set_error_classifier as _install_classifier
from ._failures import classify_error
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
