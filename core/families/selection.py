"""Choosing the parser for a chat template.

Every registered parser scores the template by the markers it mentions. The
claims are then *verified*, best score first: the template renders a probe call
and the claimed parser must read it back exactly (:mod:`.verification`); the
first that does wins, and two verified parsers tied on score are an error naming
both plugins. When no claim verifies, a parser derived from the template's own
rendering of calls (which checks itself) is used; when that fails too, the error
says which candidates were tried and why each was refused, and which well-known
tool-call markers the template contains. A template that cannot render the probe
keeps selection by score, with a note that the claim is unverified. A family
named by the user is used as is. Verdicts are cached per template.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import attrs

from ..errors import ParserConflictError, ParserNotFoundError
from ..events import Event
from ..hooks.manager import PluginManager, default_plugin_manager
from ..parse.family import parser_spec
from ..parse.protocol import (
    END_REASONS,
    EndReason,
    ParsedReply,
    ParserSpec,
    PromptState,
    collect_reply,
)
from ..vocabulary.call_ids import nine_char_call_id
from ..vocabulary.schema import tool_parameters_by_name
from .derive import DerivationError, derive_format
from .pipeline import build_pipeline
from .verification import ClaimCheck, check_claim

__all__ = [
    "DERIVED_FAMILY",
    "KNOWN_MARKERS",
    "ParserChoice",
    "build_pipeline",
    "clear_selection_cache",
    "parse_reply",
    "score_parsers",
    "select_parser",
    "template_hash",
]

KNOWN_MARKERS: tuple[str, ...] = (
    "<tool_call>", "<function=", "<parameter=", "[TOOL_CALLS]", "<|python_tag|>",
    "<｜tool▁calls▁begin｜>", "<｜DSML｜", "<|tool_calls_section_begin|>", "to=functions",
    "<|tool_call>", "<arg_key>", "<invoke", "<minimax:tool_call>", "functools[",
    "<|START_ACTION|>", "<TOOLCALL>", "<tool_calls>", "<|tool_call_start|>",
    "<seed:tool_call>", "<|tools_prefix|>", "<|function_call|>", ">>>", "Action:",
)
"""Tool-call markers of known families, reported when no parser claims a template."""


def template_hash(source: str) -> str:
    """The sha256 of a template source (hex), as shown by ``toolwire detect``."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def seen_markers(source: str) -> tuple[str, ...]:
    """The :data:`KNOWN_MARKERS` that appear in a template source."""
    return tuple(m for m in KNOWN_MARKERS if m in source)


@attrs.frozen
class ParserChoice:
    """The outcome of selection.

    :ivar spec: the chosen parser.
    :ivar score: its detector's score (``0`` for a derived parser, ``1`` when forced).
    :ivar ranking: every parser's score, best first.
    :ivar checks: each claim verified against the template's probe render, in the
        order they were tried (empty when the family was forced).
    :ivar note: a caveat to show the user (``""`` when there is none): the claim
        could not be verified, or no claim verified and the parser was derived.
    """

    spec: ParserSpec
    score: float
    ranking: tuple[tuple[str, float], ...]
    checks: tuple[ClaimCheck, ...] = ()
    note: str = ""


def score_parsers(source: str, plugins: PluginManager) -> list[tuple[ParserSpec, float]]:
    """Every parser's score for ``source``, best first (a failing detector scores 0)."""
    scored: list[tuple[ParserSpec, float]] = []
    for spec in plugins.parsers().values():
        try:
            score = float(spec.detect(source))
        except Exception:  # a broken detector must not break selection for the others
            score = 0.0
        scored.append((spec, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0].name))
    return scored


DERIVED_FAMILY = "derived"
"""The family name that asks for a parser derived from the template itself."""


