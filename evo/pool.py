"""The fitness workers of a run: one `FitnessService` actor per GPU, or one CPU worker.

Proposals go to the least-loaded worker in `evaluate_many` calls of at most `max_batch`
requests (one by default: a call returns when all of its verdicts are in, so a batch of long
evaluations would hold every verdict back until the last); a worker that dies is replaced,
and the driver gives its candidates a `runtime_error` verdict.
"""

from __future__ import annotations

from collections import defaultdict

import ray

WORKER_DIED = "fitness worker died during the evaluation"


class FitnessPool:
    """One FitnessService actor per GPU (or CPU workers on the interpreter), fed round-robin
    by outstanding load; a worker that dies is replaced and its candidates get a verdict."""

    def __init__(
        self,
        run_id: str,
        device: str,
        workers: int | None = None,
        worker_cls=None,
        max_batch: int | None = 1,
    ):
        gpus = int(ray.cluster_resources().get("GPU", 0))
        self.gpu = gpus > 0 and device != "cpu"
        self.n = workers or (gpus if self.gpu else 1)
        self.run_id, self.device = run_id, device
        self.worker_cls = worker_cls  # another fitness actor class (the overhead benchmark's)
        self.max_batch = max_batch  # None: one call per worker per batch
        self.workers = [self._start(k) for k in range(self.n)]
        self.load = [0] * self.n

    def _start(self, k: int):
        from fitness.worker import FitnessService

        res = {"num_gpus": 1, "num_cpus": 0} if self.gpu else {"num_cpus": 0.5}
        cls = ray.remote(max_concurrency=4, **res)(self.worker_cls or FitnessService)
        name = f"evo-fitness-{self.run_id}-{k}"
        return cls.options(name=name, max_restarts=0).remote(device=self.device)

    def submit(self, requests: list[dict]) -> list[tuple]:
        """Each request to the least-loaded worker; one call per worker for all of its share.
        Returns (ref, worker index, worker handle, the requests' positions) per call."""
        share: dict[int, list[int]] = defaultdict(list)
        for pos in range(len(requests)):
            k = min(range(self.n), key=lambda i: self.load[i])
            self.load[k] += 1
            share[k].append(pos)
        step = self.max_batch or len(requests)
        return [
            (self.workers[k].evaluate_many.remote([requests[p] for p in chunk]), k,
             self.workers[k], chunk)
            for k, ps in share.items()
            for chunk in (ps[i : i + step] for i in range(0, len(ps), step))
        ]  # fmt: skip

    def done(self, k: int, n: int = 1) -> None:
        self.load[k] = max(0, self.load[k] - n)

    def replace(self, k: int) -> None:
        try:
            ray.kill(self.workers[k])
        except Exception:  # noqa: BLE001 - it is already gone
            pass
        self.workers[k] = self._start(k)
        self.load[k] = 0
