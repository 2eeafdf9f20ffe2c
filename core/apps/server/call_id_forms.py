"""Tool-call ids another provider made, rewritten in the form the served model's template wants.

A client's history carries the ids of whoever answered before: OpenAI's
``call_...``, Anthropic's ``toolu_...``, another server's. Some chat templates
demand their own form and fail on any other (Mistral's: exactly nine letters
or digits). :class:`CallIdForm` learns the form from the backend's own
``make_call_id`` (the ids it gives new calls) and :func:`with_template_ids`
rewrites every id of a conversation that does not fit it:

* the new id is derived from the old one (a hash), so the same id becomes the
  same new id in the call and in the result that answers it, and in every later
  request that sends the conversation again (the prompt stays the same, and a
  runtime's prompt cache keeps working);
* an id that already fits (one this server gave, or a provider that happens to
  use the same form) is kept as it is;
* a form whose ids differ in length (a counter, as Kimi's ``functions.NAME:N``)
  is not a form a template checks, so nothing is rewritten for it.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import attrs

from ...vocabulary.history import Message, ToolCall

__all__ = ["CallIdForm", "with_template_ids"]

_SAMPLES: Final = 16
_CLASSES: Final = (string.digits, string.ascii_lowercase, string.ascii_uppercase)
_HEX: Final = string.digits + "abcdef"


def _alphabet(chars: Iterable[str]) -> str:
    """The characters random ids of this form are drawn from: the classes (digits,
    lower and upper case letters; lower-case hex when only those were seen) the
    sampled characters belong to, and any other character seen."""
    seen = set(chars)
    if seen and seen <= set(_HEX):
        return _HEX if seen - set(string.digits) else string.digits
    classes = [c for c in _CLASSES if seen & set(c)]
    other = sorted(seen - set("".join(classes)))
    return "".join(classes) + "".join(other)


@attrs.frozen
class CallIdForm:
    """The ids a template wants: a fixed prefix, then ``length`` characters of
    ``alphabet``.

    :ivar prefix: what every id starts with (``call_``, or nothing).
    :ivar length: the number of characters after the prefix.
    :ivar alphabet: the characters they are drawn from.
    """

    prefix: str
    length: int
    alphabet: str

    @classmethod
    def of(cls, make_call_id: Callable[[int], str]) -> CallIdForm | None:
        """The form of ``make_call_id``'s ids, or ``None`` when they have no fixed one."""
        samples = [make_call_id(i) for i in range(_SAMPLES)]
        if len({len(s) for s in samples}) != 1 or not samples[0]:
            return None
        prefix = samples[0]
        for sample in samples[1:]:
            while not sample.startswith(prefix):
                prefix = prefix[:-1]
        if len(set(samples)) == 1:  # one id for every call: nothing to learn from
            return None
        rest = [s[len(prefix):] for s in samples]
        return cls(prefix, len(rest[0]), _alphabet("".join(rest)))

    def fits(self, call_id: str) -> bool:
        """Whether ``call_id`` is already of this form."""
        body = call_id[len(self.prefix):]
        return (call_id.startswith(self.prefix) and len(body) == self.length
                and all(c in self.alphabet for c in body))

    def derive(self, call_id: str, attempt: int = 0) -> str:
        """An id of this form made from ``call_id`` (the same for the same id and
        ``attempt``)."""
        seed = f"{attempt}:{call_id}".encode("utf-8", "surrogatepass")
        digits: list[str] = []
        block = 0
        while len(digits) < self.length:
            number = int.from_bytes(hashlib.sha256(seed + bytes([block])).digest(), "big")
            block += 1
            while number and len(digits) < self.length:
                number, rest = divmod(number, len(self.alphabet))
                digits.append(self.alphabet[rest])
        return self.prefix + "".join(digits)


def with_template_ids(messages: Sequence[Message], form: CallIdForm | None) -> list[Message]:
    """``messages`` with every call id that does not fit ``form`` rewritten to one
    that does, the same way in a call and in its result."""
    if form is None:
        return list(messages)
    ids: list[str] = []
    for message in messages:
        ids.extend(call.id for call in message.tool_calls)
        if message.tool_call_id is not None:
            ids.append(message.tool_call_id)
    taken = {i for i in ids if form.fits(i)}
    mapping: dict[str, str] = {}
    for old in dict.fromkeys(ids):
        if old in taken:
            continue
        attempt = 0
        new = form.derive(old)
        while new in taken:
            attempt += 1
            new = form.derive(old, attempt)
        mapping[old] = new
        taken.add(new)
    if not mapping:
        return list(messages)
    out = []
    for message in messages:
        if message.tool_calls:
            message = attrs.evolve(message, tool_calls=tuple(
                ToolCall(mapping.get(c.id, c.id), c.name, c.arguments)
                for c in message.tool_calls))
        if message.tool_call_id is not None and message.tool_call_id in mapping:
            message = attrs.evolve(message, tool_call_id=mapping[message.tool_call_id])
        out.append(message)
    return out
