"""Public names a package imports on first use (PEP 562 module ``__getattr__`` and ``__dir__``).

One mechanism for :mod:`redrive`, :mod:`redrive.replay` and :mod:`redrive.recorders`:
each names, per public name, the module that defines it, and :func:`lazy_names` makes the
package's ``__getattr__`` and ``__dir__`` from that table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, table: Mapping[str, str], namespace: Mapping[str, Any]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return the ``__getattr__`` and ``__dir__`` of ``package`` for its lazy names.

    Args:
        package: the package's ``__name__`` (the modules of ``table`` are relative to it).
        table: public name -> the module defining it (``"._check"``).
        namespace: the package's ``globals()`` (``__dir__`` lists them with the table's).

    Returns:
        ``(__getattr__, __dir__)``. A name's value is not kept in the package's namespace:
        each access reads the defining module's current value, so a test's ``mock.patch``
        of the defining module ends with the patch (a kept value would outlive it).
        ``__getattr__`` raises ``AttributeError`` for a name not in ``table``.
    """

    def __getattr__(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: object = getattr(importlib.import_module(module, package), name)
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
