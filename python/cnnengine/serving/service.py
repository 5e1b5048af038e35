"""What the HTTP and gRPC front ends share: the served models and their batchers, the metrics, the
bearer token, readiness."""
from __future__ import annotations

import hmac

import numpy as np

from .batcher import Batcher
from .metrics import Metrics
from .model import OUTPUT_CLASSES, OUTPUT_PROBABILITIES, ServedModel
from .validation import NOT_FOUND, UNAUTHENTICATED, RequestError

SERVER_NAME = "cnnengine"
EXTENSIONS = ["binary_tensor_data", "model_configuration"]


class InferenceService:
    def __init__(self, models: dict[str, ServedModel], metrics: Metrics, token: str | None, version: str):
        self.models = models
        self.metrics = metrics
        self.version = version
        self._token = token.encode() if token else None
        self.batchers: dict[str, Batcher] = {}
        self.ready = False
        for name in models:
            metrics.add_model(name)

    def start(self) -> None:
        """Batchers exist once the event loop runs; the server is ready once every model has one."""
        self.batchers = {name: Batcher(m, self.metrics) for name, m in self.models.items()}
        self.ready = True

    def model(self, name) -> ServedModel:
        m = self.models.get(name) if isinstance(name, str) else None
        if m is None:
            raise RequestError(f"no model named {name!r}" if isinstance(name, str) and len(name) <= 80
                               else "no such model", NOT_FOUND)
        return m

    def metadata(self) -> dict:
        return {"name": SERVER_NAME, "version": self.version, "extensions": EXTENSIONS}

    def check_token(self, authorization: str | None) -> None:
        """Refuses a request without the bearer token when the server has one."""
        if self._token is None:
            return
        scheme, _, supplied = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.strip().encode(), self._token):
            raise RequestError("a bearer token is required (Authorization: Bearer TOKEN)", UNAUTHENTICATED)

    async def infer(self, model: ServedModel, images: np.ndarray, outputs: list[str]) -> dict[str, np.ndarray]:
        probabilities = await self.batchers[model.name].infer(images)
        result = {}
        for name in outputs:
            if name == OUTPUT_PROBABILITIES:
                result[name] = np.ascontiguousarray(probabilities, dtype=np.float32)
            elif name == OUTPUT_CLASSES:
                result[name] = probabilities.argmax(axis=1).astype(np.int64).reshape(-1, 1)
        return result

    def count(self, model_name, status: int) -> None:
        """Counts a finished request under its model's name (unknown names share one label)."""
        self.metrics.request_done(model_name if model_name in self.models else "", status)

    async def close(self) -> None:
        for b in self.batchers.values():
            await b.close()
