"""Turn a ``train_step.py`` report into rows of ``benchmarks/data/published-runs.csv``.

Usage: ``python -m benchmarks.device.rows benchmarks/data/device-h200-2026-11-26.json``
prints the rows (CSV, the file's columns, no header) to append. Each row records the
measured median step, tokens/s and the caching allocator's peak reserved memory (what the
other rows' published peaks are: ``torch.cuda.max_memory_reserved``), with the exact command
and the report file as its source. The rows are single-GPU FSDP2 runs (``framework: fsdp``,
ZeRO stage 3 on a world of one, data-parallel size 1, one micro-batch per step) recorded as
``framework: torchtitan``: the script is torchtitan's recipe (FSDP2, SDPA, fused AdamW, the
cross-entropy on an fp32 upcast) in eager mode, as the torchtitan rows without
``torch.compile`` are.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from benchmarks.accuracy import DATA

REPEATS = {"l1b-s2048-b4-m1": "l1b-s2048-b4"}
"""Runs that repeat a configuration already recorded (second set -> first set): they measure
the run-to-run spread (docs/validation.md) and are not rows of their own."""
GPU_ID = {"NVIDIA H200": "h200-sxm-141gb", "NVIDIA H100 80GB HBM3": "h100-sxm5-80gb"}
ROW_PREFIX = {"NVIDIA H200": "device-h200-", "NVIDIA H100 80GB HBM3": "device-h100-"}


def out_of_memory_runs(path: Path) -> list[dict[str, str]]:
    """The report's runs that failed with CUDA out-of-memory, as rows without measurements
    (the layout and the accelerator): evidence that a layout does not fit."""
    report = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for run in report["runs"]:
        if "oom" not in run:
            continue
        layout = CONFIG_BY_NAME[run["name"]]
        out.append(_row(report, path, {**layout, "name": run["name"], "params": 0,
                                       "median_step_s": 1.0, "steps_timed": 0,
                                       "peak_reserved_bytes": 0, "peak_allocated_bytes": 0,
                                       "device_used_bytes": 0}))
    return out


def _layouts() -> dict[str, dict[str, object]]:
    """Every configuration of train_step.py by name, read from its source text (the module
    imports torch, which the service and tests never do)."""
    import ast

    source = (Path(__file__).parent / "train_step.py").read_text(encoding="utf-8")
    layouts: dict[str, dict[str, object]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            for item in node.value.elts:
                if isinstance(item, ast.Tuple) and isinstance(item.elts[0], ast.Constant):
                    values = [ast.literal_eval(e) for e in item.elts]
                    keys = ("name", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
                            "seq_len", "micro_batch", "recompute", "accum", "compiled")
                    layouts[values[0]] = dict(zip(keys, values, strict=False))
    return layouts


CONFIG_BY_NAME = _layouts()


def rows_from_report(path: Path) -> list[dict[str, str]]:
    report = json.loads(path.read_text(encoding="utf-8"))
    return [_row(report, path, run) for run in report["runs"]
            if "median_step_s" in run and run["name"] not in REPEATS]


def _row(report: dict, path: Path, run: dict) -> dict[str, str]:
    gpu = GPU_ID[report["device"]]
    ceilings = report["ceilings"]
    accum = run.get("accum", 1)
    tokens = accum * run["micro_batch"] * run["seq_len"]
    compiled = ("torch.compile(fullgraph=True) per block (then fully_shard, as torchtitan "
                "applies it), " if run.get("compiled") else "eager (no torch.compile), ")
    notes = (
        f"Measured on this project's lent {report['device']} ({report['date']}, torch "
        f"{report['torch']}, CUDA {report['cuda']}; the card's measured ceilings in the same "
        f"run: bf16 8192^3 matmul {ceilings['bf16_matmul_flops_per_s'] / 1e12:.0f} TFLOP/s, "
        f"copy {ceilings['copy_bytes_per_s_read_plus_write'] / 1e12:.2f} TB/s read+write). "
        f"Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU, no biases, untied embeddings), "
        f"{run['params']:,} parameters counted by PyTorch; FSDP2 fully_shard per block and "
        f"root on one GPU, MixedPrecisionPolicy(param bf16, reduce fp32), fp32 parameters, "
        f"fused AdamW, SDPA causal (its default backend, cuDNN), cross-entropy on an fp32 "
        f"upcast of the logits, {compiled}recompute {run['recompute']} (torch.utils.checkpoint per "
        f"block). One step = {accum} micro-batch(es) of {run['micro_batch']} x "
        f"{run['seq_len']} tokens (forward and backward each, gradients accumulated, then "
        f"the optimizer step); median of {run['steps_timed']} timed steps after 3 "
        f"warm-up steps = {run['median_step_s']:.4f} s; tokens/s/GPU = {tokens} / "
        f"{run['median_step_s']:.4f}. Memory: torch.cuda.max_memory_reserved "
        f"{run['peak_reserved_bytes'] / 2**30:.2f} GiB (max_memory_allocated "
        f"{run['peak_allocated_bytes'] / 2**30:.2f} GiB; the device reported "
        f"{run['device_used_bytes'] / 2**30:.2f} GiB in use, CUDA context included). "
        f"Random tokens, the same batch every step. attention_kernel cudnn: PyTorch 2.11's "
        f"SDPA default on Hopper (measured on the H200: "
        f"benchmarks/data/device-h200-attention-2026-11-26.json)."
    )
    return {
        "id": f"{ROW_PREFIX[report['device']]}{run['name']}",
        "source": (f"ComputeQuote device measurement {report['date']}; "
                   f"benchmarks/device/train_step.py, report {path.name}, run {run['name']}"),
        "model": f"Llama-style {run['params'] / 1e9:.2f}B (device measurement)",
        "arch": "dense", "params_b": f"{run['params'] / 1e9:.3f}",
        "layers": str(run["layers"]), "hidden": str(run["hidden"]),
        "heads": str(run["heads"]), "kv_heads": str(run["kv_heads"]),
        "ffn": str(run["ffn"]), "mlp": "swiglu", "seq_len": str(run["seq_len"]),
        "vocab": str(run["vocab"]), "gpu": gpu, "gpu_count": "1", "tp": "1", "pp": "1",
        "dp": "1", "cp": "1", "ep": "1", "vp": "1", "sequence_parallel": "false",
        "micro_batch": str(run["micro_batch"]),
        "global_batch_seqs": str(accum * run["micro_batch"]),
        "zero_stage": "3", "recompute": run["recompute"], "precision": "bf16",
        "measured_tokens_per_s_per_gpu": f"{tokens / run['median_step_s']:.1f}",
        "measured_step_time_s": f"{run['median_step_s']:.4f}",
        "measured_memory_gib": f"{run['peak_reserved_bytes'] / 2**30:.2f}",
        "trust": "A", "notes": notes, "framework": "torchtitan", "role": "validation",
        "master_weights": "fp32", "gradient_precision": "fp32", "optimizer": "adamw",
        "fsdp_unit": "layer", "attention_kernel": "cudnn",
        "torch_compile": "true" if run.get("compiled") else "false",
    }



def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    with DATA.open(encoding="utf-8") as handle:
        columns = next(csv.reader(handle))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    for arg in args:
        for row in rows_from_report(Path(arg)):
            writer.writerow(row)
    sys.stdout.write(buffer.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
