"""Prometheus metrics of `aisql serve` (text format at /metrics), named like vLLM's where they match.

Latencies are histograms the app observes per request; counts of engine work (prompt and cached
tokens, generated tokens, speculative drafts, running and waiting requests) are read from the
serving engine's counters at scrape time, so they can never drift from what the engine did.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from aisql.engine.continuous import ServingEngine

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServerMetrics:
    def __init__(self, serving: ServingEngine, model: str) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "aisql_requests", "HTTP requests by endpoint and status code", ["endpoint", "status"], registry=self.registry
        )
        self.ttft = Histogram(
            "aisql_time_to_first_token_seconds",
            "Time from request to its first token",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.itl = Histogram(
            "aisql_inter_token_latency_seconds",
            "Time between a request's consecutive tokens",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.e2e = Histogram(
            "aisql_e2e_request_latency_seconds",
            "Time from request to its last token",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_EngineCollector(serving, model))

    def observe(self, handle) -> None:
        times = handle.times
        if times.first_token is not None:
            self.ttft.observe(times.first_token - times.submitted)
        for before, after in zip(times.token_times, times.token_times[1:]):
            if after > before:  # tokens of one pass arrive together: not a gap
                self.itl.observe(after - before)
        if times.token_times:
            self.e2e.observe(times.token_times[-1] - times.submitted)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector:
    def __init__(self, serving: ServingEngine, model: str) -> None:
        self.serving = serving
        self.model = model

    def collect(self):
        stats = self.serving.stats
        counters = {
            "aisql_prompt_tokens": ("Prompt tokens of admitted requests", stats.prompt_tokens),
            "aisql_prefix_cache_hit_tokens": ("Prompt tokens read from the radix KV cache", stats.prefix_hit_tokens),
            "aisql_generation_tokens": ("Tokens generated", stats.generated_tokens),
            "aisql_spec_decode_draft_tokens": ("Speculative draft tokens verified", stats.draft_tokens),
            "aisql_spec_decode_accepted_tokens": ("Speculative draft tokens accepted", stats.draft_accepted_tokens),
            "aisql_decode_passes": ("Batched decode forward passes", stats.decode_passes),
            "aisql_requests_finished": ("Requests finished (stop or length)", stats.finished),
            "aisql_requests_cancelled": ("Requests cancelled (client gone or stop sequence)", stats.cancelled),
        }
        for name, (doc, value) in counters.items():
            family = CounterMetricFamily(name, doc, labels=["model"])
            family.add_metric([self.model], value)
            yield family
        for name, doc, value in (
            ("aisql_num_requests_running", "Requests in the decode batch", stats.running),
            ("aisql_num_requests_waiting", "Requests waiting for or in prefill", stats.waiting),
            ("aisql_kv_cache_bytes", "Bytes held by the radix prefix cache", self.serving.engine.stats.kv_cached_bytes),
        ):
            family = GaugeMetricFamily(name, doc, labels=["model"])
            family.add_metric([self.model], value)
            yield family