def select_parser(source: str | None, plugins: PluginManager | None = None, *,
                  family: str | None = None, derive: bool = True,
                  verify: bool = True) -> ParserChoice:
    """Pick the parser for a chat template (or the named ``family``).

    The parsers that claim the template (score above 0) are tried best score
    first, each verified against the template's own rendering of a probe call;
    the first that reads it back wins. When none does (or none claims the
    template) and ``derive`` is true, a parser derived from the template is used
    (family ``derived``, score ``0``). ``family="derived"`` asks for it
    explicitly; any other ``family`` is used without verification.

    :param verify: check claims against the probe (``False``: highest score wins).
    :raises ParserNotFoundError: no parser verifies and none could be derived (or
        the family is not registered); the message names the candidates tried and
        why each was refused, the markers seen and why derivation failed.
    :raises ParserConflictError: two parsers tie for the highest verified score.
    """
    plugins = plugins or default_plugin_manager()
    if family == DERIVED_FAMILY:
        if source is None:
            raise ParserNotFoundError("a derived parser needs the chat template")
        return _derived_choice(source, ())
    if family is not None:
        spec = plugins.parser(family)
        return ParserChoice(spec, 1.0, ((spec.name, 1.0),))
    if source is None:
        raise ParserNotFoundError("no chat template and no family given: cannot choose a parser")
    scored = score_parsers(source, plugins)
    ranking = tuple((s.name, score) for s, score in scored)
    claims = [(spec, score) for spec, score in scored if score > 0.0]
    if not verify:
        return _by_score(source, claims, ranking, derive)
    checks: list[ClaimCheck] = []
    for group in _tie_groups(claims):
        group_checks = [_checked(spec, score, source, plugins) for spec, score in group]
        checks.extend(group_checks)
        if any(c.outcome == "unverifiable" for c in group_checks):
            choice = _by_score(source, claims, ranking, derive)
            reason = next(c.reason for c in group_checks if c.outcome == "unverifiable")
            return attrs.evolve(choice, checks=tuple(checks),
                                note=f"the {choice.spec.name!r} parser was chosen by its score "
                                     f"alone: its claim could not be verified ({reason})")
        verified = [pair for pair, check in zip(group, group_checks, strict=True)
                    if check.outcome == "verified"]
        if len(verified) > 1:
            raise _conflict(verified[0], verified[1])
        if verified:
            return ParserChoice(verified[0][0], verified[0][1], ranking, tuple(checks))
    if not derive:
        raise _not_claimed(source, "", tuple(checks))
    choice = _derived_choice(source, ranking, tuple(checks))
    if checks:
        refused = ", ".join(repr(c.family) for c in checks)
        choice = attrs.evolve(choice, note=f"no claimed parser ({refused}) read the template's "
                                           f"own call back; a parser derived from the template "
                                           f"is used")
    return choice


def _tie_groups(claims: Sequence[tuple[ParserSpec, float]]
                ) -> list[list[tuple[ParserSpec, float]]]:
    """The claims in runs of equal score, best first."""
    groups: list[list[tuple[ParserSpec, float]]] = []
    for pair in claims:
        if groups and groups[-1][0][1] == pair[1]:
            groups[-1].append(pair)
        else:
            groups.append([pair])
    return groups


def _conflict(a: tuple[ParserSpec, float], b: tuple[ParserSpec, float]) -> ParserConflictError:
    return ParserConflictError(
        f"parsers {a[0].name!r} (plugin {a[0].plugin!r}) and {b[0].name!r} (plugin "
        f"{b[0].plugin!r}) both claim this template with score {a[1]:g}; choose one "
        "with family=...")


def _by_score(source: str, claims: Sequence[tuple[ParserSpec, float]],
              ranking: tuple[tuple[str, float], ...], derive: bool) -> ParserChoice:
    """The highest score wins, unverified (selection before verification)."""
    if not claims:
        if derive:
            return _derived_choice(source, ranking)
        raise _not_claimed(source, "")
    if len(claims) > 1 and claims[1][1] == claims[0][1]:
        raise _conflict(claims[0], claims[1])
    return ParserChoice(claims[0][0], claims[0][1], ranking)


_CHECKS: dict[tuple[str, int, tuple[str, ...]], tuple[ParserSpec, ClaimCheck]] = {}
_CHECKS_LIMIT = 256


def clear_selection_cache() -> None:
    """Forget every cached verdict and derived parser (for benchmarks and tests)."""
    _CHECKS.clear()
    _DERIVED.clear()


def _checked(spec: ParserSpec, score: float, source: str, plugins: PluginManager) -> ClaimCheck:
    """:func:`check_claim`, cached per template, parser and stream filters.

    The cache holds the spec itself, so the ``id`` in its key is never reused.
    """
    key = (template_hash(source), id(spec), tuple(f.name for f in plugins.stream_filters()))
    cached = _CHECKS.get(key)
    if cached is not None and cached[0] is spec and cached[1].score == score:
        return cached[1]
    check = check_claim(spec, score, source, plugins=plugins)
    if len(_CHECKS) >= _CHECKS_LIMIT:
        _CHECKS.clear()
    _CHECKS[key] = (spec, check)
    return check


