"""Special-token text in a message stays text: the prompt as pieces a tokenizer can trust.

A tokenizer that parses special tokens turns ``<|im_end|>`` anywhere in a prompt
into the control token that ends a turn, so a tool result (or a user message, a
tool description) holding that text could end its turn and forge a new one. The
rule: **a control token in the prompt can only come from the chat template's own
markup**. It holds for every template, whatever the template does with the
strings it is given (trims them, slices them, JSON-encodes them):

1. before rendering, every string the caller supplies (message contents,
   names, tool-call arguments, reasoning, tool schemas) has each control-token
   text replaced by a private-use placeholder character (:class:`ContentShield`);
   the template then renders as usual, and almost always sees exactly the
   strings it would have seen (a string holds a control-token text only when
   something is being smuggled);
2. after rendering, the prompt is cut where the tokenizer itself cuts text (at
   its special tokens: it tokenizes the text between two of them on its own):
   a stretch that holds a placeholder gets its original text back and is marked
   ``markup=False``, to be tokenized with special tokens off; everything else is
   markup, tokenized with special tokens on (:meth:`ContentShield.pieces`).

Because the cuts fall where the tokenizer cuts anyway, a prompt whose messages
hold no control-token text tokenizes exactly as before. The same cuts also
bound how many special tokens one tokenizer call sees
(:data:`SPECIAL_TOKENS_PER_PIECE`), whatever follows them: llama.cpp's
partitioning of a text by its special tokens costs time quadratic in their
number, which made fitting a long history superlinear (and a message of 30,000
calls, each token followed by a newline, minutes long). The tokenizer cuts right
after a special token, so a piece may end there; only a token that strips the
white space after it (llama.cpp's ``RSTRIP`` attribute, in
:attr:`SpecialTokens.rstrip`) has the cut after that white space instead, where
the tokenizer's own fragment begins.

Characters of the placeholder range (CJK Extension B) that a caller's string
holds are shielded too, so no string can pass for a placeholder; the
template's own text never holds an assigned placeholder. A placeholder a
template JSON-encodes with ``ensure_ascii`` (``\\ud840\\udc00``) comes back as
the original encoded the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final

import attrs

from ..limits import PromptLimits
from ..vocabulary.string_map import map_strings

__all__ = [
    "SPECIAL_TOKENS_PER_PIECE",
    "ContentShield",
    "PromptPiece",
    "ShieldRules",
    "SpecialTokens",
    "literal_pattern",
]

SPECIAL_TOKENS_PER_PIECE: Final = PromptLimits().special_tokens_per_piece
"""Special tokens in one markup piece, at most (a piece is cut after the next one)."""

# Placeholders are CJK ideographs of Extension B: printable (so Python's repr of
# a dict, which some templates print, leaves them alone), without case (upper()
# and lower() too), and not white space (trim()).
_PLACEHOLDER_FIRST: Final = 0x20000
_PLACEHOLDER_LAST: Final = 0x2A6DF
_PLACEHOLDER_RANGE: Final = f"[{chr(_PLACEHOLDER_FIRST)}-{chr(_PLACEHOLDER_LAST)}]"
_STRIPPED: Final = re.compile("[ \t\n\v\f\r]*")
"""The white space a stripping token drops (llama.cpp's ``isspace``, byte by byte)."""


@attrs.frozen
class PromptPiece:
    """A stretch of a rendered prompt and how to tokenize it.

    :ivar text: the text, as the model reads it.
    :ivar markup: ``True``: special-token text in it is the template's markup
        (tokenize with special tokens parsed); ``False``: it holds text from a
        message that merely looks like a special token (tokenize it as text).
    """

    text: str
    markup: bool = True


@attrs.frozen
class SpecialTokens:
    """The texts a runtime's tokenizer treats specially.

    :ivar control: texts that become special tokens only when special tokens
        are parsed (llama.cpp: CONTROL and UNKNOWN tokens).
    :ivar user_defined: texts that become tokens of their own even in plain text
        (llama.cpp: USER_DEFINED tokens, such as Qwen's ``<tool_call>``; llama.cpp
        also puts gpt-oss's ``<|start|>``, ``<|message|>``, ``<|channel|>`` here).
    :ivar rstrip: those of them after which the tokenizer drops the white space that
        follows (llama.cpp: the ``RSTRIP`` attribute, Phi-3's special tokens).
    """

    control: frozenset[str] = frozenset()
    user_defined: frozenset[str] = frozenset()
    rstrip: frozenset[str] = frozenset()

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "control", frozenset(t for t in self.control if t))
        object.__setattr__(self, "user_defined",
                           frozenset(t for t in self.user_defined if t) - self.control)
        object.__setattr__(self, "rstrip", frozenset(self.rstrip) & self.partition)

    @property
    def partition(self) -> frozenset[str]:
        """Every text the tokenizer cuts a prompt at."""
        return self.control | self.user_defined

    def shielded(self, template: str) -> frozenset[str]:
        """The texts a message may not produce as tokens under ``template``: every
        control text, and the user-defined ones the template writes as markup.

        (A user-defined token the template never writes, such as a run of
        spaces some vocabularies hold, stays an ordinary token in a message.)
        """
        return self.control | frozenset(t for t in self.user_defined if t in template)


