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
    def __init__(self, serving, model: str) -> None:
        """`serving`: one ServingEngine, or a ReplicaPool (then every engine counter carries a
        `replica` label, and the router's own counts are added)."""
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
        replicated = hasattr(serving, "slots")
        self.registry.register(_ReplicaCollector(serving, model) if replicated else _EngineCollector(serving, model))

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


_COUNTERS = {
    "aisql_prompt_tokens": ("Prompt tokens of admitted requests", "prompt_tokens"),
    "aisql_prefix_cache_hit_tokens": ("Prompt tokens read from the radix KV cache", "prefix_hit_tokens"),
    "aisql_generation_tokens": ("Tokens generated", "generated_tokens"),
    "aisql_spec_decode_draft_tokens": ("Speculative draft tokens verified", "draft_tokens"),
    "aisql_spec_decode_accepted_tokens": ("Speculative draft tokens accepted", "draft_accepted_tokens"),
    "aisql_decode_passes": ("Batched decode forward passes", "decode_passes"),
    "aisql_requests_finished": ("Requests finished (stop or length)", "finished"),
    "aisql_requests_cancelled": ("Requests cancelled (client gone or stop sequence)", "cancelled"),
}
_GAUGES = {
    "aisql_num_requests_running": ("Requests in the decode batch", "running"),
    "aisql_num_requests_waiting": ("Requests waiting for or in prefill", "waiting"),
    "aisql_kv_cache_bytes": ("Bytes held by the radix prefix cache", "kv_cached_bytes"),
}


class _ReplicaCollector:
    """Every replica's engine counters (as of the last refresh: the /metrics handler refreshes
    before rendering) labelled `replica`, and the router's: requests routed, deaths, readiness."""

    def __init__(self, pool, model: str) -> None:
        self.pool = pool
        self.model = model

    def collect(self):
        slots = self.pool.slots
        for name, (doc, key) in _COUNTERS.items():
            family = CounterMetricFamily(name, doc, labels=["model", "replica"])
            for slot in slots:
                family.add_metric([self.model, slot.state.name], slot.stats.get(key, 0))
            yield family
        for name, (doc, key) in _GAUGES.items():
            family = GaugeMetricFamily(name, doc, labels=["model", "replica"])
            for slot in slots:
                family.add_metric([self.model, slot.state.name], slot.stats.get(key, 0) if slot.state.alive else 0)
            yield family
        routed = CounterMetricFamily("aisql_router_requests", "Requests the router sent to each replica", labels=["model", "replica", "policy"])
        deaths = CounterMetricFamily("aisql_replica_deaths", "Times a replica's process died", labels=["model", "replica"])
        ready = GaugeMetricFamily("aisql_replica_ready", "1 while a replica takes requests", labels=["model", "replica"])
        load = GaugeMetricFamily("aisql_replica_outstanding_requests", "Requests routed to a replica and not finished", labels=["model", "replica"])
        for slot in slots:
            labels = [self.model, slot.state.name]
            routed.add_metric(labels + [self.pool.policy], slot.routed)
            deaths.add_metric(labels, slot.deaths)
            ready.add_metric(labels, 1 if slot.state.alive else 0)
            load.add_metric(labels, slot.state.load)
        yield from (routed, deaths, ready, load)


class _EngineCollector:
    def __init__(self, serving: ServingEngine, model: str) -> None:
        self.serving = serving
        self.model = model

    def collect(self):
        stats = self.serving.stats
        for name, (doc, key) in _COUNTERS.items():
            family = CounterMetricFamily(name, doc, labels=["model"])
            family.add_metric([self.model], getattr(stats, key))
            yield family
        for name, (doc, key) in _GAUGES.items():
            value = self.serving.engine.stats.kv_cached_bytes if key == "kv_cached_bytes" else getattr(stats, key)
            family = GaugeMetricFamily(name, doc, labels=["model"])
            family.add_metric([self.model], value)
            yield family
