"""The terminal's answers to :mod:`toolwire.conversation.approval`.

In an interactive chat, :class:`TerminalApprover` shows a call of a tool that
changes things with its arguments and asks: yes, no, or always for this tool.
Ctrl-C or end of input at the question means no (Ctrl-C also cancels the reply).
A run without a prompt (``--message``, piped input) uses :func:`refuse_writes`,
which says no and tells the user on standard error how to allow writes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Protocol, TextIO

from ...conversation.approval import Approval, ApprovalRequest, Approver
from .terminal_text import terminal_safe

__all__ = ["PromptGuard", "TerminalApprover", "refuse_writes"]

_SHOWN_ARGUMENTS = 4000
_ANSWERS = {"y": Approval.APPROVE, "yes": Approval.APPROVE, "n": Approval.DENY,
            "no": Approval.DENY, "": Approval.DENY, "a": Approval.ALWAYS,
            "always": Approval.ALWAYS}


class PromptGuard(Protocol):
    """Lets Ctrl-C interrupt a question (the chat's interrupt handler)."""

    prompting: bool


class TerminalApprover:
    """Ask in the terminal before a call of a tool that is not read-only.

    :param read_line: shows a prompt and returns the answer (``input``).
    :param out: where the call is shown.
    :param guard: set to ``prompting`` while asking, so Ctrl-C interrupts the question.
    :param forget_answer: called after each answer (drops it from line-editing history).
    """

    def __init__(self, read_line: Callable[[str], str] = input, out: TextIO | None = None,
                 guard: PromptGuard | None = None,
                 forget_answer: Callable[[], None] | None = None) -> None:
        self.read_line = read_line
        self.out = out or sys.stderr
        self.guard = guard
        self.forget_answer = forget_answer

    def __call__(self, request: ApprovalRequest) -> Approval:
        """Show the call, ask until the answer is y, n or a; Ctrl-C or end of input is no."""
        name = terminal_safe(request.tool.name)
        shown = json.dumps(dict(request.call.arguments), ensure_ascii=False, indent=2)
        if len(shown) > _SHOWN_ARGUMENTS:
            shown = shown[:_SHOWN_ARGUMENTS] + f"\n... ({len(shown)} characters in all)"
        shown = terminal_safe(shown)  # the model wrote these: no escape reaches the terminal
        self.out.write(f"{name} changes things; it would run with:\n"
                       + "".join(f"  {line}\n" for line in shown.splitlines()))
        self.out.flush()
        while True:
            answer = self._ask(f"allow {name}? [y]es / [n]o / [a]lways for {name}: ")
            if answer is None:
                self.out.write(f"(not run: {name})\n")
                return Approval.DENY
            decision = _ANSWERS.get(answer.strip().lower())
            if decision is not None:
                return decision
            self.out.write("answer y (run it), n (do not) or a (run it and every later "
                           f"call of {name} without asking)\n")

    def _ask(self, prompt: str) -> str | None:
        if self.guard is not None:
            self.guard.prompting = True
        try:
            return self.read_line(prompt)
        except (EOFError, KeyboardInterrupt):
            self.out.write("\n")
            return None
        finally:
            if self.guard is not None:
                self.guard.prompting = False
            if self.forget_answer is not None:
                self.forget_answer()


def refuse_writes(err: TextIO | None = None) -> Approver:
    """An approver for a run nobody can be asked in: every call is denied, and the
    user is told once per tool how to allow it."""
    told: set[str] = set()
    stream = err or sys.stderr

    def refuse(request: ApprovalRequest) -> Approval:
        name = terminal_safe(request.tool.name)
        if name not in told:
            told.add(name)
            stream.write(f"toolwire: {name} was not run: it changes things, and a run without "
                         "a prompt (--message, piped input) needs --allow-write (or --yes) "
                         "for that\n")
            stream.flush()
        return Approval.DENY

    return refuse
