"""The child process that runs regular expressions for ``search_text``.

Python's ``re`` can backtrack for ever on patterns like ``(a+)+$`` and holds the
interpreter lock while it does, so no thread of the host could stop it or even
run beside it. Here it runs in its own process, which the host kills when its
time budget runs out.

Run as a script (``python -I -S regex_worker.py``): it imports nothing but the
standard library. Frames on stdin and stdout are a 4-byte big-endian length and
a UTF-8 JSON body:

* ``{"pattern": P, "ignore_case": B}`` -> ``{"ok": true}`` or ``{"error": MSG}``
* ``{"text": T, "limit": N}`` -> ``{"lines": [i, ...]}``: 0-based indices of at
  most ``N`` lines of ``T`` (split on ``\\n``) that the pattern matches.
"""

from __future__ import annotations

import json
import re
import struct
import sys

__all__ = ["read_frame", "serve", "write_frame"]

_HEADER = struct.Struct(">I")


def read_frame(stream: object) -> object:
    """Read one frame's JSON body, or ``None`` at the end of the stream."""
    header = stream.read(_HEADER.size)  # type: ignore[attr-defined]
    if len(header) < _HEADER.size:
        return None
    (length,) = _HEADER.unpack(header)
    body = stream.read(length)  # type: ignore[attr-defined]
    return json.loads(body.decode("utf-8"))


def write_frame(stream: object, body: object) -> None:
    """Write one frame and flush it."""
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    stream.write(_HEADER.pack(len(data)) + data)  # type: ignore[attr-defined]
    stream.flush()  # type: ignore[attr-defined]


def serve(stdin: object, stdout: object) -> None:
    """Answer frames until stdin closes."""
    matcher: re.Pattern[str] | None = None
    while True:
        request = read_frame(stdin)
        if not isinstance(request, dict):
            return
        if "pattern" in request:
            try:
                flags = re.IGNORECASE if request.get("ignore_case") else 0
                matcher = re.compile(request["pattern"], flags)
            except (re.error, RecursionError, OverflowError) as exc:
                matcher = None
                write_frame(stdout, {"error": str(exc)})
                continue
            write_frame(stdout, {"ok": True})
        elif matcher is not None:
            limit = int(request.get("limit", 0))
            found: list[int] = []
            for index, line in enumerate(str(request.get("text", "")).split("\n")):
                if matcher.search(line):
                    found.append(index)
                    if len(found) >= limit:
                        break
            write_frame(stdout, {"lines": found})
        else:
            write_frame(stdout, {"error": "no pattern compiled"})


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
