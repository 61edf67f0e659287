"""Recorders: tools, model callables, SDK clients and recorded values."""

from ._wrap import wrap
from .model import model
from .tools import guess_restart_safe, tool
from .values import now, random, uuid4

__all__ = ["guess_restart_safe", "model", "now", "random", "tool", "uuid4", "wrap"]
