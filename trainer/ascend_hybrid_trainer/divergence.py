"""Numerical divergence, detected from the two numbers every step already has: the loss of the global batch and
the global norm of its gradients (before clipping). Pure: the worker feeds it floats.

A step diverged when
- the loss or the gradient norm is NaN or infinite;
- the loss is above `loss_factor` x the lowest loss so far (a learning rate far too high sends the loss up by
  orders of magnitude while it stays finite: the tiny preset at learning rate 1e6 goes from 6.26 at step 1 to
  2.4e13 at step 2);
- the gradient norm is above `grad_factor` x the median of the last WINDOW norms (once MIN_HISTORY are known):
  an exploding gradient, the seed's "梯度爆炸 — 查看梯度范数" (seed §5.5, docs/design.md §11).
A factor of 0 turns its rule off. Why the defaults are 10 and 100: docs/troubleshooting.md.
"""

from __future__ import annotations

import math
import statistics
from collections import deque


class DivergenceError(RuntimeError):
    def __init__(self, step: int, detail: str):
        super().__init__(detail)
        self.step, self.detail = step, detail


class DivergenceMonitor:
    WINDOW = 50
    MIN_HISTORY = 5

    def __init__(self, loss_factor: float, grad_factor: float):
        self.loss_factor, self.grad_factor = loss_factor, grad_factor
        self.lowest: tuple[float, int] | None = None  # (loss, step)
        self.norms: deque[float] = deque(maxlen=self.WINDOW)

    def observe(self, step: int, loss: float, grad_norm: float) -> None:
        """Raises DivergenceError when this step diverged; else remembers it."""
        if not math.isfinite(loss):
            raise DivergenceError(step, f"loss is {loss} at step {step}")
        if not math.isfinite(grad_norm):
            raise DivergenceError(step, f"gradient norm is {grad_norm} at step {step} (loss {loss:.6g})")
        if self.loss_factor and self.lowest is not None and self.lowest[0] > 0 \
                and loss > self.loss_factor * self.lowest[0]:
            raise DivergenceError(step, f"loss {loss:.6g} at step {step} is above {self.loss_factor:g} x its lowest "
                                        f"value so far ({self.lowest[0]:.6g} at step {self.lowest[1]}); lower "
                                        f"training.learningRate or set training.gradientClipNorm")
        if self.grad_factor and len(self.norms) >= self.MIN_HISTORY:
            median = statistics.median(self.norms)
            if median > 0 and grad_norm > self.grad_factor * median:
                raise DivergenceError(step, f"gradient norm {grad_norm:.6g} at step {step} is above "
                                            f"{self.grad_factor:g} x its median of the last {len(self.norms)} steps "
                                            f"({median:.6g}); lower training.learningRate or set "
                                            f"training.gradientClipNorm")
        if self.lowest is None or loss < self.lowest[0]:
            self.lowest = (loss, step)
        self.norms.append(grad_norm)
