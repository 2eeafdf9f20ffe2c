"""Reading arguments written as markup pairs: ``open HEADER end [value_open] VALUE close``.

One reader for every family whose values are raw text between tags (Qwen XML,
Seed, GLM, MiniMax, DSML, Kimi K3, MiniCPM, derived formats). A value is raw
text, so it may contain the format's own tags; which reading wins is decided
by rules written once, here, for every family:

* **A closing tag counts at a boundary.** A value's closing marker ends it only
  when what follows (after blanks) is structure: another argument's opening
  with a valid name (whatever the name: an argument the schema does not know
  still reaches dispatch, which tells the model), the call's or section's end,
  the next call, or the end of the reply. Otherwise it is part of the value.
* **A missing closing tag is recovered where the intent is plain**, with an
  ``unclosed_parameter`` diagnostic: the opening of a parameter the tool
  declares and has not been given yet, or the call's end followed by the
  section's end (or the reply's), ends the value, unless the value's own
  closing tag came and was followed by other text (then it is not missing).
  So a string value may hold its format's tags except a closing tag followed by
  structure, and the call's end followed by the section's end: those two read
  as structure.
* **The next call.** A missing closer before the next call never swallows it: a
  value's closing tag followed by the next call's opening markup (a call's opening
  marker with a header that reads, perhaps after a section's) ends the value and the
  call; the call's or section's closing marker followed by it ends a value whose
  closing tag is missing (``unclosed_parameter``). A block the value opened keeps
  precedence: its own closers close it first (a value quoting a whole call block).
* **Null**: ``null`` (``None`` where the template writes Python) is ``None`` when
  the parameter's schema allows null, and the verbatim text otherwise.
* **Layout newlines**: where the template writes a newline after the opening
  tag and one before the closing tag (``trim_newline``), each is markup. Where it
  writes none, a model that still lays the value out on its own lines writes a
  newline on *both* sides: one newline just inside each tag is then layout, and a
  newline on one side only is value. (A value beginning with a newline streams
  whole when it ends, since only its end tells which it was.)

String values stream as ``tool_call_delta`` events named by the parameter.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ..events import DiagnosticEvent, Event, ToolCallDeltaEvent
from .json_readers import JsonArgsReader
from .markers import (
    MAX_GAP,
    MAX_NAME,
    NOTHING_HELD,
    HeaderFields,
    TokenSet,
    skip_blanks,
    token_set,
)
from .readers import DONE, FAIL, GO, MORE, CallContext, ReaderBase
from .tagged_syntax import TaggedSyntax, inside_json_string, partial_token
from .values import decode_nested_value, is_null_text, typed_value

__all__ = ["TaggedArgsReader", "TaggedSyntax"]

_CDATA_OPEN: Final = "<![CDATA["
_CDATA_CLOSE: Final = "]]>"
_NEED_MORE: Final = -1
_LITERAL: Final = -2
_GO: Final = GO  # a step made progress; keep reading

# states
_BETWEEN, _VALUE, _BLOCK, _OVER = range(4)
# value modes
_PLAIN, _CDATA_CHECK, _CDATA, _NESTED, _TRIM_CHECK, _LEAD_CHECK = range(6)
_BLANKS = " \t\r\n"


class TaggedArgsReader(ReaderBase):
    """Reads one call's tagged arguments, up to (not including) what ends them.

    Answers ``DONE`` at the first of the syntax's ``ends`` met between
    arguments (or at the end of the reply after a complete argument), with
    :attr:`arguments` set.
    """

    __slots__ = ("_blanks", "_block", "_call", "_close", "_depth", "_given", "_kind",
                 "_layout_end", "_lead", "_mode", "_nest", "_param", "_parts", "_saw_close",
                 "_string", "_syntax", "_trim", "_watch", "_watch_holds", "turn_ended")

    def __init__(self, call: CallContext, syntax: TaggedSyntax) -> None:
        super().__init__()
        self._call = call
        self._syntax = syntax
        self._state = _BETWEEN
        self.arguments = {}
        self._given: set[str] = set()
        self._param = ""
        self._kind: str | None = None
        self._string = True
        self._parts: list[str] = []
        self._mode = _PLAIN
        self._close = self._watch = TokenSet(())
        self._watch_holds = NOTHING_HELD  # (what of the watch's beginnings is held unread)
        self._trim = False
        self._depth = 0
        self._nest = 0  # sections and calls opened inside the value and not closed yet
        self._saw_close = False
        self._blanks = ""  # a value's trailing blanks, held until it is known they are value
        self._lead = False  # a newline opened the value: layout if one closes it too
        self._layout_end = False  # the value ended at another tag after a layout newline
        self._block: JsonArgsReader | None = None
        # the engine says the reply's end is the model's own end of turn (an end-of-turn
        # token), not a cut: a value still open there ends instead of failing the call
        self.turn_ended = False

    def plain_delta(self, text: str) -> list[Event] | None:
        """A plain value's text with no markup character in it: taken whole.

        What :meth:`_scan_plain` does with such text, without the scanning.
        """
        if self._state != _VALUE or self._mode != _PLAIN or self._lead:
            return None
        watch = self._watch
        for first in watch.firsts:
            if first in text:  # markup-like text (a '<' in code): plain if no token is in
                if watch.search(text, 0) is not None or watch.partial(text, 0) < len(text):
                    return None
                break
        self.raw.append(text)
        if self._blanks or text[-1] in _BLANKS:  # the common case skips the call
            text = self._hold_blanks(text)
            if not text:
                return []
        self._parts.append(text)
        if not self._string:
            return []
        call = self._call
        return [ToolCallDeltaEvent(call.index, call.name, text, self._param, call.call_id)]

    def holds(self) -> frozenset[str]:
        """Between arguments, beginnings of their structure; in a plain value, of what
        its watch looks for (see :meth:`_between`, :meth:`_scan_plain`)."""
        if self._state == _BETWEEN:
            return self._syntax.between_holds
        if self._state == _VALUE and self._mode == _PLAIN:
            return self._watch_holds
        return NOTHING_HELD

    # -- between arguments -----------------------------------------------------------

    def _refuse(self, pos: int, message: str) -> tuple[int, int]:
        return self.fail(pos, "malformed_call", message)

    def _between(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        n = len(data)
        if pos >= n:
            if not eof:
                return MORE, n
            if not self.turn_ended:  # (at the turn's end the engine says so, as ever)
                self.notes.append(DiagnosticEvent(
                    "unclosed_call", f"the reply ended inside call {self._call.name!r} "
                    "after a complete parameter; the call is kept", ""))
            self._state = _OVER
            return DONE, n
        syntax = self._syntax
        start = skip_blanks(data, pos)
        if syntax.separator and data.startswith(syntax.separator, start) and self.arguments:
            start = skip_blanks(data, start + len(syntax.separator))
        self.take(data, pos, start)
        if start >= n:
            return _GO, n
        if data.startswith(syntax.ends.tokens, start):
            self._state = _OVER
            return DONE, start
        if data.startswith(syntax.opens.tokens, start):
            return self._open_param(data, start, eof)
        if syntax.block and data.startswith(syntax.block[0], start):
            return self._open_block(data, start, eof)
        if not eof and (syntax.structure.is_prefix(data, start)
                        or (syntax.separator and syntax.separator.startswith(data[start:]))):
            self.held_markup = syntax.between_holds
            return MORE, start
        return self._refuse(start, f"text inside a {self._call.family} call is not an "
                                   "argument; shown as text")

    def _read_header(self, data: str, start: int, ends: TokenSet,
                     eof: bool) -> tuple[str, int, str] | int:
        """``(header, end position, end token)``, or ``_NEED_MORE`` / ``_LITERAL``."""
        limit = start + MAX_NAME + MAX_GAP + ends.longest
        match = ends.search(data, start, limit)
        if match is None:
            return _NEED_MORE if not eof and len(data) < limit else _LITERAL
        return data[start:match.start()], match.start(), match.group(0)

    def _header_at(self, data: str, at: int, eof: bool) -> tuple[HeaderFields, int, str] | int:
        """Read the parameter header whose opening marker is at ``at``."""
        syntax = self._syntax
        opener = syntax.opens.at(data, at) or syntax.args.open
        found = self._read_header(data, at + len(opener), syntax.header_ends, eof)
        if isinstance(found, int):
            return found
        text, end, token = found
        fields = syntax.read_header(text)
        if fields is None:
            return _LITERAL
        return fields, end + len(token), token

    def _open_param(self, data: str, start: int, eof: bool) -> tuple[int, int]:
        syntax = self._syntax
        args = syntax.args
        found = self._header_at(data, start, eof)
        if found == _NEED_MORE:
            return MORE, start
        if isinstance(found, int):
            return self._refuse(start, f"a {self._call.family} argument header is malformed; "
                                       "shown as text")
        fields, end, token = found
        kind = args.header_end.get(token) or fields.kind
        if args.value_open:
            value_at = skip_blanks(data, end)
            if data.startswith(args.value_open, value_at):
                end = value_at + len(args.value_open)
            elif not eof and value_at - end <= MAX_GAP and (
                    value_at >= len(data) or args.value_open.startswith(data[value_at:])):
                return MORE, start
            else:
                return self._refuse(start, f"a {self._call.family} argument has no value "
                                           "marker; shown as text")
        self.take(data, start, end)
        self._param = fields.name
        self._kind = kind
        self._string = kind == "string" or (
            kind is None and self._call.schemas.is_string(self._call.name, fields.name))
        self._parts = []
        closes = tuple(c.replace("{name}", fields.name) for c in args.spelt(args.close_for(kind)))
        self._close = token_set(closes)
        self._watch = token_set((*closes, *self._syntax.opens.tokens,
                                 *self._syntax.closers.tokens, *self._syntax.nests.tokens))
        self._watch_holds = self._syntax.scope_holds(self._watch.unbroken_prefixes)
        self._mode = _TRIM_CHECK if args.trim_newline else _LEAD_CHECK
        self._trim = args.trim_newline
        self._depth = self._nest = 0
        self._saw_close = False
        self._blanks = ""
        self._lead = self._layout_end = False
        self._state = _VALUE
        return _GO, end

    def _open_block(self, data: str, start: int, eof: bool) -> tuple[int, int]:
        syntax = self._syntax
        assert syntax.block is not None
        found = self._read_header(data, start + len(syntax.block[0]), syntax.block_end, eof)
        if found == _NEED_MORE:
            return MORE, start
        if isinstance(found, int):
            return self._refuse(start, "a malformed arguments block; shown as text")
        end = found[1] + len(found[2])
        self.take(data, start, end)
        self._block = JsonArgsReader(self._call)
        self._state = _BLOCK
        return _GO, end

    def _scan_block(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        block = self._block
        syntax = self._syntax
        assert block is not None and syntax.block is not None
        status, at = block.feed(data, pos, out, eof)
        if status == MORE:
            return MORE, at
        self.raw.extend(block.raw)
        block.raw = []
        if status == FAIL:
            return self.fail(at, block.failure, block.message)
        close = syntax.block[2]
        at2 = skip_blanks(data, at)
        if data.startswith(close, at2):
            self.take(data, at, at2 + len(close))
            at = at2 + len(close)
        elif not eof and (at2 >= len(data) or close.startswith(data[at2:])):
            return MORE, at
        self.arguments = {**(self.arguments or {}), **(block.arguments or {})}
        self.notes.extend(block.notes)
        self._block = None
        self._state = _BETWEEN
        return _GO, at

    # -- a value -----------------------------------------------------------------------

    def _scan_value(self, data: str, pos: int, out: list[Event],
                    eof: bool) -> tuple[int, int]:
        mode = self._mode
        n = len(data)
        if mode in (_TRIM_CHECK, _LEAD_CHECK):
            if pos >= n:
                return (MORE, n) if not eof else self._unclosed_value(n, out)
            if data[pos] == "\n":
                self.take(data, pos, pos + 1)
                self._lead = mode == _LEAD_CHECK  # layout only if a newline closes it too
                pos += 1
            args = self._syntax.args
            self._mode = _NESTED if args.nested else _CDATA_CHECK if args.cdata else _PLAIN
            return _GO, pos
        if mode == _CDATA_CHECK:
            if data.startswith(_CDATA_OPEN, pos):
                self.take(data, pos, pos + len(_CDATA_OPEN))
                self._lead = False  # the newline before a CDATA section is layout
                self._mode = _CDATA
                return _GO, pos + len(_CDATA_OPEN)
            if not eof and n - pos < len(_CDATA_OPEN) and _CDATA_OPEN.startswith(data[pos:]):
                return MORE, pos
            self._mode = _PLAIN
            return _GO, pos
        if mode == _NESTED:
            return self._scan_nested(data, pos, out, eof)
        if mode == _CDATA:
            return self._scan_cdata(data, pos, out, eof)
        return self._scan_plain(data, pos, out, eof)

    def _pending_end(self, data: str, pos: int, end: int, out: list[Event],
                     eof: bool) -> tuple[int, int]:
        """No end of the value in sight: emit up to ``end`` and wait (or fail at eof)."""
        self._piece(data, pos, end, out)
        if eof:
            return self._unclosed_value(len(data), out)
        return MORE, end

    def _scan_plain(self, data: str, pos: int, out: list[Event],
                    eof: bool) -> tuple[int, int]:
        close = self._close
        watch = self._watch
        n = len(data)
        search = pos
        while True:
            match = watch.search(data, search)
            if match is None:
                # a trailing newline waits among the held blanks (see _release_blanks)
                if eof:
                    return self._pending_end(data, pos, n, out, eof)
                end = watch.partial(data, search)
                if end < n:  # (read again, this step would do just this)
                    self.held_markup = self._watch_holds
                return self._pending_end(data, pos, end, out, eof)
            k = match.start()
            token = match.group(0)
            if token in self._syntax.nests or (self._nest and token in self._syntax.closers):
                # a block nested in the value opens or closes: value text
                self._nest += 1 if token in self._syntax.nests else -1
                search = k + 1
                continue
            if token in close:
                verdict = self._follows_close(data, k + len(token), eof)
                if self._nest and verdict not in (_LITERAL, _NEED_MORE):
                    verdict = self._nested_goes_on(data, k + len(token), eof)
                consume = True
            else:
                verdict = self._recovers(data, pos, k, token, eof)
                consume = False
            if verdict == _LITERAL:
                self._saw_close = self._saw_close or consume
                search = k + 1
                continue
            end = k - 1 if self._trim and k > pos and data[k - 1] == "\n" else k
            self._piece(data, pos, end, out)
            if verdict == _NEED_MORE:
                return MORE, end
            if consume:
                self.take(data, end, k + len(token))
                self._release_blanks(out, layout_newline=self._trim and k == pos)
                self._finish_value(out)
                return _GO, k + len(token)
            self.take(data, end, k)
            self._drop_layout_blanks()  # blanks before the tag that ends the value are layout
            out.append(DiagnosticEvent(
                "unclosed_parameter", f"parameter {self._param!r} of {self._call.name!r} "
                "lacked its closing tag; it ends where the next tag begins", self._param))
            self._finish_value(out)
            return _GO, k

    def _scan_cdata(self, data: str, pos: int, out: list[Event],
                    eof: bool) -> tuple[int, int]:
        closes = self._close
        n = len(data)
        search = pos
        while True:
            k = data.find(_CDATA_CLOSE, search)
            if k < 0:
                end = n if eof else partial_token(data, search, _CDATA_CLOSE)
                return self._pending_end(data, pos, end, out, eof)
            after = k + len(_CDATA_CLOSE)
            close_token = closes.at(data, after)
            if close_token is not None:
                after += len(close_token)
            elif not eof and (after >= n or closes.is_prefix(data, after)):
                self._piece(data, pos, k, out)
                return MORE, k
            else:
                search = k + 1
                continue
            verdict = self._follows_close(data, after, eof)
            if verdict == _LITERAL:
                search = k + 1
                continue
            self._piece(data, pos, k, out)
            if verdict == _NEED_MORE:
                return MORE, k
            self.take(data, k, after)
            self._release_blanks(out)
            self._finish_value(out)
            return _GO, after

    def _scan_nested(self, data: str, pos: int, out: list[Event],
                     eof: bool) -> tuple[int, int]:
        ns = self._syntax.args.nested
        n = len(data)
        search = pos
        while True:
            k = data.find(ns, search)
            if k < 0:
                end = n if eof else partial_token(data, search, ns)
                return self._pending_end(data, pos, end, out, eof)
            tag_at = k + len(ns)
            gt = data.find(">", tag_at, tag_at + MAX_NAME + 2)
            if gt < 0:
                if not eof and n - tag_at <= MAX_NAME + 1:
                    self._piece(data, pos, k, out)
                    return MORE, k
                search = k + 1
                continue
            tag = data[tag_at + 1:gt]
            if data.startswith("</", tag_at):
                if self._depth > 0:
                    self._depth -= 1
                    search = gt + 1
                    continue
                self._piece(data, pos, k, out)
                if tag[1:] == self._param:
                    self._release_blanks(out)
                    self._finish_value(out)
                    self.take(data, k, gt + 1)
                    return _GO, gt + 1
                self._drop_layout_blanks()  # another closing tag: this parameter's is missing
                out.append(DiagnosticEvent(
                    "unclosed_parameter", f"parameter {self._param!r} of {self._call.name!r} "
                    "lacked its closing tag; it ends where the next tag begins", self._param))
                self._finish_value(out)
                return _GO, k
            if data.startswith("<", tag_at) and tag:
                self._depth += 1
            search = gt + 1

    def _piece(self, data: str, start: int, end: int, out: list[Event]) -> None:
        """Take ``data[start:end]`` as value text."""
        if end > start:
            piece = data[start:end]
            self.raw.append(piece)
            self._value_text(piece, out)

    def _hold_blanks(self, piece: str) -> str:
        """``piece`` after the blanks held before it, less its own trailing blanks,
        which are held until more value text comes (they may be layout before a tag)."""
        held = self._blanks
        text = held + piece if held else piece
        if piece[-1] not in _BLANKS:
            self._blanks = ""
            return text
        kept = text.rstrip(_BLANKS)
        held = text[len(kept):]
        if len(held) > MAX_GAP:  # a run of blanks that long is value, not layout
            kept, held = text[:len(text) - MAX_GAP], text[len(text) - MAX_GAP:]
        self._blanks = held
        return kept

    def _value_text(self, piece: str, out: list[Event]) -> None:
        """Value text (consumed); its trailing blanks wait until more value text comes."""
        kept = self._hold_blanks(piece)
        if kept:
            self._parts.append(kept)
            if self._string and not self._lead:
                call = self._call
                out.append(ToolCallDeltaEvent(call.index, call.name, kept, self._param,
                                              call.call_id))

    def _release_blanks(self, out: list[Event], *, layout_newline: bool = False) -> None:
        """The value's own closing tag came: its trailing blanks were value.

        :param layout_newline: the closing tag came right after the held blanks
            in a family whose tags sit on their own lines: the last newline is
            the layout before the tag, not value.
        """
        if layout_newline and self._blanks.endswith("\n"):
            self._blanks = self._blanks[:-1]
        if self._blanks:
            self._parts.append(self._blanks)
            if self._string and not self._lead:
                out.append(self._call.delta(self._blanks, self._param))
            self._blanks = ""

    def _drop_layout_blanks(self) -> None:
        """The value ends at another tag: its held trailing blanks are layout."""
        self._layout_end = "\n" in self._blanks
        self._blanks = ""

    def _unclosed_value(self, n: int, out: list[Event]) -> tuple[int, int]:
        """The reply ended inside a value: the call is text, unless the model ended its
        turn there (:attr:`turn_ended`), where the value ends as at a missing closing tag."""
        if not self.turn_ended:
            return self.fail(n, "unclosed_call", "the reply ended inside a tool call's value; "
                                                 "shown as text")
        self._drop_layout_blanks()
        out.append(DiagnosticEvent(
            "unclosed_parameter", f"parameter {self._param!r} of {self._call.name!r} lacked "
            "its closing tag; it ends where the model ended its turn", self._param))
        self._finish_value(out)
        return _GO, n

    def _follows_close(self, data: str, at: int, eof: bool) -> int:
        """Whether structure (or the end of the reply) follows a value's closing tag."""
        syntax = self._syntax
        n = len(data)
        j = at
        limit = at + MAX_GAP
        while j < n and j < limit and data[j] in " \t\r\n":
            j += 1
        if j < n and syntax.separator and data.startswith(syntax.separator, j):
            j = skip_blanks(data, j + len(syntax.separator))
        if j >= n:
            if eof:
                return at
            return _NEED_MORE if j < limit + len(syntax.separator) + MAX_GAP else _LITERAL
        if j >= limit + len(syntax.separator) + MAX_GAP:
            return _LITERAL
        if data.startswith(syntax.confirms.tokens, j):
            return at
        if data.startswith(syntax.opens.tokens, j):
            found = self._header_at(data, j, eof)
            if found == _NEED_MORE:
                return _NEED_MORE
            return _LITERAL if isinstance(found, int) else at
        if syntax.next_call is not None:  # the next call: this one's closing marker is missing
            starts = syntax.next_call.at(data, j, eof)
            if starts:
                return at
            if starts is None:
                return _NEED_MORE
        if not eof and (syntax.structure.is_prefix(data, j)
                        or (syntax.separator and syntax.separator.startswith(data[j:]))):
            return _NEED_MORE
        return _LITERAL

    def _nested_goes_on(self, data: str, at: int, eof: bool) -> int:
        """A closing tag met while a block opened inside the value is still open: whether
        it closes that block's last value (the closers of the open blocks follow, then text:
        ``_LITERAL``, the value goes on) or the value itself (anything else: ``at``)."""
        syntax = self._syntax
        n = len(data)
        limit = at + (MAX_GAP + syntax.closers.longest) * (self._nest + 1)
        j = at
        closed = 0
        while closed < self._nest:
            j = skip_blanks(data, j)
            token = syntax.closers.at(data, j)
            if token is None:
                if j >= n or syntax.closers.is_prefix(data, j):
                    return at if eof or j > limit else _NEED_MORE
                break
            j += len(token)
            closed += 1
        if not closed:
            return at
        j = skip_blanks(data, j)
        if j >= n:  # the reply's end (or the turn's: the engine ends the text before it)
            return at if eof or j > limit else _NEED_MORE
        marks = (syntax.structure, syntax.closers, syntax.nests)
        if any(data.startswith(m.tokens, j) for m in marks):
            return at  # the calls go on after it (or end): the value ended
        if any(m.is_prefix(data, j) for m in marks):  # a marker cut by the delta (or the end)
            return at if eof or j > limit else _NEED_MORE
        return _LITERAL

    def _recovers(self, data: str, pos: int, k: int, token: str, eof: bool) -> int:
        """Whether a structural marker inside a value ends it (its close is missing).

        Never inside a JSON value's open string: a non-string value is JSON, and
        markup between its quotes is text.
        """
        syntax = self._syntax
        if not self._string and inside_json_string("".join(self._parts) + self._blanks
                                                     + data[pos:k]):
            return _LITERAL
        if token in syntax.opens:
            found = self._header_at(data, k, eof)
            if found == _NEED_MORE:
                return _NEED_MORE
            if isinstance(found, int):
                return _LITERAL
            name = found[0].name
            known = self._call.schemas.parameters(self._call.name) or {}
            if name in known and name not in self._given and name != self._param:
                return k
            return _LITERAL
        # the call's end (or the section's): only when the value's own closing tag never
        # came (a closing tag followed by junk is not a missing one) and what follows the
        # call's end confirms it
        if self._saw_close:
            return _LITERAL
        j = skip_blanks(data, k + len(token))
        if j >= len(data):
            if eof:
                return k
            return _NEED_MORE if j - k < MAX_GAP + len(token) else _LITERAL
        if syntax.next_call is not None:  # the call's end, then the next call's opening
            starts = syntax.next_call.at(data, j, eof)
            if starts:
                return k
            if starts is None:
                return _NEED_MORE
        if token in syntax.after_ends:
            return _LITERAL  # the section's end is confirmed by the reply's end only
        if data.startswith(syntax.after_ends.tokens, j):
            return k
        if not eof and syntax.after_ends.is_prefix(data, j):
            return _NEED_MORE
        return _LITERAL

    def _finish_value(self, out: list[Event]) -> None:
        call = self._call
        raw = "".join(self._parts)
        self._parts = []
        name = self._param
        if self._lead:  # the value began with a newline and was held: settle it now
            if raw.endswith("\n"):
                raw = raw[:-1]  # a newline on both sides: layout
            elif not self._layout_end:
                raw = "\n" + raw  # on one side only: value
            self._lead = False
            if self._string and raw:
                out.append(call.delta(raw, name))
        if name in self._given:
            out.append(DiagnosticEvent("duplicate_parameter",
                                       f"parameter {name!r} of {call.name!r} given twice; "
                                       "the last value is used", name))
        self._given.add(name)
        assert self.arguments is not None
        self.arguments[name] = self._decode(raw)
        self._state = _BETWEEN

    def _decode(self, raw: str) -> Any:
        call = self._call
        args = self._syntax.args
        schema = call.schemas.schema(call.name, self._param)
        root = call.schemas.root(call.name)
        if args.nested:
            return decode_nested_value(raw, args.nested, schema, root)
        if self._kind == "string":
            return raw
        if self._kind == "json":
            try:
                return json.loads(raw)
            except (ValueError, RecursionError):
                pass
        types = call.schemas.types(call.name, self._param)
        if self._string:
            if is_null_text(raw, python=args.python_values) and schema is not None:
                return typed_value(raw, schema, root, python=args.python_values, types=types)
            return raw
        return typed_value(raw, schema, root, python=args.python_values, types=types)


TaggedArgsReader.STEPS = (TaggedArgsReader._between, TaggedArgsReader._scan_value,
                          TaggedArgsReader._scan_block, ReaderBase.over)  # (by state)
