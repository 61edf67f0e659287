"""The pytest plugin's network guard: httpx requests outside recorded steps raise NetworkBlocked.

Part of :mod:`redrive.pytest_plugin` (see its docstring); imports nothing of
redrive's engine until a guarded test runs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

_BLOCKED = pytest.StashKey[list[str]]()
_HTTPX_MODULES = ("httpx", "httpx2")


class NetworkBlocked(BaseException):
    """An HTTP request a test made outside redrive's recorded steps, under the network guard.

    A ``BaseException``, so SDKs that retry on ``Exception`` (and the code under
    test) do not turn it into a connection error and retry; the test fails
    even if something swallows it, since the guard also records the request.
    """


@contextlib.contextmanager
def _network_guard(nodeid: str, blocked: list[str], on: bool) -> Iterator[None]:
    """While on, an httpx request that is not a recorded step's live call raises NetworkBlocked.

    Args:
        nodeid: what the message names (a test id, or a fixture of a wider scope).
        blocked: each refused request is appended here (``"GET http://..."``), so
            the test or fixture fails even when its code swallowed the exception.
        on: whether to guard at all.
    """
    if not on:
        yield
        return
    from redrive.replay import sends_live

    saved: list[tuple[type, str, Any]] = []

    def guard(cls: type, attr: str, original: Any, is_async: bool) -> Any:
        def refuse(request: Any) -> NetworkBlocked:
            what = f"{request.method} {request.url}"
            blocked.append(what)
            return NetworkBlocked(
                f"redrive: {nodeid} sent {what} outside recorded steps with the network "
                "guard on (--redrive-block-network, block_network=True or record mode none)"
            )

        if is_async:

            async def ahandle(self: Any, request: Any) -> Any:
                if not sends_live():
                    raise refuse(request)
                return await original(self, request)

            return ahandle

        def handle(self: Any, request: Any) -> Any:
            if not sends_live():
                raise refuse(request)
            return original(self, request)

        return handle

    for name in _HTTPX_MODULES:
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name)
            except ImportError:
                continue
        for cls_name, attr, is_async in (
            ("HTTPTransport", "handle_request", False),
            ("AsyncHTTPTransport", "handle_async_request", True),
        ):
            cls = getattr(module, cls_name, None)
            if cls is None:
                continue
            original = cls.__dict__.get(attr)
            saved.append((cls, attr, original))
            setattr(cls, attr, guard(cls, attr, getattr(cls, attr), is_async))
    try:
        yield
    finally:
        for cls, attr, original in reversed(saved):
            if original is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, original)
