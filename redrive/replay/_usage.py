"""Usage and spend of a run's model calls, across attempts and resumes (``run.usage``).

Each model call made live is journaled once (a ``model_response`` frame), so
the spend of a run is read from its journal: every response frame counts
once, whichever execution made it, and a replayed step (answered from the
journal, no call made) is never counted again. What replay saved is counted
apart: the calls, tokens, cost and seconds an execution did not spend
because the journal answered them.

Tokens are read from each provider's own ``usage`` shape (the semantic
view of the step, streamed or not):

* OpenAI Chat Completions: ``prompt_tokens`` (cached ones included),
  ``prompt_tokens_details.cached_tokens``, ``completion_tokens`` (reasoning
  included), ``completion_tokens_details.reasoning_tokens``;
* OpenAI Responses: ``input_tokens``, ``input_tokens_details.cached_tokens``,
  ``output_tokens``, ``output_tokens_details.reasoning_tokens``;
* Anthropic Messages: ``input_tokens`` counts only the tokens after the last
  cache breakpoint, so input is ``input_tokens + cache_read_input_tokens +
  cache_creation_input_tokens``; cached is ``cache_read_input_tokens``.

litellm and pydantic-ai call these APIs through the wrapped SDK clients, so
their calls are read the same way. Cost is computed only from prices the
user gives (:class:`Price`, per million tokens); redrive knows no price.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ..frames import Frame, Kind, StoredValue, decode
from ._steps import StepReader

__all__ = [
    "RESUMED",
    "Budget",
    "Meter",
    "Price",
    "RunUsage",
    "Tokens",
    "Usage",
    "prices_of",
    "read_usage",
    "run_usage",
    "view_of",
    "with_usage",
]

#: Name of the note a resumed execution writes with its first frame (worker, resume point).
RESUMED = "resumed"


def _count(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    return 0


def _at(usage: dict[str, Any], *path: str) -> int:
    value: Any = usage
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return _count(value)


@attrs.frozen(kw_only=True)
class Tokens:
    """Token counts of one or more model calls.

    Attributes:
        input: input tokens, cached and cache-written ones included.
        output: output tokens, reasoning ones included.
        cached: input tokens read from the provider's prompt cache.
        cache_write: input tokens written to the prompt cache (Anthropic).
        reasoning: output tokens spent on reasoning.
    """

    input: int = 0
    output: int = 0
    cached: int = 0
    cache_write: int = 0
    reasoning: int = 0

    @property
    def total(self) -> int:
        """``input + output``: what ``max_tokens`` counts."""
        return self.input + self.output

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            input=self.input + other.input,
            output=self.output + other.output,
            cached=self.cached + other.cached,
            cache_write=self.cache_write + other.cache_write,
            reasoning=self.reasoning + other.reasoning,
        )

    @classmethod
    def of(cls, usage: Any) -> Tokens:
        """Read a response's ``usage`` object (OpenAI chat or Responses, Anthropic).

        Args:
            usage: the ``usage`` of a response (see the module doc for the shapes);
                anything that is not a dict, and counts that are not
                non-negative ints, read as 0.

        Returns:
            The counts, input including cached tokens whatever the provider's convention.
        """
        if not isinstance(usage, dict):
            return cls()
        if "prompt_tokens" in usage or "completion_tokens" in usage:  # OpenAI chat
            return cls(
                input=_at(usage, "prompt_tokens"),
                output=_at(usage, "completion_tokens"),
                cached=_at(usage, "prompt_tokens_details", "cached_tokens"),
                reasoning=_at(usage, "completion_tokens_details", "reasoning_tokens"),
            )
        read = _at(usage, "cache_read_input_tokens")
        written = _at(usage, "cache_creation_input_tokens")
        if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
            return cls(  # Anthropic: input_tokens excludes what the cache read and wrote
                input=_at(usage, "input_tokens") + read + written,
                output=_at(usage, "output_tokens"),
                cached=read,
                cache_write=written,
            )
        return cls(  # OpenAI Responses (and an Anthropic usage without cache fields)
            input=_at(usage, "input_tokens"),
            output=_at(usage, "output_tokens"),
            cached=_at(usage, "input_tokens_details", "cached_tokens"),
            reasoning=_at(usage, "output_tokens_details", "reasoning_tokens"),
        )


def _price(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"price {value!r}: use a non-negative number per million tokens")
    return float(value)


def _required(value: Any) -> float:
    found = _price(value)
    if found is None:
        raise ValueError("the input and output prices are required (per million tokens)")
    return found


@attrs.frozen(kw_only=True)
class Price:
    """What one model's tokens cost, per million tokens, in the user's currency.

    Only the prices a user gives are used; redrive knows none. A price left
    out takes the one it is a kind of: ``cached`` and ``cache_write`` take
    ``input``, ``reasoning`` takes ``output`` (providers bill reasoning tokens
    as output tokens).

    Attributes:
        input: price of an uncached input token, per million.
        output: price of an output token, per million.
        cached: price of an input token read from the cache, per million.
        cache_write: price of an input token written to the cache, per million.
        reasoning: price of a reasoning token, per million.

    Raises:
        ValueError: a price is negative or not a number.
    """

    input: float = attrs.field(converter=_required)
    output: float = attrs.field(converter=_required)
    cached: float | None = attrs.field(default=None, converter=_price)
    cache_write: float | None = attrs.field(default=None, converter=_price)
    reasoning: float | None = attrs.field(default=None, converter=_price)

    def cost(self, tokens: Tokens) -> float:
        """The cost of ``tokens`` at these prices (in the prices' currency)."""
        cached = self.input if self.cached is None else self.cached
        written = self.input if self.cache_write is None else self.cache_write
        reasoning = self.output if self.reasoning is None else self.reasoning
        plain_in = max(tokens.input - tokens.cached - tokens.cache_write, 0)
        plain_out = max(tokens.output - tokens.reasoning, 0)
        return (
            plain_in * self.input
            + tokens.cached * cached
            + tokens.cache_write * written
            + plain_out * self.output
            + tokens.reasoning * reasoning
        ) / 1_000_000


def prices_of(prices: Any) -> dict[str, Price]:
    """Check a ``prices=`` table: ``{model: Price | {"input": ..., "output": ...}}``.

    Raises:
        TypeError: not a mapping of model names to a :class:`Price` or a dict of prices.
        ValueError: a price is negative, or a dict has a key that is no price field.
    """
    if not isinstance(prices, Mapping):
        raise TypeError(f"prices={prices!r}: use a dict of model name -> redrive.Price")
    table: dict[str, Price] = {}
    for model, price in prices.items():
        if not isinstance(model, str) or not model:
            raise TypeError(f"prices: model name {model!r} must be a non-empty string")
        if isinstance(price, Price):
            table[model] = price
        elif isinstance(price, Mapping):
            fields = {"input", "output", "cached", "cache_write", "reasoning"}
            unknown = sorted(set(price) - fields)
            if unknown or not {"input", "output"} <= set(price):
                raise ValueError(
                    f"prices[{model!r}]={dict(price)!r}: give 'input' and 'output' (and "
                    f"optionally 'cached', 'cache_write', 'reasoning'), per million tokens"
                )
            table[model] = Price(**price)
        else:
            raise TypeError(f"prices[{model!r}]={price!r}: use a redrive.Price or a dict")
    return table


@attrs.frozen(kw_only=True)
class Usage:
    """What some model calls used.

    Attributes:
        calls: how many model calls.
        tokens: their token counts (:class:`Tokens`).
        cost: their cost at the given prices, or None when no prices were given
            (calls of a model without a price add nothing: see ``unpriced``).
        seconds: their wall time as recorded, in seconds.
        unpriced: models with calls here and no price in the table (sorted).
    """

    calls: int = 0
    tokens: Tokens = Tokens()
    cost: float | None = None
    seconds: float = 0.0
    unpriced: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json`` and the timeline page."""
        return {
            "calls": self.calls,
            "input_tokens": self.tokens.input,
            "output_tokens": self.tokens.output,
            "cached_tokens": self.tokens.cached,
            "cache_write_tokens": self.tokens.cache_write,
            "reasoning_tokens": self.tokens.reasoning,
            "cost": None if self.cost is None else round(self.cost, 9),
            "seconds": round(self.seconds, 3),
            "unpriced": list(self.unpriced),
        }


@attrs.frozen(kw_only=True)
class RunUsage:
    """A run's usage: what its live model calls spent, and what replay saved.

    Attributes:
        spent: every model call made live, each once, across attempts and resumes.
        saved: the calls replay answered from the journal instead (for a live
            :class:`~redrive.Run`, this execution's; read from a journal, every
            resume's).
    """

    spent: Usage = Usage()
    saved: Usage = Usage()

    @property
    def input_tokens(self) -> int:
        """Input tokens spent (cached ones included)."""
        return self.spent.tokens.input

    @property
    def output_tokens(self) -> int:
        """Output tokens spent (reasoning ones included)."""
        return self.spent.tokens.output

    @property
    def cached_tokens(self) -> int:
        """Input tokens spent that the provider read from its cache."""
        return self.spent.tokens.cached

    @property
    def reasoning_tokens(self) -> int:
        """Output tokens spent on reasoning."""
        return self.spent.tokens.reasoning

    @property
    def cost(self) -> float | None:
        """The cost spent at the given prices, or None without prices."""
        return self.spent.cost

    def as_dict(self) -> dict[str, Any]:
        """Plain data: ``{"spent": {...}, "saved": {...}}`` (see :meth:`Usage.as_dict`)."""
        return {"spent": self.spent.as_dict(), "saved": self.saved.as_dict()}


def view_of(request: dict[str, Any] | None, outcome: dict[str, Any] | None) -> dict[str, Any]:
    """A model step's semantic view: the request's, updated by the response's.

    A step with no ``usage`` in its view (a ``redrive.model`` callable) whose
    recorded response is a dict with a ``usage`` (an OpenAI- or
    Anthropic-shaped answer) is read from that response (``model``, ``usage``).
    """
    view: dict[str, Any] = {}
    for holder in (request, outcome):
        found = holder.get("view") if isinstance(holder, dict) else None
        if isinstance(found, dict):
            view.update(found)
    response = outcome.get("response") if isinstance(outcome, dict) else None
    return with_usage(view, response)


def with_usage(view: Any, response: Any) -> dict[str, Any]:
    """``view`` (a dict, else empty) with ``response``'s ``model`` and ``usage`` if it has none."""
    shown: dict[str, Any] = dict(view) if isinstance(view, dict) else {}
    plain: Any = response
    if "usage" not in shown and isinstance(response, StoredValue):
        if b"usage" not in response.data:
            return shown  # bytes that never spell the key hold no ``usage`` field: no decode
        try:  # a live response as it is journaled (plain data read; other values: no usage)
            plain = decode(response.data)
        except ValueError:
            plain = None
    if "usage" not in shown and isinstance(plain, dict) and "usage" in plain:
        shown["usage"] = plain["usage"]
        shown.setdefault("model", plain.get("model"))
    return shown


#: What :meth:`Tokens.of` reads from anything but a dict (shared: Tokens are frozen).
_NO_TOKENS = Tokens()


@attrs.define
class Meter:
    """Adds up model calls (tokens, seconds, model) and prices them.

    Args:
        prices: the price table (model name -> :class:`Price`); empty: no cost.
    """

    prices: Mapping[str, Price] = attrs.field(factory=dict)
    calls: int = 0
    tokens: Tokens = Tokens()
    seconds: float = 0.0
    cost: float = 0.0
    unpriced: set[str] = attrs.field(factory=set)

    def add(self, view: dict[str, Any], seconds: float = 0.0) -> None:
        """Count one model call from its semantic view (``model`` and ``usage``)."""
        usage = view.get("usage")
        tokens = Tokens.of(usage) if isinstance(usage, dict) else _NO_TOKENS
        self.calls += 1
        if tokens is not _NO_TOKENS:  # a call without usage adds no tokens: no new Tokens
            self.tokens = self.tokens + tokens
        self.seconds += max(seconds, 0.0)
        model = view.get("model")
        price = self.prices.get(model) if isinstance(model, str) else None
        if price is not None:
            self.cost += price.cost(tokens)
        elif self.prices:
            self.unpriced.add(model if isinstance(model, str) else "(unknown model)")

    def usage(self) -> Usage:
        """What was added so far."""
        return Usage(
            calls=self.calls,
            tokens=self.tokens,
            cost=self.cost if self.prices else None,
            seconds=self.seconds,
            unpriced=tuple(sorted(self.unpriced)),
        )


@attrs.frozen(kw_only=True)
class Budget:
    """A run's spending limits, holding across its resumes (``max_tokens``, ``max_cost``).

    Attributes:
        max_tokens: the most input + output tokens the run's live calls may use, or None.
        max_cost: the most they may cost at ``prices``, or None.
        prices: the price table (model name -> :class:`Price`).
    """

    max_tokens: int | None = None
    max_cost: float | None = None
    prices: Mapping[str, Price] = attrs.field(factory=dict)

    def reached(self, spent: Usage) -> tuple[str, float, float] | None:
        """The first limit ``spent`` has reached: ``(what, used, limit)``, or None."""
        if self.max_tokens is not None and spent.tokens.total >= self.max_tokens:
            return "tokens", float(spent.tokens.total), float(self.max_tokens)
        if self.max_cost is not None and (spent.cost or 0.0) >= self.max_cost:
            return "cost", spent.cost or 0.0, self.max_cost
        return None


def _seconds(request: dict[str, Any], response: Frame) -> float:
    started = request.get("started_at")
    return response.at - float(started) if isinstance(started, int | float) else 0.0


def read_usage(frames: Iterable[Frame], prices: Mapping[str, Price] | None = None) -> RunUsage:
    """Read a stored run's usage from its frames (seq order).

    ``spent`` counts every ``model_response`` frame once (a stream cut short
    and asked again is two calls, both billed). ``saved`` counts, for each
    ``resumed`` note, the model steps that resume replayed (as the note lists them).

    Raises:
        JournalCorruptError: the frames fail their seq or chain check.
    """
    table = dict(prices or {})
    spent, saved = Meter(table), Meter(table)
    reader = StepReader()
    answered: set[int] = set()
    calls: dict[int, tuple[dict[str, Any], float]] = {}
    last_resume = -1
    for frame in frames:
        reader.feed(frame)
        if frame.kind == Kind.MODEL_RESPONSE.value:
            outcome = frame.data()
            ref = outcome.get("step")
            step = reader.steps.get(ref) if isinstance(ref, int) else None
            request = step.data if step is not None else {}
            # its time: from its request, unless an earlier execution journaled that request
            first = isinstance(ref, int) and ref not in answered and ref > last_resume
            seconds = _seconds(request, frame) if first else 0.0
            view = view_of(request, outcome)
            spent.add(view, seconds)
            if isinstance(ref, int):
                answered.add(ref)
                calls[ref] = (view, _seconds(request, frame))
        elif frame.kind == Kind.NOTE.value and frame.name == RESUMED:
            last_resume = frame.seq
            replayed = frame.data().get("replayed_models")
            for ref in replayed if isinstance(replayed, list) else []:
                if isinstance(ref, int) and ref in calls:
                    saved.add(*calls[ref])
    return RunUsage(spent=spent.usage(), saved=saved.usage())


def run_usage(journal: Any, run_id: str, *, prices: Any = None) -> RunUsage:
    """Return the usage of run ``run_id`` as its journal holds it (see :func:`read_usage`).

    Args:
        journal: an open journal (:func:`redrive.open_journal`).
        run_id: the run.
        prices: a price table (model name -> :class:`Price` or a dict of prices), or None.

    Raises:
        UnknownRunError: no such run. JournalCorruptError: its frames fail their checks.
    """
    from ..errors import UnknownRunError

    if journal.get_run(run_id) is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {journal.url}: list the runs with `redrive runs`",
            run_id=run_id,
        )
    return read_usage(journal.frames(run_id), prices_of(prices or {}))
