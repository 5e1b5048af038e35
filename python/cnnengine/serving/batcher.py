"""Dynamic batching: requests already checked wait in one queue per model; each of the model's
instances takes the queued requests (up to --max-batch images, waiting up to --max-queue-delay-us for
more), runs them as one batch on a worker thread (the engine releases the GIL) and hands each request
its rows. The queue holds at most a bounded number of images, so a flood is refused, not buffered."""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .model import ServedModel
from .validation import UNAVAILABLE, RequestError

LOG = logging.getLogger("cnnengine.serve")

# Images queued per model, in full batches, before new requests are refused as busy.
QUEUED_BATCHES = 16


class _Pending:
    __slots__ = ("images", "future", "enqueued")

    def __init__(self, images: np.ndarray, future: asyncio.Future):
        self.images = images
        self.future = future
        self.enqueued = time.perf_counter()


class Batcher:
    def __init__(self, model: ServedModel, metrics):
        self.model = model
        self.metrics = metrics
        self._queue: collections.deque[_Pending] = collections.deque()
        self._queued_images = 0
        self._arrived = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=len(model.instances),
                                            thread_name_prefix=f"engine-{model.name}")
        self._tasks = [asyncio.get_running_loop().create_task(self._worker(instance))
                       for instance in model.instances]

    async def infer(self, images: np.ndarray) -> np.ndarray:
        """float32 [N, classes] for the N images, run in a batch with whatever else is queued."""
        limit = QUEUED_BATCHES * self.model.max_batch
        if self._queued_images + len(images) > limit:
            raise RequestError(f"model '{self.model.name}' has {self._queued_images} images queued; try again",
                               UNAVAILABLE)
        pending = _Pending(images, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        self._queued_images += len(images)
        self._arrived.set()
        return await pending.future

    def _take(self, batch: list[_Pending], count: int) -> int:
        while self._queue and count + len(self._queue[0].images) <= self.model.max_batch:
            item = self._queue.popleft()
            self._queued_images -= len(item.images)
            if not item.future.done():  # a client that went away has its future cancelled
                batch.append(item)
                count += len(item.images)
        return count

    async def _worker(self, instance) -> None:
        delay = self.model.max_queue_delay_us / 1e6
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            batch: list[_Pending] = []
            count = self._take(batch, 0)
            deadline = time.perf_counter() + delay
            while delay and count < self.model.max_batch and (left := deadline - time.perf_counter()) > 0:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    pass
                count = self._take(batch, count)
            if not batch:
                continue
            started = time.perf_counter()
            await self._run(loop, instance, batch, count)
            self.metrics.batch_done(self.model.name, batch, count, started)

    async def _run(self, loop, instance, batch: list[_Pending], count: int) -> None:
        images = batch[0].images if len(batch) == 1 else np.concatenate([p.images for p in batch])
        try:
            probabilities = await loop.run_in_executor(self._executor, instance.run, images)
        except Exception as e:  # noqa: BLE001 - the batch is split so only a request the engine refuses fails
            if len(batch) > 1:
                for p in batch:
                    await self._run(loop, instance, [p], len(p.images))
                return
            LOG.error("model '%s': the engine refused a request of %d images: %s", self.model.name, count, e)
            if not batch[0].future.done():
                batch[0].future.set_exception(RequestError(f"the engine could not run this request: "
                                                           f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"))
            return
        row = 0
        for p in batch:
            n = len(p.images)
            if not p.future.done():
                p.future.set_result(probabilities[row:row + n])
            row += n

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._executor.shutdown(wait=True)
