"""Ask before a tool that changes things runs; save the conversation and load it back.

``python approve_writes.py MODEL.gguf WORKSPACE`` chats with a local model over the
workspace tools, asking in the terminal before each write. The test suite runs
these functions with a scripted model (tests/unit/test_approval_docs_example.py).
"""

import json
import sys
from pathlib import Path

import toolwire


def ask_in_terminal(request: toolwire.ApprovalRequest) -> toolwire.Approval:
    """Show the call and ask: y runs it, a runs every call of this tool, else deny."""
    arguments = json.dumps(dict(request.call.arguments), ensure_ascii=False)
    answer = input(f"run {request.tool.name} {arguments}? [y/N/a] ").strip().lower()
    if answer in ("a", "always"):
        return toolwire.Approval.ALWAYS
    return toolwire.Approval.APPROVE if answer in ("y", "yes") else toolwire.Approval.DENY


def chat_with_approval(backend: toolwire.Backend, workspace: Path, question: str,
                       saved: Path) -> str:
    """Answer one question, asking before writes; store the conversation in ``saved``."""
    tools = toolwire.default_plugin_manager().tools()
    chat = toolwire.Chat(backend, tools=tools, workspace=workspace, approve=ask_in_terminal)
    answer = chat.ask(question)
    saved.write_text(json.dumps(chat.save(), indent=2), encoding="utf-8")
    return answer


def resume(backend: toolwire.Backend, saved: Path, question: str) -> str:
    """Continue a stored conversation (with any backend, local or remote)."""
    chat = toolwire.Chat(backend, approve=ask_in_terminal)
    chat.load(json.loads(saved.read_text(encoding="utf-8")))
    return chat.ask(question)


if __name__ == "__main__":
    manager = toolwire.default_plugin_manager()
    model = manager.backend("llama_cpp").create(model_path=sys.argv[1])
    print(chat_with_approval(model, Path(sys.argv[2]), input("> "), Path("chat.json")))
