"""What ``show`` and ``view`` print besides steps: usage, what replay saved, and run events."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..replay import Price, prices_of

__all__ = ["add_prices_option", "event_lines", "prices_from", "usage_line"]


def add_prices_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--prices FILE.json`` (model -> prices per million tokens) to ``parser``."""
    parser.add_argument(
        "--prices",
        metavar="FILE.json",
        help='prices per million tokens, by model, for the cost: {"gpt-4o": {"input": 2.5, '
        '"output": 10, "cached": 1.25}} (redrive knows no prices)',
    )


def prices_from(args: argparse.Namespace) -> dict[str, Price]:
    """The price table named by ``--prices`` (empty without it).

    Raises:
        OSError: the file cannot be read. ValueError, TypeError: it is not a price table.
    """
    path = getattr(args, "prices", None)
    if not path:
        return {}
    with open(path, encoding="utf-8") as fh:
        return prices_of(json.load(fh))


def _tokens(part: dict[str, Any]) -> str:
    text = f"{part['input_tokens']}/{part['output_tokens']} tokens in/out"
    extra = [
        f"{part[k]} {label}"
        for k, label in (
            ("cached_tokens", "cached"),
            ("cache_write_tokens", "written to cache"),
            ("reasoning_tokens", "reasoning"),
        )
        if part[k]
    ]
    return text + (f" ({', '.join(extra)})" if extra else "")


def _cost(part: dict[str, Any]) -> str:
    if part["cost"] is None:
        return ""
    unpriced = f" (no price for {', '.join(part['unpriced'])})" if part["unpriced"] else ""
    return f", cost {part['cost']:.6g}{unpriced}"


def usage_line(usage: dict[str, Any]) -> str:
    """One line: what the live model calls spent and what replay saved (``RunUsage.as_dict()``)."""
    spent, saved = usage["spent"], usage["saved"]
    return (
        f"usage: {spent['calls']} live model call(s), {_tokens(spent)}{_cost(spent)}, "
        f"{spent['seconds']:.2f} s; replay saved {saved['calls']} call(s), "
        f"{_tokens(saved)}{_cost(saved)}, {saved['seconds']:.2f} s"
    )


def event_lines(events: list[dict[str, Any]]) -> list[str]:
    """The run's interruptions, resumes, resolutions and decisions, one line each."""
    return [f"  seq {e['seq']}: {e['text']}" for e in events]
