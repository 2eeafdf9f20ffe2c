"""Fitting a conversation into a local model's context window.

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

from toolwire.conversation.history import Message

__all__ = ["PruneResult", "prune_history", "removal_order"]


@attrs.frozen
class PruneResult:
    """What :func:`prune_history` decided.

    :ivar messages: the messages to render (all of them when nothing was dropped).
    :ivar tokens: the prompt size of ``messages`` as counted.
    :ivar budget: the most tokens the prompt may take.
    :ivar removed: how many messages were dropped.
    """

    messages: tuple[Message, ...]
    tokens: int
    budget: int
    removed: int = 0

    @property
    def fits(self) -> bool:
        """Whether the prompt fits the budget."""
        return self.tokens <= self.budget

    @property
    def over_by(self) -> int:
        """Tokens over the budget (0 when it fits)."""
        return max(self.tokens - self.budget, 0)


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


def prune_history(messages: Sequence[Message], count: Callable[[Sequence[Message]], int],
                  budget: int, *, final_answer_prompt: bool = False) -> PruneResult:
    """Drop the fewest groups of old messages (see the module doc) so the prompt fits.

    :param messages: the conversation as the model would see it, system prompt first.
    :param count: renders a list of messages and returns its prompt size in tokens.
    :param budget: the most tokens the prompt may take (``n_ctx - max_tokens``).
    :param final_answer_prompt: the last message is the chat's final-answer prompt.
    :returns: the messages to render; ``fits`` is false when even the protected
        messages exceed the budget (then ``messages`` holds just those).

    The number of groups dropped is found by bisection, so a long conversation
    costs a logarithmic number of renders.
    """
    full = tuple(messages)
    tokens = count(full)
    if tokens <= budget:
        return PruneResult(full, tokens, budget)
    order = removal_order(full, final_answer_prompt=final_answer_prompt)

    def keep(k: int) -> tuple[Message, ...]:
        dropped = {i for group in order[:k] for i in group}
        return tuple(m for i, m in enumerate(full) if i not in dropped)

    sizes: dict[int, int] = {0: tokens}

    def size(k: int) -> int:
        if k not in sizes:
            sizes[k] = count(keep(k))
        return sizes[k]

    if not order or size(len(order)) > budget:
        k = len(order)
        kept = keep(k)
        return PruneResult(kept, size(k), budget, len(full) - len(kept))
    low, high = 0, len(order)  # size(low) > budget >= size(high)
    while high - low > 1:
        middle = (low + high) // 2
        if size(middle) <= budget:
            high = middle
        else:
            low = middle
    kept = keep(high)
    return PruneResult(kept, size(high), budget, len(full) - len(kept))
