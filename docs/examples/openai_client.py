"""The openai SDK against ``toolwire serve``: an agent loop, then a streamed reply.

Run ``toolwire serve --demo`` (or with your model), then ``python openai_client.py``.
TOOLWIRE_URL and TOOLWIRE_SERVE_API_KEY say where the server is and its key, if it has one.
"""

import json
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ.get("TOOLWIRE_URL", "http://127.0.0.1:8765/v1"),
                api_key=os.environ.get("TOOLWIRE_SERVE_API_KEY", "none"))
model = client.models.list().data[0].id  # the one model the server serves

tools = [{"type": "function", "function": {
    "name": "search_text", "description": "Search the notes for a pattern.",
    "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                   "required": ["pattern"]}}}]


def search_text(pattern: str) -> str:
    """Your tool: the server never runs it, your code does."""
    return "notes/people.md:3: Alex: maintains the parser plugins; prefers Qwen3.5."


messages = [{"role": "user", "content": "What do my notes say about Alex?"}]
for _ in range(5):  # model turns, each answered with the tools' results
    reply = client.chat.completions.create(model=model, messages=messages, tools=tools)
    message = reply.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    if not message.tool_calls:
        break
    for call in message.tool_calls:
        result = search_text(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
print(message.content)

stream = client.chat.completions.create(model=model, messages=messages[:1], tools=tools,
                                        stream=True)
for chunk in stream:
    delta = chunk.choices[0].delta
    for call in delta.tool_calls or []:
        if call.id:  # the call's header: index, id, type and name first
            print(f"\ncall {call.index}: {call.function.name}(", end="")
        print(call.function.arguments or "", end="", flush=True)  # then its JSON, in pieces
    print(delta.content or "", end="", flush=True)
print()