def literal_pattern(texts: Iterable[str]) -> re.Pattern[str] | None:
    """A regex matching any of ``texts``, longest first at each position.

    Built as a trie (``<\\|im_(?:end|start)\\|>``), so thousands of tokens that
    share a prefix cost a few branches per position, not one per token.
    ``None`` when there is nothing to match.
    """
    words = sorted({t for t in texts if t})
    if not words:
        return None
    return re.compile(_trie(words))


def _trie(words: list[str]) -> str:
    """The pattern of sorted, distinct, non-empty ``words`` (recursively by first character)."""
    groups: dict[str, list[str]] = {}
    for word in words:
        groups.setdefault(word[0], []).append(word[1:])
    branches = []
    for first, rests in groups.items():
        prefix = re.escape(first)
        ends_here = "" in rests
        longer = [r for r in rests if r]
        # Follow a chain of single continuations as one literal run.
        while len(longer) > 0 and not ends_here:
            heads = {r[0] for r in longer}
            if len(heads) != 1:
                break
            head = heads.pop()
            prefix += re.escape(head)
            shorter = [r[1:] for r in longer]
            ends_here = "" in shorter
            longer = [r for r in shorter if r]
        if not longer:
            branches.append(prefix)
        elif ends_here:
            branches.append(f"{prefix}(?:{_trie(sorted(longer))})?")  # longest first
        else:
            branches.append(f"{prefix}(?:{_trie(sorted(longer))})")
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


class ShieldRules:
    """What one runtime's tokenizer and one template ask of the shield; built once.

    :param tokens: the runtime's special tokens.
    :param template: the template's source: which user-defined tokens are its
        markup (see :meth:`SpecialTokens.shielded`); no placeholder is taken
        from the characters in it.
    """

    def __init__(self, tokens: SpecialTokens, template: str = "") -> None:
        shielded = tokens.shielded(template)
        whole = literal_pattern(shielded)
        self.whole = re.compile(_PLACEHOLDER_RANGE if whole is None else
                                f"{whole.pattern}|{_PLACEHOLDER_RANGE}")
        # A token split across two strings the template writes side by side
        # ("<|im_" and "end|>"): a string's start that could end a token and its
        # end that could begin one are shielded too.
        suffixes = {t[i:] for t in shielded for i in range(1, len(t))}
        prefixes = {t[:i][::-1] for t in shielded for i in range(1, len(t))}
        self.head = literal_pattern(suffixes)
        self.tail = literal_pattern(prefixes)  # matched against the reversed end
        self.span = max((len(t) for t in shielded), default=0)
        # Shielded texts the tokenizer matches even in plain text: a text piece
        # must hold them in parts.
        self.always = literal_pattern(shielded & tokens.user_defined)
        self.partition = literal_pattern(tokens.partition)
        self.rstrip = tokens.rstrip
        self.reserved = frozenset(c for c in template
                                  if _PLACEHOLDER_FIRST <= ord(c) <= _PLACEHOLDER_LAST)


