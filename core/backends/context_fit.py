"""The context fit: how much of a conversation fits a local model's context window.

This is not a limit on untrusted input (those are :mod:`toolwire.limits`): the room is
the model's own, ``n_ctx - max_tokens`` tokens, and what does not fit is dropped, not
refused.

A prompt must leave room for the reply: it may take at most
``n_ctx - max_tokens`` tokens, counted on the fully rendered prompt (the tool
block included). When it does not fit, :func:`prune_history` drops whole pieces
of the oldest history until it does. The function is pure: it knows nothing of
llama.cpp and is given a ``count`` callable that renders and tokenizes.

What may be dropped, in this order (oldest first within each step):

1. tool turns of earlier exchanges: an assistant message that called tools
   together with every tool result answering it (a call never loses its result,
   nor a result its call); the question and the final answer stay;
2. whole earlier exchanges: a user message and all that answered it, so the
   conversation still starts with a user message (templates that insist on
   alternating roles keep rendering);
3. tool turns of the current exchange, except the latest one.

What is never dropped: the system prompt, the user message being answered (on
the chat's reserved final turn also the question before the final-answer
prompt), and the latest tool turn with its results. If those alone do not fit,
the result says by how much.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from toolwire.vocabulary.cancel import CancelToken
from toolwire.vocabulary.history import Message

__all__ = ["CHARS_PER_TOKEN_BOUND", "ContextFit", "FittingCancelled", "prune_history",
           "removal_order"]


@attrs.frozen
class ContextFit:
    """What :func:`prune_history` decided.

    :ivar messages: the messages to render (all of them when nothing was dropped).
    :ivar tokens: the prompt size of ``messages`` as counted.
    :ivar room: the most tokens the prompt may take (``n_ctx - max_tokens``).
    :ivar removed: how many messages were dropped.
    """

    messages: tuple[Message, ...]
    tokens: int
    room: int
    removed: int = 0

    @property
    def fits(self) -> bool:
        """Whether the prompt fits the room."""
        return self.tokens <= self.room

    @property
    def over_by(self) -> int:
        """Tokens over the room (0 when it fits)."""
        return max(self.tokens - self.room, 0)


def _units(messages: Sequence[Message], start: int) -> list[list[int]]:
    """Group indices from ``start`` on: an assistant message with calls owns the
    tool messages right after it; every other message is a unit of its own (a
    stray tool message joins the unit before it)."""
    units: list[list[int]] = []
    for i in range(start, len(messages)):
        message = messages[i]
        if message.role == "tool" and units:
            head = messages[units[-1][0]]
            if (head.role == "assistant" and head.tool_calls) or head.role == "tool":
                units[-1].append(i)
                continue
        units.append([i])
    return units


def _is_tool_turn(messages: Sequence[Message], unit: list[int]) -> bool:
    head = messages[unit[0]]
    return bool(head.role == "assistant" and head.tool_calls) or head.role == "tool"


def removal_order(messages: Sequence[Message], *,
                  final_answer_prompt: bool = False) -> list[tuple[int, ...]]:
    """The groups of message indices that may be dropped, first to go first.

    :param final_answer_prompt: the last message is the chat's final-answer
        prompt (a user message after tool results): the user question before it
        is protected too.
    """
    start = 1 if messages and messages[0].role == "system" else 0
    user_positions = [i for i in range(start, len(messages)) if messages[i].role == "user"]
    if not user_positions:
        return []
    question = user_positions[-1]
    if final_answer_prompt and len(user_positions) > 1:
        question = user_positions[-2]
    earlier = _units(messages, start)
    earlier = [u for u in earlier if u[0] < question]
    current = [u for u in _units(messages, question) if u[0] != question]

    step1 = [u for u in earlier if _is_tool_turn(messages, u)]
    # Exchanges: a user message and the non-tool-turn units up to the next user message.
    step2: list[list[int]] = []
    for unit in earlier:
        if _is_tool_turn(messages, unit):
            continue
        if messages[unit[0]].role == "user" or not step2:
            step2.append(list(unit))
        else:
            step2[-1].extend(unit)
    tool_turns = [u for u in current if _is_tool_turn(messages, u)]
    step3 = tool_turns[:-1]
    return [tuple(u) for u in (*step1, *step2, *step3)]


class FittingCancelled(Exception):
    """The reply was cancelled while its prompt was being fitted."""


#: A prompt holding more characters than this many per token of the room is
#: taken not to fit without rendering it whole (no tokenizer packs more than
#: a few characters into a token on average); the pruning then starts from the
#: smallest prompt. Only the order of the trials depends on it, never the result.
CHARS_PER_TOKEN_BOUND = 8

Count = Callable[[Sequence[Message]], int | None]


def prune_history(messages: Sequence[Message], count: Count, room: int, *,
                  final_answer_prompt: bool = False,
                  cancel: CancelToken | None = None) -> ContextFit:
    """Drop the fewest groups of old messages (see the module doc) so the prompt fits.

    :param messages: the conversation as the model would see it, system prompt first.
    :param count: renders a list of messages and returns its prompt size in
        tokens, or ``None`` when the prompt is too large to render (a template's
        output or time bound): it then counts as over the room.
    :param room: the most tokens the prompt may take (``n_ctx - max_tokens``).
    :param final_answer_prompt: the last message is the chat's final-answer prompt.
    :param cancel: checked before every trial.
    :returns: the messages to render; ``fits`` is false when even the protected
        messages exceed the room (then ``messages`` holds just those).
    :raises FittingCancelled: ``cancel`` was set.

    The work is bounded by the prompt that fits, not by the history. A history
    that plausibly fits (:data:`CHARS_PER_TOKEN_BOUND`) is tried whole, then the
    number of groups to drop is bisected (each trial at most that small
    history). A longer one is never rendered whole: trials start from the
    smallest prompt and keep twice as many groups each time until one
    overflows, then bisect; every trial renders at most about twice the prompt
    that fits, so a history of 32,000 messages costs little more than one of
    a hundred.
    """
    full = tuple(messages)
    order = removal_order(full, final_answer_prompt=final_answer_prompt)
    sizes: dict[int, int] = {}

    def keep(k: int) -> tuple[Message, ...]:
        if k == 0:
            return full
        dropped = {i for group in order[:k] for i in group}
        return tuple(m for i, m in enumerate(full) if i not in dropped)

    def size(k: int) -> int:
        if k not in sizes:
            if cancel is not None and cancel.cancelled:
                raise FittingCancelled
            counted = count(keep(k))
            sizes[k] = room + 1 if counted is None else counted
        return sizes[k]

    def result(k: int) -> ContextFit:
        kept = keep(k)
        return ContextFit(kept, size(k), room, len(full) - len(kept))

    characters = sum(len(m.content or "") for m in full)
    small = characters <= room * CHARS_PER_TOKEN_BOUND
    if not order or small:
        if size(0) <= room or not order:
            return result(0)
    groups = len(order)
    if size(groups) > room:
        return result(groups)  # even the protected messages do not fit
    fits, over = groups, 0  # size(fits) <= room < size(over)
    if not small:
        # Gallop up from the smallest prompt: keep 1, 2, 4... more groups until one
        # overflows, so no trial renders much more than the prompt that fits.
        step = 1
        while True:
            trial = max(groups - step, 0)
            if trial == 0 or size(trial) > room:
                over = trial
                break
            fits = trial
            step *= 2
        if over == 0 and size(0) <= room:
            return result(0)
    while fits - over > 1:
        middle = (fits + over) // 2
        if size(middle) <= room:
            fits = middle
        else:
            over = middle
    return result(fits)
