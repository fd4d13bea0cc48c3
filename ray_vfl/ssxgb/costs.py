"""What each SSXGB role's process has spent: CPU seconds and BCP operations (benchmarks read both;
the operation counts times single-core unit costs give a training's crypto floor)."""

from __future__ import annotations

import time

from ..crypto.two_server.bcp_arrays import op_counts

__all__ = ["CostCounters"]


class CostCounters:
    """Mixin of the role actors (participants, C, S)."""

    def cpu_seconds(self) -> float:
        """CPU time of this actor's process so far (benchmarks: where a round's time goes)."""
        return time.process_time()

    def crypto_ops(self) -> dict[str, int]:
        """This process's BCP operations so far (:func:`~ray_vfl.crypto.two_server.bcp_arrays.op_counts`); the
        work it cut over its task pool is counted here, where it was asked for."""
        return op_counts()
