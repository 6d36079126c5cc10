"""Measure PyTorch SDPA's fused-attention backends on the lent GPU (issue 15).

Run on the device machine, from the repository root:

    PYTHONUNBUFFERED=1 python3 benchmarks/device/attention.py --out $OUT/attention.json

For each backend (flash = FlashAttention-2, cuDNN, memory-efficient) and the default choice,
causal, head dimension 128, bf16, 16 heads, a batch that keeps 32,768 tokens per call, and
sequence lengths 2,048-32,768, it times forward and forward + backward (CUDA events, median
of 10 after 3 warm-ups) and reports useful TFLOP/s the way ``attention.KERNEL_PEAK_FRACTION``'s
sources count them: forward 4 b h s^2 d / 2 (causal), backward 2.5 times the forward. The
default backend is identified by the timing it matches (within 3%). This file imports torch and
is never imported by the service or the tests; ``service/core/attention.py`` cites its report
(``benchmarks/data/device-h200-attention-2026-11-26.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
TOKENS = 32_768
HEADS = 16
HEAD_DIM = 128


def timed(fn, repeats: int = 10, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def measure(backend: str, seq: int) -> dict:
    batch = max(1, TOKENS // seq)
    shape = (batch, HEADS, seq, HEAD_DIM)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def forward() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def both() -> None:
        forward().backward(grad)

    if backend == "default":
        forward_s, both_s = timed(forward), timed(both)
    else:
        with sdpa_kernel([BACKENDS[backend]]):
            forward_s, both_s = timed(forward), timed(both)
    forward_flops = 4 * batch * HEADS * seq * seq * HEAD_DIM / 2
    return {"backend": backend, "seq_len": seq, "batch": batch, "forward_s": forward_s,
            "forward_backward_s": both_s,
            "forward_tflops": forward_flops / forward_s / 1e12,
            "forward_backward_tflops": 3.5 * forward_flops / both_s / 1e12}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
              "heads": HEADS, "head_dim": HEAD_DIM, "tokens_per_call": TOKENS, "runs": []}
    for seq in (2048, 4096, 8192, 16384, 32768):
        for backend in ("default", *BACKENDS):
            try:
                result = measure(backend, seq)
            except RuntimeError as exc:  # a backend that refuses the shape
                result = {"backend": backend, "seq_len": seq, "error": str(exc).splitlines()[0]}
            torch.cuda.empty_cache()
            report["runs"].append(result)
            print(json.dumps(result), flush=True)
    for seq in (2048, 4096, 8192, 16384, 32768):
        runs = {r["backend"]: r for r in report["runs"]
                if r["seq_len"] == seq and "forward_backward_s" in r}
        if "default" not in runs:
            continue
        default = runs["default"]["forward_backward_s"]
        report.setdefault("default_matches", {})[str(seq)] = [
            name for name, r in runs.items()
            if name != "default" and abs(r["forward_backward_s"] / default - 1) < 0.03]
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    print(json.dumps(report.get("default_matches")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