def _not_claimed(source: str, why: str, checks: tuple[ClaimCheck, ...] = ()
                 ) -> ParserNotFoundError:
    # one line a person can act on; what was refused and why is toolwire detect's to show
    markers = seen_markers(source)
    seen = ", ".join(repr(m) for m in markers) or "no known tool-call markers"
    claimed = ", ".join(repr(c.family) for c in checks)
    refused = f"; {claimed} claimed it but misread its own rendered call" if checks else ""
    underived = "; no parser could be derived from it" if why else ""
    return ParserNotFoundError(
        f"no parser plugin claims this chat template (sha256 {template_hash(source)[:12]}; "
        f"seen: {seen}{refused}{underived}): this model's tool calls will stay text and no "
        "tool will run. 'toolwire detect' on the model or template shows why; family=... "
        "forces a parser family", seen_markers=markers,
        refusals=tuple(f"{c.family}: {c.reason}" for c in checks), derivation=why)


_DERIVED: dict[str, tuple[ParserSpec | None, str]] = {}


def _derived_choice(source: str, ranking: tuple[tuple[str, float], ...],
                    checks: tuple[ClaimCheck, ...] = ()) -> ParserChoice:
    key = template_hash(source)
    cached = _DERIVED.get(key)
    if cached is None:
        try:
            # verified with 9-character ids, the strictest form templates demand (Mistral),
            # so replayed history renders the same way
            derived = attrs.evolve(parser_spec(derive_format(source), lambda _: 0.0,
                                               make_call_id=nine_char_call_id),
                                   plugin="toolwire.families.derive")
            cached = (derived, "")
        except DerivationError as exc:
            cached = (None, str(exc))
        if len(_DERIVED) > 64:
            _DERIVED.clear()
        _DERIVED[key] = cached
    spec, why = cached
    if spec is None:
        raise _not_claimed(source, why, checks)
    return ParserChoice(spec, 0.0, (*ranking, (DERIVED_FAMILY, 0.0)), checks)


def parse_reply(text: str, *, family: str | None = None, chat_template: str | None = None,
                tools: Sequence[Any] | None = None, chunk_size: int = 0,
                plugins: PluginManager | None = None, prompt_tail: str = "",
                prompt_state: PromptState | None = None,
                end_reason: EndReason = "stop") -> ParsedReply:
    """Parse a whole model reply in the format of a family or a chat template.

    A stored reply reads as its live turn did when it is given what the live turn
    knew: how the generation prompt ended and why the reply ended.

    :param text: the raw reply, as the model wrote it.
    :param family: the parser family (``qwen_xml``); wins over ``chat_template``.
    :param chat_template: a template source; its parser is selected by score.
    :param tools: OpenAI-style ``tools`` (or :class:`Tool` objects), used to type
        argument values by their schemas.
    :param chunk_size: feed the parser this many characters at a time (``0``:
        all at once); the result does not depend on it.
    :param prompt_tail: the end of the prompt the reply continued (``"<think>\\n"``:
        the reply began inside reasoning); ``""``: unknown.
    :param prompt_state: what the generation prompt left open, instead of its tail
        (:class:`PromptState`); wins over what ``prompt_tail`` implies.
    :param end_reason: ``"stop"`` (the model ended the reply) or ``"length"`` (the
        token limit cut it: a call still open at the end is text, never a call).
    :raises ParserNotFoundError: no parser for the family or template.
    :raises ValueError: ``end_reason`` is neither ``"stop"`` nor ``"length"``.
    """
    plugins = plugins or default_plugin_manager()
    if family is None and chat_template is None:
        raise ParserNotFoundError("parse_reply needs family=... or chat_template=...")
    if end_reason not in END_REASONS:
        raise ValueError(f"end_reason must be one of {END_REASONS}, not {end_reason!r}")
    choice = select_parser(chat_template, plugins, family=family)
    pipeline = build_pipeline(choice.spec, tool_parameters_by_name(tools), plugins=plugins,
                              chat_template=chat_template, prompt_tail=prompt_tail,
                              prompt_state=prompt_state)
    events: list[Event] = []
    step = chunk_size if chunk_size > 0 else max(len(text), 1)
    for start in range(0, len(text), step):
        events.extend(pipeline.feed(text[start:start + step]))
    events.extend(pipeline.close(end_reason=end_reason))
    return collect_reply(events, choice.spec.name)
