"""Prometheus metrics of one server process (prometheus_client, on its own registry): requests that
succeeded and failed, images run, batches formed, queue and compute time, and how many times the
supervisor has restarted the server."""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class Metrics:
    def __init__(self, restarts: int):
        self.registry = r = CollectorRegistry()
        per_model = ["model"]
        self.success = Counter("cnnengine_inference_request_success", "Requests answered", per_model, registry=r)
        self.failure = Counter("cnnengine_inference_request_failure", "Requests refused or failed, by HTTP status",
                               ["model", "status"], registry=r)
        self.images = Counter("cnnengine_inference_count", "Images run", per_model, registry=r)
        self.batches = Counter("cnnengine_inference_exec_count", "Batches the dynamic batcher formed and ran",
                               per_model, registry=r)
        self.queue_us = Counter("cnnengine_inference_queue_duration_us", "Time requests waited in the queue (us)",
                                per_model, registry=r)
        self.compute_us = Counter("cnnengine_inference_compute_duration_us", "Time the engine ran batches (us)",
                                  per_model, registry=r)
        Gauge("cnnengine_server_restarts", "Times the supervisor restarted the server process after it died",
              registry=r).set(restarts)
        Gauge("cnnengine_server_start_time_seconds", "When this server process started (Unix time)",
              registry=r).set(time.time())

    def add_model(self, model: str) -> None:
        """Each model's series exist from the start, at 0, so a scrape before traffic sees them."""
        for counter in (self.success, self.images, self.batches, self.queue_us, self.compute_us):
            counter.labels(model)

    def batch_done(self, model: str, batch, images: int, started: float) -> None:
        now = time.perf_counter()
        self.batches.labels(model).inc()
        self.images.labels(model).inc(images)
        self.compute_us.labels(model).inc((now - started) * 1e6)
        self.queue_us.labels(model).inc(sum(started - p.enqueued for p in batch) * 1e6)

    def request_done(self, model: str, status: int) -> None:
        if status == 200:
            self.success.labels(model).inc()
        else:
            self.failure.labels(model, str(status)).inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)