class ContentShield:
    """One prompt's placeholders: shields caller strings, then cuts the rendered prompt.

    :param rules: the runtime's and template's :class:`ShieldRules`.
    :param reserved: more text the template writes (the ``bos_token``...): no
        placeholder is taken from the characters in it.
    """

    def __init__(self, rules: ShieldRules, *, reserved: str = "") -> None:
        self._rules = rules
        self._partition = rules.partition
        self._rstrip = rules.rstrip
        self._reserved = rules.reserved | {c for c in reserved
                                           if _PLACEHOLDER_FIRST <= ord(c) <= _PLACEHOLDER_LAST}
        self._placeholder_of: dict[str, str] = {}
        # every form a placeholder can take in a rendered prompt -> the text it stands for
        self._original_of: dict[str, str] = {}
        self._next = _PLACEHOLDER_FIRST
        self._placeholders: re.Pattern[str] | None = None

    @property
    def used(self) -> bool:
        """Whether any string needed a placeholder."""
        return bool(self._original_of)

    # -- before rendering ------------------------------------------------------------

    def shield(self, value: Any) -> Any:
        """``value`` with control-token text in every string replaced by placeholders.

        Dicts, lists and tuples are copied only where something changed; the
        value given is never modified. Walked without recursion
        (:func:`~toolwire.vocabulary.string_map.map_strings`), so a call's
        arguments nested thousands of levels deep are shielded like any.

        :raises ValueError: a container holds itself (no JSON value does).
        """
        return map_strings(value, self._shield_nonempty)

    def _shield_nonempty(self, text: str) -> str:
        return self._shield_string(text) if text else text

    def _shield_string(self, text: str) -> str:
        rules = self._rules
        head = rules.head.match(text) if rules.head is not None else None
        tail = rules.tail.match(text[: -rules.span - 1: -1]) if rules.tail is not None else None
        if head is None and tail is None:
            if rules.whole.search(text) is None:
                return text  # the common case: nothing to shield
            return self._shield_whole(text)
        start = head.end() if head is not None else 0
        end = len(text) - (tail.end() if tail is not None else 0)
        if start >= end:  # the whole string could be part of a token
            return self._placeholder(text)
        return ((self._placeholder(text[:start]) if start else "")
                + self._shield_whole(text[start:end])
                + (self._placeholder(text[end:]) if end < len(text) else ""))

    def _shield_whole(self, text: str) -> str:
        return self._rules.whole.sub(lambda match: self._placeholder(match.group()), text)

    def _placeholder(self, original: str) -> str:
        found = self._placeholder_of.get(original)
        if found is not None:
            return found
        while chr(self._next) in self._reserved:
            self._next += 1
        if self._next > _PLACEHOLDER_LAST:
            raise ValueError("too many distinct special-token texts in one prompt")
        found = chr(self._next)
        self._next += 1
        self._placeholder_of[original] = found
        self._original_of[found] = original
        self._original_of[_ascii_json(found)] = _ascii_json(original)
        self._placeholders = None
        return found

    # -- after rendering -------------------------------------------------------------

    def restore(self, text: str) -> str:
        """``text`` with every placeholder back to the text it stands for."""
        pattern = self._placeholder_pattern()
        if pattern is None:
            return text
        return pattern.sub(lambda match: self._original_of[match.group()], text)

    def pieces(self, rendered: str) -> tuple[PromptPiece, ...]:
        """Cut a prompt rendered from shielded strings into :class:`PromptPiece` s.

        Cuts fall only where the tokenizer cuts text anyway: around its special
        tokens. A stretch between two of them that holds a placeholder becomes a
        text piece (``markup=False``) with its original text back; markup pieces
        are also cut after every :data:`SPECIAL_TOKENS_PER_PIECE` special tokens,
        right after the last (after the white space it strips, for a token in
        :attr:`SpecialTokens.rstrip`), so a piece never holds more whatever the
        prompt is.
        """
        placeholders = self._placeholder_pattern()
        if self._partition is None:
            if placeholders is None or placeholders.search(rendered) is None:
                return (PromptPiece(rendered),) if rendered else ()
            return tuple(self._text_pieces(rendered))
        pieces: list[PromptPiece] = []
        start = 0  # where the open markup piece begins
        end = 0  # the end of the last special token
        count = 0
        for match in self._partition.finditer(rendered):
            if placeholders is not None and placeholders.search(rendered, end, match.start()):
                if end > start:
                    pieces.append(PromptPiece(rendered[start:end]))
                pieces.extend(self._text_pieces(rendered[end:match.start()]))
                start = match.start()
                count = 0
            count += 1
            end = match.end()
            if count >= SPECIAL_TOKENS_PER_PIECE:
                cut = self._cut_after(rendered, match)
                if cut < len(rendered):
                    pieces.append(PromptPiece(rendered[start:cut]))
                    start = end = cut  # what a stripping token strips holds no placeholder
                    count = 0
        if placeholders is not None and placeholders.search(rendered, end):
            if end > start:
                pieces.append(PromptPiece(rendered[start:end]))
            pieces.extend(self._text_pieces(rendered[end:]))
        elif len(rendered) > start:
            pieces.append(PromptPiece(rendered[start:]))
        return tuple(pieces)

    def _cut_after(self, rendered: str, token: re.Match[str]) -> int:
        """Where a piece may end after ``token``: right after it, or after the white
        space it strips (but before a special token that begins in that white space)."""
        cut = token.end()
        if token.group() not in self._rstrip:
            return cut
        blank = _STRIPPED.match(rendered, cut)
        stop = blank.end() if blank is not None else cut
        assert self._partition is not None
        following = self._partition.search(rendered, cut)
        return following.start() if following is not None and following.start() < stop \
            else stop

    def _text_pieces(self, fragment: str) -> list[PromptPiece]:
        """A stretch holding placeholders, as text pieces with the originals back.

        Where the restored text holds a token the tokenizer matches even in
        plain text, that token is given in parts none of which holds a special
        token, so it stays text too.
        """
        text = self.restore(fragment)
        always = self._rules.always
        if always is None:
            return [PromptPiece(text, markup=False)]
        pieces: list[PromptPiece] = []
        last = 0
        for match in always.finditer(text):
            if match.start() > last:
                pieces.append(PromptPiece(text[last:match.start()], markup=False))
            pieces.extend(PromptPiece(part, markup=False) for part in self._parts(match.group()))
            last = match.end()
        if len(text) > last:
            pieces.append(PromptPiece(text[last:], markup=False))
        return pieces

    def _parts(self, original: str) -> list[str]:
        """``original`` cut so that no part holds a special token."""
        partition = self._partition
        if partition is None:
            return [original]
        parts: list[str] = []
        current = ""
        for char in original:
            if current and partition.search(current + char):
                parts.append(current)
                current = char
            else:
                current += char
        parts.append(current)
        return parts

    def _placeholder_pattern(self) -> re.Pattern[str] | None:
        if not self._original_of:
            return None
        if self._placeholders is None:
            escaped = sorted((p for p in self._original_of if len(p) > 1), key=len, reverse=True)
            chars = "".join(re.escape(p) for p in self._original_of if len(p) == 1)
            self._placeholders = re.compile("|".join([*map(re.escape, escaped), f"[{chars}]"]))
        return self._placeholders


def _ascii_json(text: str) -> str:
    """``text`` as ``json.dumps(..., ensure_ascii=True)`` writes it, without the quotes."""
    return json.dumps(text, ensure_ascii=True)[1:-1]
