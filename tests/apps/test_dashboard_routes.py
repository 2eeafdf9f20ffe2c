"""The server routes behind the dashboard's chat page: ``GET /v1/tools``, approval of write
calls (``approval_request`` events, ``POST /v1/chat/{id}/approval``), a request's own
read-only and tool settings, and the vendored scripts the page loads.

Real uvicorn on 127.0.0.1 spoken to over HTTP (the helpers of ``test_server``), with the
scripted backend; the browser side is ``test_dashboard_page.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from tests.apps.test_server import (
    ANSWER,
    CALL,
    json_request,
    lookup,
    request,
    running_server,
    scripted_app,
    sse_items,
    user,
    wait_for,
)
from tests.support.paths import REPO as ROOT
from toolwire import Chat, Message, Tool, event_from_dict, tool
from toolwire.apps.cli.serve import register as add_serve_command
from toolwire.apps.server.app import create_app
from toolwire.apps.server.approvals import (
    ReplyApprovals,
    parse_approval_answer,
    with_approval_requests,
)
from toolwire.apps.server.chat_options import ChatOptions, parse_chat_options
from toolwire.apps.server.dashboard import VENDOR_FILES, content_security_policy, dashboard_html
from toolwire.apps.server.served_model import ServedModel
from toolwire.conversation.approval import Approval, ApprovalRequest
from toolwire.events import ApprovalRequestEvent, Event, TextEvent, ToolCallEvent
from toolwire.limits import ServerLimits
from toolwire.testing import ScriptedBackend, isolated_plugin_manager
from toolwire.vocabulary.cancel import CancelToken
from toolwire.vocabulary.history import ToolCall

WRITE_CALL = ("Saving it.\n<tool_call>\n<function=write_note>\n<parameter=text>\nbuy milk\n"
              "</parameter>\n</function>\n</tool_call>")
TWO_WRITES = ("Saving both.\n<tool_call>\n<function=write_note>\n<parameter=text>\none\n"
              "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=write_note>\n"
              "<parameter=text>\ntwo\n</parameter>\n</function>\n</tool_call>")
SAVED = "Saved."
VENDOR_SHA256 = {  # as static/vendor/README.md records them
    "marked.umd.js": "bb95d4c15f1289f78486eaacebf3bb18688475ed58a040ef762ed49337090542",
    "purify.min.js": "f69a46022ab1f53e969c8ebbca98172c8995785a9b3be72ea4a12d25b1a1bf67",
}


def note_writer() -> tuple[Tool, list[str]]:
    """A write tool (not read-only) and the list of what it wrote."""
    written: list[str] = []

    def write_note(text: str) -> str:
        """Write a note to the notes file.

        :param text: the note
        """
        written.append(text)
        return f"saved {text!r}"

    return tool(write_note), written


def stream_types(items: list[dict[str, Any]]) -> list[str]:
    return [i["type"] for i in items]


# -- GET /v1/tools ----------------------------------------------------------------------


def test_tools_route_lists_each_tool_with_its_access_model_and_backend() -> None:
    writer, _ = note_writer()
    with running_server(scripted_app(ScriptedBackend([]), tools=(lookup, writer),
                                     approvals=True)) as base:
        status, body = json_request(base, "GET", "/v1/tools")
    assert status == 200
    assert {k: body[k] for k in ("model", "model_id", "backend", "read_only", "approvals")} == {
        "model": "scripted", "model_id": "scripted", "backend": "scripted", "read_only": False,
        "approvals": True}
    assert [(t["name"], t["read_only"], t["offered"]) for t in body["tools"]] == [
        ("lookup", True, True), ("write_note", False, True)]
    assert body["tools"][1]["description"].startswith("Write a note")
    assert body["tools"][1]["parameters"]["properties"]["text"]["type"] == "string"


def test_tools_route_lists_a_read_only_servers_write_tools_as_not_offered() -> None:
    writer, _ = note_writer()

    def make_chat(history: Sequence[Message], system: str | None) -> Chat:
        return Chat(ScriptedBackend([]), tools=[lookup, writer], read_only=True,
                    history=history, plugins=isolated_plugin_manager())

    with running_server(create_app(make_chat, model="ro")) as base:
        status, body = json_request(base, "GET", "/v1/tools")
    assert status == 200 and body["read_only"] is True and body["approvals"] is False
    assert {t["name"]: t["offered"] for t in body["tools"]} == {"lookup": True,
                                                               "write_note": False}


def test_tools_route_is_503_while_the_model_loads() -> None:
    with running_server(create_app(served=ServedModel(label="loading x"))) as base:
        status, body = json_request(base, "GET", "/v1/tools")
    assert status == 503 and "loading" in body["error"]


def test_new_routes_are_guarded_like_the_others() -> None:
    app = scripted_app(ScriptedBackend([]), approvals=True, api_key="sesame")
    key = {"Authorization": "Bearer sesame"}
    with running_server(app) as base:
        assert json_request(base, "GET", "/v1/tools")[0] == 401
        assert json_request(base, "GET", "/v1/tools", headers=key)[0] == 200
        answer = {"id": "call_1", "answer": "approve"}
        assert json_request(base, "POST", "/v1/chat/x/approval", answer)[0] == 401
        status, body = json_request(base, "GET", "/v1/tools",
                                    headers={**key, "Host": "evil.example"})
        assert status == 403 and "not allowed" in body["error"]
        status, body = json_request(base, "POST", "/v1/chat/x/approval", answer,
                                    headers={**key, "Origin": "http://evil.example"})
        assert status == 403 and "cross-origin" in body["error"]
        status, body = json_request(base, "GET", "/static/vendor/purify.min.js",
                                    headers={"Host": "evil.example"})
        assert status == 403


@pytest.mark.parametrize(("raw", "headers", "status", "fragment"), [
    (b'{"id": "c", "answer": "approve"}', {"Content-Type": "text/plain"}, 415,
     "application/json"),
    (b'{"id": "c", "answer": "yes please"}', {}, 400, '"answer" must be'),
    (b'{"answer": "deny"}', {}, 400, '"id" must be'),
    (b"[1]", {}, 400, "must be a JSON object"),
    (b"{oops", {}, 400, "not valid JSON"),
    (b'{"id": "' + b"c" * 5000 + b'", "answer": "deny"}', {}, 413, ""),
    (b'{"id": "c", "answer": "deny"}', {}, 404, "waits for approval"),
])
def test_bad_approval_answers_are_refused(raw: bytes, headers: dict[str, str], status: int,
                                          fragment: str) -> None:
    with running_server(scripted_app(ScriptedBackend([]), approvals=True)) as base:
        got, body = json_request(base, "POST", "/v1/chat/no-such-reply/approval", raw=raw,
                                 headers=headers)
    assert got == status and fragment in body["error"]


def test_approval_answers_are_404_when_the_server_does_not_ask() -> None:
    with running_server(scripted_app(ScriptedBackend([]))) as base:
        status, body = json_request(base, "POST", "/v1/chat/x/approval",
                                    {"id": "c", "answer": "approve"})
    assert status == 404 and "--approvals" in body["error"]


# -- approval of write calls ------------------------------------------------------------


def answer_when_asked(base: str, answers: Sequence[str],
                      messages: list[dict[str, Any]] | None = None,
                      ) -> tuple[list[dict[str, Any]], list[tuple[int, Any]]]:
    """Send a chat; answer each approval request in turn; return the items and the replies."""
    conn, response = request(base, "POST", "/v1/chat",
                             {"messages": messages or [user("note: buy milk")]})
    items: list[dict[str, Any]] = []
    replies: list[tuple[int, Any]] = []
    pending = list(answers)
    try:
        for item in sse_items(response):
            items.append(item)
            if item["type"] == "approval_request" and pending:
                replies.append(json_request(base, "POST", f"/v1/chat/{items[0]['id']}/approval",
                                            {"id": item["id"], "answer": pending.pop(0)}))
    finally:
        conn.close()
    return items, replies


def test_a_write_call_waits_for_approval_and_runs_once_approved() -> None:
    writer, written = note_writer()
    with running_server(scripted_app(ScriptedBackend([WRITE_CALL, SAVED]),
                                     tools=(writer,), approvals=True)) as base:
        items, replies = answer_when_asked(base, ["approve"])
    assert replies == [(200, {"answered": "approve"})]
    types = stream_types(items)
    call, ask, result = (items[types.index(t)] for t in
                         ("tool_call", "approval_request", "tool_result"))
    assert types.index("tool_call") < types.index("approval_request") < types.index(
        "tool_result")
    assert ask == {"type": "approval_request", "id": call["id"], "name": "write_note",
                   "arguments": {"text": "buy milk"}}
    assert event_from_dict(ask) == ApprovalRequestEvent(call["id"], "write_note",
                                                        {"text": "buy milk"})
    assert result["is_error"] is False and written == ["buy milk"]
    assert items[-1]["type"] == "done" and items[-1]["reason"] == "stop"


def test_a_denied_write_call_does_not_run_and_its_result_says_denied() -> None:
    writer, written = note_writer()
    with running_server(scripted_app(ScriptedBackend([WRITE_CALL, SAVED]),
                                     tools=(writer,), approvals=True)) as base:
        items, replies = answer_when_asked(base, ["deny"])
    assert replies == [(200, {"answered": "deny"})]
    (result,) = [i for i in items if i["type"] == "tool_result"]
    assert (result["is_error"], result["error_kind"]) == (True, "denied")
    assert "did not allow" in result["content"]
    assert written == [] and items[-1]["reason"] == "stop"


def test_always_approves_the_tools_later_calls_in_the_same_reply() -> None:
    writer, written = note_writer()
    with running_server(scripted_app(ScriptedBackend([TWO_WRITES, SAVED]),
                                     tools=(writer,), approvals=True)) as base:
        items, replies = answer_when_asked(base, ["always"])
    assert stream_types(items).count("approval_request") == 1
    assert replies == [(200, {"answered": "always"})] and written == ["one", "two"]


def test_read_only_tools_never_wait_for_approval() -> None:
    with running_server(scripted_app(ScriptedBackend([CALL, ANSWER]), approvals=True)) as base:
        items, _ = answer_when_asked(base, [])
    assert "approval_request" not in stream_types(items)
    assert [i["is_error"] for i in items if i["type"] == "tool_result"] == [False]


def test_an_answer_is_taken_once() -> None:
    writer, _ = note_writer()
    with running_server(scripted_app(ScriptedBackend([WRITE_CALL, SAVED]),
                                     tools=(writer,), approvals=True)) as base:
        conn, response = request(base, "POST", "/v1/chat", {"messages": [user("note")]})
        items = sse_items(response)
        session = next(items)
        ask = next(i for i in items if i["type"] == "approval_request")
        path = f"/v1/chat/{session['id']}/approval"
        assert json_request(base, "POST", path, {"id": "other", "answer": "approve"})[0] == 404
        assert json_request(base, "POST", path, {"id": ask["id"], "answer": "deny"})[0] == 200
        assert json_request(base, "POST", path, {"id": ask["id"], "answer": "approve"})[0] == 404
        rest = list(items)
        conn.close()
    assert [i["error_kind"] for i in rest if i["type"] == "tool_result"] == ["denied"]


def test_cancelling_a_reply_that_waits_for_approval_denies_the_call() -> None:
    writer, written = note_writer()
    app = scripted_app(ScriptedBackend([WRITE_CALL, SAVED]), tools=(writer,), approvals=True)
    with running_server(app) as base:
        conn, response = request(base, "POST", "/v1/chat", {"messages": [user("note")]})
        items = sse_items(response)
        session = next(items)
        next(i for i in items if i["type"] == "approval_request")
        assert json_request(base, "POST", f"/v1/chat/{session['id']}/cancel")[0] == 200
        rest = list(items)
        conn.close()
        wait_for(lambda: app.state.toolwire.approvals == {})
    assert [(i["type"], i.get("error_kind")) for i in rest] == [("tool_result", "denied"),
                                                                ("done", None)]
    assert rest[-1]["reason"] == "cancelled" and written == []


def test_an_unanswered_write_call_is_denied_after_the_timeout() -> None:
    writer, written = note_writer()
    with running_server(scripted_app(ScriptedBackend([WRITE_CALL, SAVED]), tools=(writer,),
                                     approvals=True,
                                     limits=ServerLimits(approval_timeout=0.3))) as base:
        started = time.monotonic()
        items, _ = answer_when_asked(base, [])
    assert time.monotonic() - started < 10
    assert [i.get("error_kind") for i in items if i["type"] == "tool_result"] == ["denied"]
    assert written == [] and items[-1]["reason"] == "stop"


def test_without_approvals_a_write_call_runs_at_once() -> None:
    writer, written = note_writer()
    with running_server(scripted_app(ScriptedBackend([WRITE_CALL, SAVED]),
                                     tools=(writer,))) as base:
        items, _ = answer_when_asked(base, [])
    assert "approval_request" not in stream_types(items) and written == ["buy milk"]


def test_the_approval_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="approval_timeout"):
        scripted_app(ScriptedBackend([]), approvals=True, limits=ServerLimits(approval_timeout=0))


def test_serve_has_an_approvals_flag() -> None:
    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers())
    assert parser.parse_args(["serve", "--demo", "--approvals"]).approvals is True
    assert parser.parse_args(["serve", "--demo"]).approvals is False


# -- the approver and the merged stream, without a server --------------------------------


def test_the_approver_denies_when_the_reply_is_cancelled_while_it_waits() -> None:
    token = CancelToken()
    announced: list[ApprovalRequestEvent] = []
    approvals = ReplyApprovals(token, announced.append, timeout=30)
    writer, _ = note_writer()
    answers: list[Approval] = []
    asking = threading.Thread(target=lambda: answers.append(approvals(ApprovalRequest(
        ToolCall("c1", "write_note", {"text": "x"}), writer))))
    asking.start()
    deadline = time.monotonic() + 10
    while not approvals.waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    assert approvals.waiting == {"c1"}
    token.cancel("user")
    asking.join(10)
    assert answers == [Approval.DENY] and approvals.waiting == frozenset()
    assert announced == [ApprovalRequestEvent("c1", "write_note", {"text": "x"})]
    assert approvals.answer("c1", Approval.APPROVE) is False


def test_an_approval_request_never_goes_out_before_its_tool_call() -> None:
    async def scenario() -> list[Event]:
        requests: asyncio.Queue[ApprovalRequestEvent] = asyncio.Queue()
        requests.put_nowait(ApprovalRequestEvent("c1", "write_note", {"text": "x"}))

        async def chat_events() -> AsyncIterator[Event]:
            yield TextEvent("Saving.")
            await asyncio.sleep(0.05)  # the request is already waiting: it must be held
            yield ToolCallEvent("write_note", {"text": "x"}, "c1", 0)
            await asyncio.sleep(0.05)
            yield TextEvent("Done.")

        return [event async for event in with_approval_requests(chat_events(), requests)]

    events = asyncio.run(scenario())
    assert [e.type for e in events] == ["text", "tool_call", "approval_request", "text"]


def test_approval_answers_read_only_the_three_words() -> None:
    assert parse_approval_answer({"id": "c", "answer": "always"}) == ("c", Approval.ALWAYS)
    for bad in ({"id": "c", "answer": "APPROVE"}, {"id": "", "answer": "deny"},
                {"id": 3, "answer": "deny"}, None):
        with pytest.raises(ValueError):
            parse_approval_answer(bad)


def test_the_approval_request_event_has_a_stable_shape() -> None:
    event = ApprovalRequestEvent("c1", "write_note", {"text": "x"})
    assert event.to_dict() == {"type": "approval_request", "id": "c1", "name": "write_note",
                               "arguments": {"text": "x"}}
    assert event_from_dict(event.to_dict()) == event
    with pytest.raises(ValueError, match="bad approval_request event"):
        event_from_dict({"type": "approval_request", "id": "c1"})


# -- a request's own settings -----------------------------------------------------------


def test_a_request_may_narrow_the_tools_and_ask_for_read_only() -> None:
    writer, written = note_writer()
    backend = ScriptedBackend([ANSWER, ANSWER, WRITE_CALL, SAVED])
    with running_server(scripted_app(backend, tools=(lookup, writer))) as base:
        def chat(**options: Any) -> list[dict[str, Any]]:
            conn, response = request(base, "POST", "/v1/chat",
                                     {"messages": [user("hi")], **options})
            try:
                return list(sse_items(response))
            finally:
                conn.close()

        chat(tool_names=["write_note", "not_a_tool"])
        chat(read_only=True)
        items = chat(read_only=True, tool_names=["lookup", "write_note"])
    offered = [[t.name for t in r.tools] for r in backend.requests]
    assert offered[:3] == [["write_note"], ["lookup"], ["lookup"]]
    (result,) = [i for i in items if i["type"] == "tool_result"]
    assert result["error_kind"] == "read_only" and written == []


@pytest.mark.parametrize(("body", "fragment"), [
    ({"read_only": "yes"}, '"read_only" must be'),
    ({"tool_names": "lookup"}, '"tool_names" must be'),
    ({"tool_names": [1]}, '"tool_names" must be'),
])
def test_bad_request_settings_are_400(body: dict[str, Any], fragment: str) -> None:
    with running_server(scripted_app(ScriptedBackend([]))) as base:
        status, answer = json_request(base, "POST", "/v1/chat",
                                      {"messages": [user("hi")], **body})
    assert status == 400 and fragment in answer["error"]


def test_request_settings_default_to_everything_the_server_offers() -> None:
    assert parse_chat_options({}) == ChatOptions(False, None)
    assert parse_chat_options({"tool_names": []}) == ChatOptions(False, frozenset())


# -- the page's vendored scripts ----------------------------------------------------------


def test_vendored_scripts_are_served_pinned_and_unchanged() -> None:
    readme = (ROOT / "core/apps/server/static/vendor/README.md").read_text(encoding="utf-8")
    html = dashboard_html()
    policy = content_security_policy(html)
    with running_server(scripted_app(ScriptedBackend([]))) as base:
        for name, digest in VENDOR_SHA256.items():
            conn, response = request(base, "GET", f"/static/vendor/{name}")
            body = response.read()
            conn.close()
            assert response.status == 200 and hashlib.sha256(body).hexdigest() == digest
            assert response.getheader("Content-Type", "").startswith("text/javascript")
            assert response.getheader("X-Content-Type-Options") == "nosniff"
            assert digest in readme
            (integrity,) = re.findall(rf'src="/static/vendor/{re.escape(name)}" '
                                      r'integrity="(sha256-[^"]+)"', html)
            assert f"'{integrity}'" in policy
        conn, response = request(base, "GET", "/static/vendor/..%2Fdashboard.html")
        assert response.status == 404 and b"<html" not in response.read()
        conn.close()
        status, _ = json_request(base, "GET", "/static/vendor/missing.js")
        assert status == 404
    for license_file in ("marked.LICENSE.md", "dompurify.LICENSE", "dompurify.LICENSE-MPL"):
        assert license_file in VENDOR_FILES
        assert (ROOT / "core/apps/server/static/vendor" / license_file).stat().st_size > 1000
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
