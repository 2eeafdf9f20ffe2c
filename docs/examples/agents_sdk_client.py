"""The OpenAI Agents SDK's default model (the Responses API) on ``toolwire serve``.

Run ``toolwire serve --model your.gguf`` (or ``--demo``), then ``python agents_sdk_client.py``.
TOOLWIRE_URL and TOOLWIRE_SERVE_API_KEY say where the server is and its key, if it has one.
"""

import os

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)  # the SDK would upload traces to OpenAI: nothing leaves the machine
client = AsyncOpenAI(base_url=os.environ.get("TOOLWIRE_URL", "http://127.0.0.1:8765/v1"),
                     api_key=os.environ.get("TOOLWIRE_SERVE_API_KEY", "none"))
model_id = os.environ.get("TOOLWIRE_MODEL", "toolwire-demo")  # GET /v1/models lists it


@function_tool
def search_text(pattern: str) -> str:
    """Search the notes for a pattern.

    Args:
        pattern: the text to look for
    """
    return "notes/people.md:3: Alex: maintains the parser plugins; prefers Qwen3.5."


agent = Agent(name="notes", instructions="Answer from the notes; search them first.",
              model=OpenAIResponsesModel(model=model_id, openai_client=client),
              tools=[search_text])
result = Runner.run_sync(agent, "What do my notes say about Alex?")
print(result.final_output)
