"""Hardware failures and checkpoints of a training job: the one goodput model that quotes and
parallelism plans share (issue 39, item 6; MODEL.md section 7; docs/optimiser.md).

A training job stalls whenever any of its GPUs fails: with a failure rate f per GPU-hour over
n GPUs, the job is interrupted Λ = f·n / 3,600 times a second. Each interruption costs a
restart R and the work since the last checkpoint; a checkpoint of B bytes written at W bytes
per second takes C = B / W. ``pricing.goodput`` turns (Λ, C, R) into the Young/Daly lost
fraction L, and the job's wall-clock with failures is the failure-free wall-clock × (1 + L),
the quote's billed hours (``pricing.billed``). The goodput fraction, useful work over wall
time, is 1 / (1 + L). A job with L ≥ 1, or Λ·R ≥ 1, cannot make progress: it has no time.

The defaults are the quote's (``pricing.DEFAULT_*``), and so are the request fields that
override them (``reliability.failure_rate_per_gpu_hour``, ``restart_s``,
``checkpoint_bytes_per_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core import pricing
from service.core.params import count_parameters
from service.core.specs import ModelSpec
from service.core.units import SECONDS_PER_HOUR

FAILURE_RATE_SOURCE = (
    "default: Llama 3 405B, 466 job interruptions in 54 days on 16,384 H100 (Dubey et al. "
    "2024, section 3.3.4)")
RESTART_SOURCE = ("default: an assumed 10 minutes to detect a failure, reschedule and reload "
                  "the last checkpoint")
CHECKPOINT_BANDWIDTH_SOURCE = ("default: an assumed aggregate checkpoint write bandwidth of "
                               "the job's storage, 10 GB/s")
CHECKPOINT_BYTES_SOURCE = ("parameters x 14 B: bf16 weights (2) + fp32 master weights, Adam m "
                           "and v (12) (Rajbhandari et al. 2020, K=12)")
REQUEST_SOURCE = "request (reliability.{name})"
"""The source of an assumption the request gave (``{name}`` is the field)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reliability:
    """The failure assumptions: the quote's ``Options`` fields of the same names."""

    failure_rate_per_gpu_hour: float = pricing.DEFAULT_FAILURE_RATE_PER_GPU_HOUR
    restart_s: float = pricing.DEFAULT_RESTART_S
    checkpoint_bytes_per_s: float = pricing.DEFAULT_CHECKPOINT_BYTES_PER_S
    given: frozenset[str] = frozenset()
    """The fields the request gave (their source is the request, not the default)."""

    def source(self, name: str) -> str:
        if name in self.given:
            return REQUEST_SOURCE.format(name=name)
        return {"failure_rate_per_gpu_hour": FAILURE_RATE_SOURCE, "restart_s": RESTART_SOURCE,
                "checkpoint_bytes_per_s": CHECKPOINT_BANDWIDTH_SOURCE}[name]


DEFAULT_RELIABILITY = Reliability()


def checkpoint_bytes(model: ModelSpec) -> float:
    """A training checkpoint's size: every parameter × ``pricing.CHECKPOINT_BYTES_PER_PARAM``
    (the quote's ``_checkpoint_bytes``)."""
    return count_parameters(model).total * pricing.CHECKPOINT_BYTES_PER_PARAM


def interruptions_per_s(failure_rate_per_gpu_hour: float, units: float,
                        gpus_per_unit: float = 1.0) -> float:
    """Λ of a job that stalls when any of ``units`` × ``gpus_per_unit`` GPUs fails (a quote's
    cloud line counts instances × GPUs per instance, an on-prem line and a plan GPUs). The
    product is taken in the quote's order, rate × units × GPUs per unit / 3,600, so the quote
    calling this gets the same float."""
    return failure_rate_per_gpu_hour * units * gpus_per_unit / SECONDS_PER_HOUR


def training_goodput(*, units: float, checkpoint_bytes: float, reliability: Reliability,
                     gpus_per_unit: float = 1.0) -> pricing.Goodput:
    """``pricing.goodput`` of a training job on hardware that fails at the reliability's rate
    (the quote's on-demand, reserved and on-prem lines; spot lines have their own rate)."""
    return pricing.goodput(
        interruptions_per_s(reliability.failure_rate_per_gpu_hour, units, gpus_per_unit),
        checkpoint_bytes / reliability.checkpoint_bytes_per_s, reliability.restart_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFailures:
    """What failures do to one training job of ``num_gpus`` GPUs (a plan's cluster)."""

    num_gpus: int
    reliability: Reliability
    checkpoint_bytes: float
    checkpoint_s: float
    interruptions_per_s: float
    goodput: pricing.Goodput

    @property
    def progresses(self) -> bool:
        return self.goodput.feasible

    @property
    def factor(self) -> float:
        """Wall-clock with failures ÷ without: 1 + L; infinite when the job cannot progress."""
        return 1.0 + self.goodput.lost_fraction if self.goodput.feasible else math.inf

    @property
    def goodput_fraction(self) -> float:
        """Useful work over wall time, 1 / (1 + L); 0 when the job cannot progress."""
        return 1.0 / self.factor if self.goodput.feasible else 0.0

    @property
    def basis(self) -> str:
        """The quote's ``goodput_basis`` wording for hardware failures."""
        return (f"hardware failures {self.reliability.failure_rate_per_gpu_hour:g} per "
                f"GPU-hour over {self.num_gpus:,} GPUs; checkpoints of "
                f"{self.checkpoint_bytes:,.4g} B at "
                f"{self.reliability.checkpoint_bytes_per_s:,.4g} B/s; restarts of "
                f"{self.reliability.restart_s:,.4g} s (Young/Daly)")


def job_failures(num_gpus: int, checkpoint_bytes: float,
                 reliability: Reliability = DEFAULT_RELIABILITY) -> JobFailures:
    """The failures of a training job that stalls when any of its ``num_gpus`` GPUs fails."""
    rate = interruptions_per_s(reliability.failure_rate_per_gpu_hour, num_gpus)
    return JobFailures(
        num_gpus=num_gpus, reliability=reliability, checkpoint_bytes=checkpoint_bytes,
        checkpoint_s=checkpoint_bytes / reliability.checkpoint_bytes_per_s,
        interruptions_per_s=rate,
        goodput=training_goodput(units=num_gpus, checkpoint_bytes=checkpoint_bytes,
                                 reliability=reliability))
