"""Agent framework integrations: each framework's own hooks, nothing patched.

Every framework here reaches the model through an OpenAI or Anthropic SDK
client (or an httpx client) that it lets you hand in; hand it a client made by
:func:`redrive.wrap` and each model call becomes a recorded, replayable step.
The modules below add the other half: the framework's tool objects built from
a :func:`redrive.tool`, so a tool's side effect is claimed and journaled too.

- :mod:`redrive.integrations.openai_agents`: the OpenAI Agents SDK (extra ``agents``).
- :mod:`redrive.integrations.pydantic_ai`: pydantic-ai (extra ``pydantic-ai``).
- :mod:`redrive.integrations.langchain`: LangChain and LangGraph (extra ``langchain``).

Each module imports its framework when imported, so importing one without its
extra raises ``ImportError`` naming the extra to install.
"""

from __future__ import annotations

__all__: list[str] = []
