"""Run every benchmark: ``python -m benchmarks [--quick] [name ...]``."""

from __future__ import annotations

import importlib
import sys
import time

from .harness import write_results

MODULES = ("parser_streaming", "parser_selection", "derivation", "grammar", "gguf_header",
           "rendering", "dispatch", "end_to_end", "workspace_tools", "openai_server", "mcp_tools",
           "completions_overhead", "local_models", "long_history", "dashboard_page",
           "connection_flood", "schema_walks", "hostile_bounds", "hostile_round_three",
           "real_model", "agent_apis", "reply_end")


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    chosen = [a for a in argv if not a.startswith("--")] or list(MODULES)
    for name in chosen:
        module = importlib.import_module(f"benchmarks.{name}")
        started = time.perf_counter()
        rows = module.run(quick=quick)
        if hasattr(module, "report"):
            module.report(rows)
        path = write_results(name, rows)
        print(f"[{name}: {time.perf_counter() - started:.1f} s, written {path}]\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
