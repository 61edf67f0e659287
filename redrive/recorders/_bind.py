"""The arguments a call binds to a signature, as a dict: ``inspect.Signature.bind``'s, faster.

A recorded step's arguments are the call's bound arguments in parameter order
(``dict(signature.bind(*args, **kwargs).arguments)``: no defaults applied).
``Signature.bind`` walks every parameter in Python on every call (about 10 µs);
:func:`binder` precomputes what a signature of plain parameters needs and binds
those calls with a dict comprehension, leaving everything else (``*args``,
``**kwargs``, keyword-only or positional-only parameters, an unknown, repeated
or missing argument) to ``Signature.bind``, which gives the same dict or the
``TypeError`` naming the problem.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["binder"]

Binder = Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]


def binder(signature: inspect.Signature) -> Binder:
    """Return ``bind(args, kwargs) -> dict(signature.bind(*args, **kwargs).arguments)``.

    Args:
        signature: the callable's signature.

    Returns:
        A function giving the bound arguments in parameter order (only those
        passed: defaults are not applied).

    Raises:
        TypeError: (when the returned function is called) the arguments do not
            bind, as ``Signature.bind`` raises it.
    """

    def slow(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        return dict(signature.bind(*args, **kwargs).arguments)

    params = list(signature.parameters.values())
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return slow
    names = tuple(p.name for p in params)
    known = frozenset(names)
    required = tuple(p.name for p in params if p.default is inspect.Parameter.empty)
    least = len(required) if required == names[: len(required)] else len(names)

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if not kwargs:
            if least <= len(args) <= len(names):
                return dict(zip(names, args, strict=False))
            return slow(args, kwargs)
        if len(args) > len(names) or not known.issuperset(kwargs):
            return slow(args, kwargs)
        given = dict(zip(names, args, strict=False))
        if any(k in given for k in kwargs):
            return slow(args, kwargs)  # one argument given twice
        given.update(kwargs)
        if any(r not in given for r in required):
            return slow(args, kwargs)
        return {n: given[n] for n in names if n in given}

    return bind
