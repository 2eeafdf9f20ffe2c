"""Rendering derivation probes: what the model writes in a call turn, in the shapes the
template demands.

Derivation reads markers off the text a model writes after the generation prompt,
cut exactly as the conformance kit and a live reply cut it
(:class:`~toolwire.templates.assistant_turns.AssistantTurnRenderer`). Three rules
shape the probes:

* **Probe shapes** (templates that raise on the probes). A template may demand
  schema fields (Command R+ prints ``additionalProperties`` of every object
  parameter as a Python type hint), the arguments as a JSON string (Functionary
  v3.2 concatenates them as text) or the content ``None`` beside calls (DeepSeek
  R1 distills). The probes are retried in each shape before giving up; the
  renderer keeps the first shape the template renders.
* **Observed forms of a call turn** (content-dependent wrapping). The call block
  is read after the content where the template writes content before calls, and
  compared with the turn without content. What one form writes more before the
  calls (a turn closed and re-opened, ``<SPECIAL_12><SPECIAL_11>Assistant``; a
  reasoning preamble with no content) is *turn markup*, as is the text before the
  content itself (``<|channel|>analysis<|message|>``): those pieces are
  collected in :attr:`ProbeRenderer.wrappers` and the record drops them from the text.
* **The end of the turn**. Tags after the calls that end a turn or open the next
  assistant turn (Command R7B appends an opened chatbot turn; R1-Distill-Qwen
  closes the turn and re-opens it for the content) are never written by a model
  that stops at its end-of-turn: they are cut off the block and dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

from ..errors import DerivationError, TemplateError
from ..templates.assistant_turns import REASONING_TAGS, AssistantTurnRenderer
from ..templates.chat_template import get_chat_template

__all__ = [
    "CONTENT",
    "IDS",
    "ID_HOLE",
    "KEY_A",
    "KEY_B",
    "NAME_A",
    "NAME_B",
    "NUMBER_VALUE",
    "RULES",
    "TEXT_VALUE",
    "Call",
    "ProbeRenderer",
    "markup_pieces",
    "refusal",
]

NAME_A, NAME_B = "zqfnalpha", "zqfnbeta"
KEY_A, KEY_B = "zqkeyone", "zqkeytwo"
TEXT_VALUE = "zqvalstr"
NUMBER_VALUE = 7130
CONTENT = "zqcontent"
IDS: Final = tuple(f"zqid{i:05d}" for i in range(1, 10))
ID_HOLE = "{id}"

Call = tuple[str, dict[str, Any]]


def _parameters(shape: int) -> dict[str, Any]:
    properties: dict[str, Any] = {
        KEY_A: {"type": "string", "description": "probe"},
        KEY_B: {"type": "integer", "description": "probe"},
        "zqkeythree": {"type": "object", "description": "probe"},
        "zqkeyfour": {"type": "boolean", "description": "probe"},
    }
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if shape:
        # the schema fields templates read without checking: a Python type hint of an
        # object's values (Command R+), the required list
        properties["zqkeythree"]["additionalProperties"] = {"type": "string"}
        parameters["required"] = [KEY_A]
    return parameters


def _probe_tools(shape: int) -> list[dict[str, Any]]:
    """The probe tools in schema shape ``shape`` (0: plain; 1: every field templates read)."""
    return [{"type": "function", "function": {"name": name, "description": "probe",
                                              "parameters": _parameters(shape)}}
            for name in (NAME_A, NAME_B)]


_SHAPES: Final = (0, 1)
_TAG_JOINT = re.compile(r"(?<=[>\]])(?=[<\[])")


RULES: Final = {
    "call markup": "none can apply: the template writes nothing for an assistant's tool "
                   "calls in any probe shape, so there is no markup to read (a plugin, "
                   "or a template that renders calls, is needed)",
    "probe shapes": "render the probes in a shape this template accepts (item 7)",
    "call openings": "find where a call begins (a marker, the reply's start, the prompt)",
    "counters and ids": "a call id or counter where the record has no hole for it (item 4)",
    "the name written twice": "bind two copies of a name to one value (item 5)",
    "argument layout": "arguments laid out other than one pair after another",
    "value grammar": "a value grammar ending values without a closing marker (item 1)",
    "content-dependent wrapping": "read a value or turn written differently by content "
                                  "(item 6)",
    "a drift the probes do not model": "the record reproduces the probes but not a richer "
                                       "turn",
}
"""The derivation rules a refusal can name as missing (``toolwire detect --derive``
prints the one that stopped it); docs/derived.md reasons each rule."""


def refusal(message: str, *, rule: str, seen: str = "") -> DerivationError:
    """A :class:`DerivationError` that names the rule derivation is missing."""
    return DerivationError(f"{message} [missing rule: {rule}: {RULES[rule]}]", seen=seen)


def markup_pieces(text: str) -> list[str]:
    """``text`` split into markup pieces: at blanks, and between tags written back to back
    (``<|end|><|start|>assistant`` -> ``<|end|>``, ``<|start|>assistant``)."""
    return [p for chunk in text.split() for p in _TAG_JOINT.split(chunk) if p]


def _is_markup(piece: str) -> bool:
    """A piece a model writes only as markup: it holds a tag character."""
    return len(piece) >= 3 and any(c in piece for c in "<>[]|｜")


def _common_suffix(a: str, b: str) -> int:
    i, limit = 0, min(len(a), len(b))
    while i < limit and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _boundary_after(text: str, at: int) -> int:
    """``at`` moved forward out of a tag or word it splits (to a tag start or after a blank)."""
    if at <= 0 or at >= len(text) or text[at - 1] in ">]\n\t " or text[at] in "<[\n\t ":
        return at
    while at < len(text) and text[at] not in "<[\n\t ":
        at += 1
    return at


class ProbeRenderer:
    """Renders probe calls through a template and cuts out what the model wrote.

    :param source: the chat template.
    :param probes: the call turns the caller will read (each is rendered with and
        without content in one job with the first, per probe shape).
    :raises DerivationError: the template renders no call in any probe shape.

    :ivar content_mode: where the template writes an assistant's content beside
        calls: ``"before"`` them, ``"after"`` them, or ``"none"`` (dropped).
    :ivar wrappers: turn markup seen around the calls (pieces the record drops).
    :ivar content_prefix: what a call turn writes before its content (turn markup, or the
        recipient of the text: Functionary v3.2's ``all``).
    :ivar prompt_opens: the call opening the generation prompt ends with, so a reply may
        begin with a call without it (``""``: none).
    :ivar name_echo: the text between the two copies of a name written twice in a call
        (set by the derivation once it has seen it).
    """

    def __init__(self, source: str, *, probes: Sequence[Sequence[Call]] = ()) -> None:
        self.source = source
        try:
            self.turns = AssistantTurnRenderer(source, make_call_id=lambda i: IDS[i % len(IDS)])
        except TemplateError as exc:
            raise refusal(f"the template renders no tool call for an assistant "
                          f"message in any probe shape: {exc}",
                          rule="call markup" if _drops_calls(source) else "probe shapes"
                          ) from exc
        self.wrappers: dict[str, None] = {}
        self._cache: dict[str, str] = {}
        self._counters: list[re.Pattern[str]] = []
        self.name_echo = ""
        self._turn_tags = frozenset(
            p for p in markup_pieces(self.turns.header + " " + self.turns.end_of_turn)
            if _is_markup(p))
        failure: TemplateError | None = None
        for shape in _SHAPES:  # the first shape the template renders is kept
            self.tools = _probe_tools(shape)
            self.turns.prefetch([(calls, content)
                                 for calls in ([(NAME_A, {KEY_A: TEXT_VALUE})], *probes)
                                 for content in ("", CONTENT)], self.tools, ids=IDS)
            try:
                one = self.text([(NAME_A, {KEY_A: TEXT_VALUE})])
            except TemplateError as exc:
                failure = exc
                continue
            break
        else:
            assert failure is not None
            raise refusal(f"the template failed while rendering probe calls in every "
                          f"probe shape: {failure}", rule="probe shapes") from failure
        if NAME_A not in one:
            raise refusal("the template renders no tool call for an assistant message",
                          seen=one[:300], rule="probe shapes")
        self.content_mode = "none"
        self.content_prefix = ""
        self.prompt_opens = ""
        self.prompt_tail = self.reply([(NAME_A, {KEY_A: TEXT_VALUE})])[1]
        if self.turns.content_with_calls:
            with_content = self.text([(NAME_A, {KEY_A: TEXT_VALUE})], CONTENT)
            at = with_content.find(CONTENT)
            if at >= 0 and with_content.count(CONTENT) == 1:
                self.content_mode = "before" if at < with_content.find(NAME_A) else "after"
                if self.content_mode == "before":
                    self.content_prefix = with_content[:at]
                    self.collect(self.content_prefix)  # written before content: turn markup

    @property
    def parallel(self) -> bool:
        """The template renders several calls in one turn."""
        return self.turns.parallel_calls

    def text(self, calls: Sequence[Call], content: str = "") -> str:
        """The model's text for an assistant turn with ``calls`` and ``content``."""
        key = json.dumps([calls, content], sort_keys=True, default=repr)
        cached = self._cache.get(key)
        if cached is None:
            cached = self.turns.render(list(calls), content=content, tools=self.tools,
                                       ids=[IDS[i % len(IDS)] for i in range(len(calls))]).text
            self._cache[key] = cached
        return cached

    def reply(self, calls: Sequence[Call], content: str = "") -> tuple[str, str]:
        """``(text, prompt_tail)`` of a turn, as a live pipeline would be given them."""
        rendered = self.turns.render(list(calls), content=content, tools=self.tools,
                                     ids=[IDS[i % len(IDS)] for i in range(len(calls))])
        return rendered.text, rendered.prompt_tail

    def block(self, calls: Sequence[Call], *, holes: bool = True) -> str:
        """The call markup of a turn with ``calls`` (turn markup cut off), ids as ``{id}``."""
        bare = self.text(calls)
        if self.content_mode == "before":
            full = self.text(calls, CONTENT)
            after = full[full.find(CONTENT) + len(CONTENT):]
            block = self._reconcile(after, bare, calls)
        else:
            block = bare
        block = self._cut_turn_end(block.strip())
        return self._holes(block) if holes else block

    def count_after(self, context: str) -> None:
        """Read the number written after ``context`` as a counter hole (``{id}``) from now
        on, as the call ids are (Kimi K3's ``index="1"``)."""
        if context:
            self._counters.append(re.compile(re.escape(context) + r"[0-9]{1,9}"))

    def _holes(self, text: str) -> str:
        for call_id in IDS:
            text = text.replace(call_id, ID_HOLE)
        for counter in self._counters:
            text = counter.sub(lambda m: m.group(0).rstrip("0123456789") + ID_HOLE, text)
        return text

    def _reconcile(self, after: str, bare: str, calls: Sequence[Call]) -> str:
        """The opening both forms share; what one writes more before it is turn markup."""
        first = _first_name(after, calls)
        first_bare = _first_name(bare, calls)
        if first < 0 or first_bare < 0:
            return after
        opening = after[:first].strip()
        if opening and not bare[:first_bare].strip() and \
                self.prompt_tail.rstrip().endswith(opening):
            # the generation prompt ends with the call's opening (Functionary v3.2's
            # >>>): a reply may begin with a call without it, later calls write it
            self.prompt_opens = opening
            return after
        shared = _common_suffix(after[:first], bare[:first_bare])
        start = _boundary_after(after, first - shared)
        self.collect(after[:start])
        self.collect(bare[:first_bare - (first - start)])
        return after[start:]

    def _cut_turn_end(self, block: str) -> str:
        pieces = markup_pieces(block)
        cut = len(block)
        while pieces and pieces[-1] in self._turn_tags:
            piece = pieces.pop()
            at = block.rfind(piece, 0, cut)
            if at < 0 or block[at + len(piece):cut].strip():
                break
            self.collect(piece)
            cut = at
        return block[:cut].rstrip()

    def collect(self, text: str) -> None:
        """Keep the markup pieces of ``text`` as turn markup."""
        handled = REASONING_TAGS if REASONING_TAGS[1] in self.source else ()
        for piece in markup_pieces(text):
            if piece not in handled:
                self.wrappers[piece] = None

    def drops(self) -> tuple[str, ...]:
        """The turn markup to drop from the text: what was seen around the calls, and the
        end-of-turn tags (never content: a model echoing one ends its turn)."""
        ends = (p for p in markup_pieces(self.turns.end_of_turn))
        return tuple(p for p in dict.fromkeys((*self.wrappers, *ends)) if _is_markup(p))


def _drops_calls(source: str) -> bool:
    """Some probe shape renders a conversation with an assistant call, and none writes the
    call: the template drops calls (it has no call markup), rather than raising on them."""
    user = {"role": "user", "content": CONTENT}
    plain = {"role": "assistant", "content": CONTENT}
    arguments: dict[str, Any] = {KEY_A: TEXT_VALUE}
    messages = [{"role": "assistant", "content": content, "tool_calls": [{
        "id": IDS[0], "type": "function", "function": {
            "name": NAME_A, "arguments": json.dumps(arguments) if as_string else arguments}}]}
        for as_string in (False, True) for content in ("", None)]
    renders = [{"messages": [user, message], "tools": _probe_tools(shape),
                "add_generation_prompt": False}
               for shape in _SHAPES for message in (plain, *messages)]
    results = iter(get_chat_template(source).render_many(renders))
    rendered = False
    for _shape in _SHAPES:
        # the tools may name the probe tool already (a system prompt lists them)
        listed, *with_calls = (next(results) for _ in range(1 + len(messages)))
        if isinstance(listed, TemplateError):
            continue
        for text in with_calls:
            if isinstance(text, TemplateError):
                continue
            if text.count(NAME_A) > listed.count(NAME_A):
                return False
            rendered = True
    return rendered


def _first_name(text: str, calls: Sequence[Call]) -> int:
    return text.find(calls[0][0]) if calls else -1

