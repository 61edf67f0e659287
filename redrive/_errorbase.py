"""The root of redrive's errors and their structured fields, and the next steps they propose.

:class:`ReplayError` takes the fields its subclass declares as keywords
(``@_fields``); :class:`NextStep` is one next step an error proposes, as
data (DESIGN invariant 17). :mod:`redrive.errors` builds the hierarchy on
these and is where users import them from.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self, TypeVar, dataclass_transform

__all__ = ["NextStep", "NextStepAction", "ReplayError"]


_E = TypeVar("_E", bound=type)
_COMMON = frozenset({"message", "run_id", "seq"})


def _field(*, default: Any = None, kw_only: bool = True) -> Any:
    """Declare a field that is positional, or whose default is not of its type.

    ``kw_only=False``: the message; a default not of the field's type: a
    reason derived when not given. mypy reads these arguments.

    Returns:
        ``default``, the class attribute.
    """
    return default


@dataclass_transform(kw_only_default=True, field_specifiers=(_field,))
def _fields(cls: _E) -> _E:
    """Give an error class its declared fields: annotated class attributes, default None.

    Its constructor (:meth:`ReplayError.__init__`) then takes exactly those
    fields as keywords; mypy reads the same declaration as a dataclass's.
    """
    own = {
        name: cls.__dict__.get(name)
        for name, annotation in inspect.get_annotations(cls).items()
        if name not in _COMMON and "ClassVar" not in str(annotation)
    }
    cls._defaults = {**getattr(cls, "_defaults", {}), **own}  # type: ignore[attr-defined]
    cls._strict = cls  # type: ignore[attr-defined]
    return cls


class NextStepAction(enum.StrEnum):
    """What kind of next step an error proposes (a ``str``; DESIGN invariant 17).

    Every step an error proposes keeps the resume contract's invariants when
    followed; where no automatic step does, the error proposes ``PERSON``: a
    person must decide, with the command named in the step's text.
    """

    RESOLVE = "resolve"
    """A person checks the outside system, then ``redrive resolve RUN SEQ --done ... |
    --not-done`` (params: ``seq``, ``outcomes``: the choices that are safe)."""
    DECIDE = "decide"
    """A person decides an approval: ``redrive decide RUN NAME --approve | --reject``
    (params: ``name``)."""
    RESUME = "resume"
    """Run the run again with the same run_id, as it is (later, or once a named cause is
    fixed: params may say ``after``)."""
    POLICY = "policy"
    """Resume with another replay policy or run option (params: ``options``, the keyword
    options of ``redrive.run`` to pass, e.g. ``{"on_in_flight": "tell_model"}``)."""
    FORK = "fork"
    """Copy the run up to (not including) seq ``before`` into a new run and continue that
    one: ``redrive.fork(journal, run_id, new_run_id, before=SEQ)`` (params: ``before``)."""
    RERECORD = "rerecord"
    """Record a new run (a new run_id, or ``redrive check --update`` for a test fixture)."""
    PERSON = "person"
    """No automatic step keeps the invariants: a person must decide (params:
    ``commands``, the commands that show what they need and record their decision)."""


#: The heading of the advice part of an error message.
_WHAT_TO_DO = "What to do:"


def _render_next_steps(next_steps: Sequence[NextStep]) -> str:
    """The "What to do" part of an error message, made from its ``next_steps``.

    Returns:
        ``"What to do:"`` and one numbered line per step ("" for no step).
    """
    if not next_steps:
        return ""
    lines = [_WHAT_TO_DO, *(f"  {n}. {step.text}" for n, step in enumerate(next_steps, 1))]
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class NextStep:
    """One next step an error proposes, as data a program (or a test) can take.

    Attributes:
        action: what kind of step (:class:`NextStepAction`).
        text: the step in words, with the command or code to type.
        params: the step's parameters (see each action); plain data.
    """

    action: NextStepAction
    text: str
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@_fields
class ReplayError(Exception):
    """Root of every redrive error.

    Args:
        message: the human-readable text (what happened, to which run, what next).
        run_id: the run concerned, when there is one.
        seq: the seq concerned (of the step, or the first one written), when known.
        **fields: the class's declared fields. ``ReplayError`` itself, and a
            subclass defined outside this module without ``@_fields``, take any
            keywords (set as attributes).

    Raises:
        TypeError: a keyword that is not a field of the error's class.
    """

    _defaults: ClassVar[dict[str, Any]]
    _strict: ClassVar[type]

    message: str = _field(kw_only=False)
    run_id: str | None = None
    seq: int | None = None
    #: the next steps this error proposes, safest first (DESIGN invariant 17); () when
    #: the message's advice has not been given as data
    next_steps: tuple[NextStep, ...] = _field(default=())

    def __init__(
        self, message: str, *, run_id: str | None = None, seq: int | None = None, **fields: Any
    ) -> None:
        super().__init__(message)
        cls = type(self)
        if cls._strict is cls and cls is not ReplayError:
            unknown = sorted(set(fields) - set(cls._defaults))
            if unknown:
                raise TypeError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}")
        self.message = message
        self.run_id = run_id
        self.seq = seq
        values = {**cls._defaults, **fields}
        self._settle(values)
        self._fields = values
        for name, value in values.items():
            setattr(self, name, value)

    def _settle(self, fields: dict[str, Any]) -> None:
        """Complete ``fields`` in place before they are set (derive a reason...)."""

    def with_next_steps(self, next_steps: tuple[NextStep, ...]) -> Self:
        """Set :attr:`next_steps` and make the message's "What to do" part say them.

        The advice the message had (from ``"What to do:"`` on) is replaced by
        :func:`_render_next_steps` (a numbered list), so the text and the data
        cannot drift apart.

        Returns:
            The error itself.
        """
        message = self.message
        at = 0 if message.startswith(_WHAT_TO_DO) else message.find("\n" + _WHAT_TO_DO)
        if at >= 0:
            message = message[:at]
        rendered = _render_next_steps(next_steps)
        self.message = f"{message}\n{rendered}" if rendered else message
        self.args = (self.message,)
        self.next_steps = next_steps
        self._fields["next_steps"] = next_steps  # to_fields() and pickling say the same
        return self

    @property
    def fields(self) -> dict[str, Any]:
        """The error's own structured fields (a new dict), without ``run_id`` and ``seq``."""
        return dict(self._fields)

    def __reduce__(self) -> tuple[Any, ...]:
        # the instance dict too: notes (add_note) and attributes a subclass sets itself
        return (_rebuild, (type(self), self.message, self.to_fields()), dict(self.__dict__))

    def to_fields(self) -> dict[str, Any]:
        """Return the structured fields (``run_id``, ``seq`` and the error's own)."""
        return {"run_id": self.run_id, "seq": self.seq, **self._fields}

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[ReplayError], message: str, fields: dict[str, Any]) -> ReplayError:
    err = cls.__new__(cls)
    ReplayError.__init__(err, message, **fields)
    return err
