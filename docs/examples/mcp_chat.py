"""An MCP server's tools in a toolwire chat, synchronous and asyncio.

``python mcp_chat.py MODEL.gguf 'uvx mcp-server-time'`` asks a local model a
question it answers with the server's tools. The test suite runs both functions
with a scripted model and a real MCP server (tests/tools/test_mcp_docs_example.py).
"""

import sys

import toolwire
from toolwire.plugins.mcp_tools import TRUST_READ_ONLY_HINTS, MCPServers, server_from_command


def ask(backend: toolwire.Backend, server: str, question: str) -> str:
    """Start the server, offer its read-only tools, answer one question, stop the server.

    A server's read-only hints count only when you trust them: here, you do.
    """
    trusted = server_from_command(server, trust=TRUST_READ_ONLY_HINTS)
    with MCPServers([trusted]) as servers:
        chat = toolwire.Chat(backend, tools=servers.tools(), read_only=True)
        return chat.ask(question)


async def ask_async(backend: toolwire.Backend, config_file: str, question: str) -> str:
    """The same from asyncio code, with the servers of an mcpServers file."""
    async with MCPServers.from_config(config_file) as servers:
        chat = toolwire.Chat(backend, tools=await servers.atools())
        events = [event async for event in chat.asend(question)]
        return "".join(e.text for e in events if isinstance(e, toolwire.TextEvent))


if __name__ == "__main__":
    manager = toolwire.default_plugin_manager()
    model = manager.backend("llama_cpp").create(model_path=sys.argv[1])
    print(ask(model, sys.argv[2], "What time is it in Vienna?"))
