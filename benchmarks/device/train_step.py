"""Measure real training steps of small Llama-style models on one GPU (issue 15).

Run on the device machine (PyTorch 2.11, one H200), from the repository root:

    PYTHONUNBUFFERED=1 python3 benchmarks/device/train_step.py --out $OUT/train_steps.json

Every configuration is a Llama-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU, no
biases, untied embeddings) trained the way torchtitan trains it, in eager mode (the
``torchtitan`` stack of ``service.core.specs.Framework``): FSDP2 ``fully_shard`` per block and
at the root with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` on a world of one
GPU, fp32 parameters that are the optimizer's master copy, fused AdamW,
``scaled_dot_product_attention`` (causal, PyTorch's default backend), the cross-entropy on an fp32
upcast of the logits (as torchtitan does), and, for ``recompute: full``,
``torch.utils.checkpoint`` around every block. One step is one micro-batch (data-parallel size
1, no accumulation; ``--set 2`` also runs 2, 4 and 8 micro-batches per step and
``torch.compile`` per block): forward, backward, optimizer step, ``zero_grad``. It reports the
median of the timed steps after warm-up, the peak memory the caching allocator held (allocated
and reserved) and what the device reported in use.

This file imports torch, which the service never does; it is not imported by tests or by the
service, and the figures it printed are in ``benchmarks/data/published-runs.csv`` (rows
``device-h200-*``) with this command as their source.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)
from torch import nn

CONFIGS = [
    # name, layers, hidden, heads, kv_heads, ffn, vocab, seq, micro_batch, recompute
    ("l350m-s2048-b8", 24, 1024, 16, 16, 2816, 32000, 2048, 8, "none"),
    ("l350m-s2048-b16", 24, 1024, 16, 16, 2816, 32000, 2048, 16, "none"),
    ("l1b-s2048-b4", 16, 2048, 32, 8, 8192, 128256, 2048, 4, "none"),
    ("l1b-s2048-b8", 16, 2048, 32, 8, 8192, 128256, 2048, 8, "none"),
    ("l1b-s8192-b1", 16, 2048, 32, 8, 8192, 128256, 8192, 1, "none"),
    ("l1b-s4096-b8-full", 16, 2048, 32, 8, 8192, 128256, 4096, 8, "full"),
    ("l3b-s4096-b2", 28, 3072, 24, 8, 8192, 128256, 4096, 2, "none"),
    ("l3b-s4096-b8-full", 28, 3072, 24, 8, 8192, 128256, 4096, 8, "full"),
    ("l7b-s4096-b1-full", 32, 4096, 32, 32, 11008, 32000, 4096, 1, "full"),
    ("l7b-s4096-b4-full", 32, 4096, 32, 32, 11008, 32000, 4096, 4, "full"),
    ("l8b-s4096-b1-full", 32, 4096, 32, 8, 14336, 128256, 4096, 1, "full"),
]
SECOND_SET = [
    # The per-step fixed cost: the same micro-batch with 1, 2, 4 and 8 micro-batches per
    # optimizer step (gradient accumulation); torch.compile per block as torchtitan does it;
    # a repeat of a first-set configuration for run-to-run spread.
    # name, layers, hidden, heads, kv_heads, ffn, vocab, seq, micro_batch, recompute, accum,
    # compile
    ("l1b-s2048-b4-m1", 16, 2048, 32, 8, 8192, 128256, 2048, 4, "none", 1, False),
    ("l1b-s2048-b4-m2", 16, 2048, 32, 8, 8192, 128256, 2048, 4, "none", 2, False),
    ("l1b-s2048-b4-m4", 16, 2048, 32, 8, 8192, 128256, 2048, 4, "none", 4, False),
    ("l1b-s2048-b4-m8", 16, 2048, 32, 8, 8192, 128256, 2048, 4, "none", 8, False),
    ("l350m-s2048-b8-m4", 24, 1024, 16, 16, 2816, 32000, 2048, 8, "none", 4, False),
    ("l7b-s4096-b1-full-m4", 32, 4096, 32, 32, 11008, 32000, 4096, 1, "full", 4, False),
    ("l1b-s2048-b4-compile", 16, 2048, 32, 8, 8192, 128256, 2048, 4, "none", 1, True),
    ("l3b-s4096-b2-compile", 28, 3072, 24, 8, 8192, 128256, 4096, 2, "none", 1, True),
]
THIRD_SET = [
    # The edge of the memory promise: the 8B at 2 sequences (answered fits, 136.8 of 141
    # GiB, by calibration 2026-11-26.1) and at 4 (answered does not fit); long sequences,
    # where attention dominates; no recompute on the 7B; compiled runs (dynamo reset first).
    ("l8b-s4096-b2-full", 32, 4096, 32, 8, 14336, 128256, 4096, 2, "full", 1, False),
    ("l8b-s4096-b4-full", 32, 4096, 32, 8, 14336, 128256, 4096, 4, "full", 1, False),
    ("l1b-s16384-b1", 16, 2048, 32, 8, 8192, 128256, 16384, 1, "none", 1, False),
    ("l1b-s32768-b1-full", 16, 2048, 32, 8, 8192, 128256, 32768, 1, "full", 1, False),
    ("l7b-s2048-b1", 32, 4096, 32, 32, 11008, 32000, 2048, 1, "none", 1, False),
    ("l1b-s8192-b1-compile", 16, 2048, 32, 8, 8192, 128256, 8192, 1, "none", 1, True),
    ("l3b-s4096-b2-compile", 28, 3072, 24, 8, 8192, 128256, 4096, 2, "none", 1, True),
]
H100_SET = [
    # The first set's layouts that the model answers "fits" on an 80 GB H100 (calibration
    # 2026-11-26.1), the tightest last: l3b-s4096-b2 at a predicted 77.5 of 80 GiB.
    ("l350m-s2048-b8", 24, 1024, 16, 16, 2816, 32000, 2048, 8, "none"),
    ("l1b-s2048-b4", 16, 2048, 32, 8, 8192, 128256, 2048, 4, "none"),
    ("l1b-s8192-b1", 16, 2048, 32, 8, 8192, 128256, 8192, 1, "none"),
    ("l1b-s2048-b8", 16, 2048, 32, 8, 8192, 128256, 2048, 8, "none"),
    ("l1b-s4096-b8-full", 16, 2048, 32, 8, 8192, 128256, 4096, 8, "full"),
    ("l3b-s4096-b4-full", 28, 3072, 24, 8, 8192, 128256, 4096, 4, "full"),
    ("l3b-s4096-b2", 28, 3072, 24, 8, 8192, 128256, 4096, 2, "none"),
]
EDGE_SET = [
    # After decision 143 (calibration 2026-11-26.1), on an H200: the layout answered "fits"
    # nearest the capacity (95.1%) and the two answered "does not fit" nearest it (105.4%,
    # 106.1%); whether the latter run is how far the model stays conservative.
    ("l8b-s16384-b1-full", 32, 4096, 32, 8, 14336, 128256, 16384, 1, "full"),
    ("l1b-s16384-b4-full", 16, 2048, 32, 8, 8192, 128256, 16384, 4, "full"),
    ("l8b-s8192-b1", 32, 4096, 32, 8, 14336, 128256, 8192, 1, "none"),
]


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int, recompute: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.recompute = recompute
        self.attn_norm = RMSNorm(hidden)
        self.wq = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.mlp_norm = RMSNorm(hidden)
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)

    def _forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.kv_heads != self.heads)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, -1))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.recompute:
            return torch.utils.checkpoint.checkpoint(self._forward, x, cos, sin,
                                                     use_reentrant=False)
        return self._forward(x, cos, sin)


class Decoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
                 vocab: int, recompute: bool) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, kv_heads, ffn, recompute)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.output = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        pos = torch.arange(s, device=tokens.device, dtype=torch.float32)
        inv = 1.0 / (500000.0 ** (torch.arange(0, self.head_dim, 2, device=tokens.device,
                                               dtype=torch.float32) / self.head_dim))
        angles = torch.outer(pos, inv)
        dtype = self.embed.weight.dtype
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.output(self.norm(x))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def run_config(cfg: tuple, warmup: int, timed: int) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    name, layers, hidden, heads, kv_heads, ffn, vocab, seq, mb, recompute = cfg[:10]
    accum, compiled = (cfg[10], cfg[11]) if len(cfg) > 10 else (1, False)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    if compiled:  # a fresh dynamo cache: no dynamic shapes carried over from another model
        torch._dynamo.reset()
    base_allocated = torch.cuda.memory_allocated()
    with torch.device("meta"):
        model = Decoder(layers, hidden, heads, kv_heads, ffn, vocab, recompute == "full")
    params = parameter_count(model)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for index, block in enumerate(model.blocks):
        if compiled:  # torchtitan: torch.compile each block, then fully_shard it
            block = torch.compile(block, fullgraph=True)
            model.blocks[index] = block
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, vocab, (mb, seq + 1), device="cuda")
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    times, losses = [], []
    for step in range(warmup + timed):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(accum):
            logits = model(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten()) / accum
            del logits
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
        losses.append(float(loss.detach()) * accum)
    free, total = torch.cuda.mem_get_info()
    result = {
        "name": name, "layers": layers, "hidden": hidden, "heads": heads,
        "kv_heads": kv_heads, "ffn": ffn, "vocab": vocab, "seq_len": seq, "micro_batch": mb,
        "recompute": recompute, "accum": accum, "compiled": compiled, "params": params,
        "steps_timed": timed,
        "step_times_s": times, "median_step_s": statistics.median(times),
        "tokens_per_s": accum * mb * seq / statistics.median(times),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() - base_allocated,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "device_used_bytes": total - free, "device_total_bytes": total,
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    del model, optimizer, tokens, inputs, labels, loss
    return result


def calibrate_device() -> dict:
    """The bf16 matmul rate and copy bandwidth this card gives, as ceilings for the steps."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    matmul_s = (time.perf_counter() - start) / 20
    x = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    copy_s = (time.perf_counter() - start) / 10
    del a, b, x, y
    torch.cuda.empty_cache()
    return {"bf16_matmul_flops_per_s": 2 * 8192**3 / matmul_s,
            "copy_bytes_per_s_read_plus_write": 2 * 2 * 2**30 / copy_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timed", type=int, default=6)
    parser.add_argument("--budget-s", type=float, default=360.0,
                        help="skip the remaining configurations once this much time has passed")
    parser.add_argument("--only", default="", help="comma-separated configuration names")
    parser.add_argument("--set", type=int, default=1, choices=(1, 2, 3, 4, 5),
                        help="1: the sizes and layouts; 2: accumulation, compile, repeats; "
                             "3: the memory edge, long sequences, compile; 4: for an 80 GB "
                             "H100; 5: the memory edge after decision 143")
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    started = time.perf_counter()
    report = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(sys.argv), "ceilings": calibrate_device(), "runs": [],
    }
    wanted = set(filter(None, args.only.split(",")))
    for cfg in {1: CONFIGS, 2: SECOND_SET, 3: THIRD_SET, 4: H100_SET, 5: EDGE_SET}[args.set]:
        if wanted and cfg[0] not in wanted:
            continue
        if time.perf_counter() - started > args.budget_s:
            report["runs"].append({"name": cfg[0], "skipped": "time budget"})
            continue
        try:
            result = run_config(cfg, args.warmup, args.timed)
        except torch.OutOfMemoryError as exc:
            result = {"name": cfg[0], "oom": str(exc).splitlines()[0],
                      "peak_reserved_bytes": torch.cuda.max_memory_reserved()}
        gc.collect()
        torch.cuda.empty_cache()
        report["runs"].append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "step_times_s"}), flush=True)
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
    dist.destroy_process_group()
    if not all(math.isfinite(r.get("loss_last", 0.0)) for r in report["runs"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
