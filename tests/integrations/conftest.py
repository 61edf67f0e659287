"""Framework tests need the framework: skip without it, except under ``CI=true``.

CI installs every framework through the ``dev`` extra, so there a missing one
is a broken install and fails the test instead of skipping it.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

#: scenario family -> (the module it imports, the extra that installs it)
FRAMEWORKS = {
    "agents": ("agents", "agents"),
    "pydantic": ("pydantic_ai", "pydantic-ai"),
    "langchain": ("langgraph", "langchain"),
    "litellm": ("litellm", "litellm"),
}


def need(family: str) -> None:
    """Skip (or, under ``CI=true``, fail) when ``family``'s framework is not installed."""
    module, extra = FRAMEWORKS[family]
    for name in (module, "langchain_openai") if family == "langchain" else (module,):
        if importlib.util.find_spec(name) is None:
            message = (
                f"{name} is not installed: pip install -e '.[{extra}]' "
                "(the dev extra installs every framework)"
            )
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
