"""``GET /metrics``: the server's figures in the Prometheus text format, by ``prometheus_client``.

Each app has its own registry (two servers in one process never mix their
figures). What is counted, with its labels:

* ``toolwire_http_requests_total{route, method, status}``: every answer (the
  route is its pattern, ``/v1/chat/{id}/cancel``; an unknown path is ``unknown``);
  ``toolwire_http_errors_total{route, status}`` those of status 400 and above;
* ``toolwire_prompt_tokens_total{api}``, ``toolwire_completion_tokens_total{api}``:
  the model turns' tokens, by API (``chat_completions``, ``responses``,
  ``messages``, ``chat`` for toolwire's own loop);
* ``toolwire_time_to_first_token_seconds{api}`` (histogram): from a request's
  arrival (its wait in line included) to the model's first piece of output;
  ``toolwire_time_per_output_token_seconds{api}`` (histogram): the generation's
  time after that, per token;
* ``toolwire_queue_waiting``, ``toolwire_queue_active`` (gauges, read when
  scraped): the requests waiting for the model and those using it;
* ``toolwire_model_worker_restarts`` (gauge, read when scraped): model workers
  started after a crash;
* ``toolwire_parser_diagnostics_total{code}``: what the parser noticed in the
  model's output (``malformed_call``, ``unclosed_call``, ``repeated_call``...).

``prometheus_client`` is in the ``serve`` extra and imported only when an app is made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from .responses import Receive, Scope, Send

__all__ = ["METRICS_CONTENT_TYPE", "MetricsEndpoint", "MetricsMiddleware", "ServerMetrics",
           "route_label"]

METRICS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

_ROUTES: Final = (
    ("/v1/chat/completions", "/v1/chat/completions"), ("/v1/responses/", "/v1/responses/{id}"),
    ("/v1/responses", "/v1/responses"), ("/v1/messages/count_tokens", "/v1/messages/count_tokens"),
    ("/v1/messages", "/v1/messages"), ("/v1/models/", "/v1/models/{id}"),
    ("/v1/models", "/v1/models"), ("/v1/tools", "/v1/tools"), ("/v1/chat", "/v1/chat"),
    ("/healthz", "/healthz"), ("/health", "/health"), ("/metrics", "/metrics"),
    ("/static/vendor/", "/static/vendor/{name}"), ("/", "/"))
_TIME_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                        60.0, 120.0, 300.0)
_TOKEN_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                         1.0, 2.5)


def route_label(path: str) -> str:
    """The route pattern a path answers to (a label with few values), or ``unknown``."""
    if path.startswith("/v1/chat/") and path.endswith(("/cancel", "/approval")) \
            and path != "/v1/chat/completions":
        return "/v1/chat/{id}/" + path.rsplit("/", 1)[1]
    for prefix, label in _ROUTES:
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)
                              and prefix != "/"):
            return label
    return "unknown"


class ServerMetrics:
    """One server's figures (see the module).

    :param waiting: reads the requests waiting for the model.
    :param active: reads the requests using the model.
    :param restarts: reads the model worker's restarts (``0`` without a worker).
    """

    def __init__(self, *, waiting: Callable[[], int], active: Callable[[], int],
                 restarts: Callable[[], int]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.requests = Counter("toolwire_http_requests", "HTTP answers by route, method and "
                                "status", ["route", "method", "status"], registry=registry)
        self.errors = Counter("toolwire_http_errors", "HTTP answers of status 400 and above",
                              ["route", "status"], registry=registry)
        self.prompt_tokens = Counter("toolwire_prompt_tokens", "Prompt tokens of model turns",
                                     ["api"], registry=registry)
        self.completion_tokens = Counter("toolwire_completion_tokens",
                                         "Tokens the model generated", ["api"],
                                         registry=registry)
        self.first_token = Histogram("toolwire_time_to_first_token_seconds",
                                     "From a request's arrival to the model's first output",
                                     ["api"], buckets=_TIME_BUCKETS, registry=registry)
        self.per_token = Histogram("toolwire_time_per_output_token_seconds",
                                   "Generation time per token after the first",
                                   ["api"], buckets=_TOKEN_BUCKETS, registry=registry)
        self.diagnostics = Counter("toolwire_parser_diagnostics",
                                   "What the parser noticed in the model's output", ["code"],
                                   registry=registry)
        Gauge("toolwire_queue_waiting", "Requests waiting for the model",
              registry=registry).set_function(waiting)
        Gauge("toolwire_queue_active", "Requests using the model",
              registry=registry).set_function(active)
        Gauge("toolwire_model_worker_restarts", "Model workers started after a crash",
              registry=registry).set_function(restarts)

    def observe_answer(self, route: str, method: str, status: int) -> None:
        """Count one HTTP answer."""
        self.requests.labels(route, method, str(status)).inc()
        if status >= 400:
            self.errors.labels(route, str(status)).inc()

    def observe_turn(self, api: str, *, prompt_tokens: int, completion_tokens: int,
                     first_token: float | None, generation: float | None,
                     diagnostics: Sequence[str] = ()) -> None:
        """Count one model turn's tokens, times and parser diagnostics."""
        if prompt_tokens:
            self.prompt_tokens.labels(api).inc(prompt_tokens)
        if completion_tokens:
            self.completion_tokens.labels(api).inc(completion_tokens)
        if first_token is not None:
            self.first_token.labels(api).observe(first_token)
        if generation is not None and completion_tokens > 1:
            self.per_token.labels(api).observe(generation / (completion_tokens - 1))
        for code in diagnostics:
            self.diagnostics.labels(code).inc()

    def observe_diagnostics(self, codes: Iterable[str]) -> None:
        """Count parser diagnostics seen outside a model route (toolwire's own loop)."""
        for code in codes:
            self.diagnostics.labels(code).inc()

    def text(self) -> bytes:
        """Every figure in the Prometheus text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class MetricsEndpoint:
    """``GET /metrics`` (an ASGI app)."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.metrics.text()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", METRICS_CONTENT_TYPE.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class MetricsMiddleware:
    """Counts every HTTP answer by route, method and status (an ASGI middleware)."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route, method = route_label(scope["path"]), scope["method"]

        async def counting(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.metrics.observe_answer(route, method, int(message["status"]))
            await send(message)

        await self.app(scope, receive, counting)
