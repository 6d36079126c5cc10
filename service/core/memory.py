"""Memory per GPU with a breakdown (docs/model.md section 3).

Model states (Rajbhandari et al. 2020, ZeRO, section 3.1; Megatron-LM keeps fp32 gradients):
16-bit weights (2 bytes), fp32 gradients (4 bytes) and Adam state (fp32 master weights, m and
v: 12 bytes) per parameter. ZeRO-1 shards the optimizer state over the data-parallel group,
ZeRO-2 also the gradients, ZeRO-3/FSDP also the weights, which then need gather buffers for
two layers (the one computing and the one prefetched).

Activations per token and layer, derived tensor by tensor from Korthikanti et al. 2022
(Table 2 and section 4.1) for GQA, SwiGLU and MoE, with FlashAttention (no s^2 score matrix;
Dao et al. 2022) and no dropout (modern LLM pre-training uses none):
- outside tensor-parallel regions (sharded by tp only with sequence parallelism):
  norm inputs and outputs of the attention and MLP blocks, 4 tensors x 2h bytes = 8h;
- inside (sharded by tp): Q (2*a*d_qk), K and V (2*2*g*d_h), attention output (2*a*d_v),
  softmax statistics (4*a, fp32), and the MLP: 4f for two-matrix MLPs (fc1 output and
  activation output), 6f for SwiGLU (gate, up and their product);
- MoE layers: every routed copy of a token keeps its expert input (2h) and expert MLP
  tensors (divided by expert TP, and by tp/etp when folding splits the tokens), plus fp32
  router logits (4E).
Without a fused attention kernel each layer also stores 5*a*s/t bytes per token (softmax,
dropout mask and output; Korthikanti et al. 2022, Table 2); with context parallelism each
query still meets all s keys, so the per-token figure keeps the full s. Full recomputation
keeps only each layer's input (2h, sharded with sequence parallelism) plus one layer's working
set. Selective recomputation keeps ``Calibration.selective_activation_fraction`` of the stored
activations:
Megatron's "core attention" variant saves the score matrix (which fused kernels never store),
torchtitan's per-op variant also recomputes the cheap elementwise tensors.

1F1B keeps up to p micro-batches in flight on the first stage, so it holds about L layers'
worth of one micro-batch; interleaving multiplies that by 1 + (p-1)/(p*v) (Korthikanti et al.
2022, section 4.2.3). The last stage holds the logits (``StateLayout.logits_bytes_per_entry``
per vocabulary entry per token, divided by tp). The loss and the output layer's backward run
before any layer's backward, so the logits and the working set of a recomputed layer are never
live together: the stage holds the larger of the two on top of what it stored.

Model-state bytes per parameter, logits bytes and allocator fragmentation depend on the
training stack (``STACK_MEMORY``, ``state_layout``). Offloaded state (``specs.Offload``)
leaves the device: the optimizer state and sharded gradients, the sharded weights, or the
stored activations, of which the device keeps ``OFFLOAD_LAYERS_IN_TRANSIT`` layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from service.core.calibration import Calibration
from service.core.geometry import Geometry, PlanVars
from service.core.ops import SCALAR, Num
from service.core.params import adapter_params_per_layer
from service.core.specs import (
    BasePrecision,
    Framework,
    LossKernel,
    MlpKind,
    ModelSpec,
    Optimizer,
    Precision,
    StatePrecision,
    TrainingSpec,
    lora_matrix_shapes,
)

WEIGHT_BYTES_PER_PARAM = 2.0
"""bf16/fp16 working weights (Micikevicius et al. 2018, mixed-precision training)."""
GRAD_BYTES_PER_PARAM = 4.0
"""fp32 gradient accumulation buffer (Megatron-LM ``main_grad``; FSDP2 reduce dtype fp32)."""
OPTIMIZER_BYTES_PER_PARAM = 12.0
"""Adam: fp32 master weights, first and second moments (Rajbhandari et al. 2020, K = 12)."""
LOGITS_BYTES_PER_ENTRY = 6.0
"""Peak bytes per logit: the bf16 output of the head (2) while the fused cross-entropy holds
its fp32 copy (4). Megatron-LM's ``VocabParallelCrossEntropy`` (megatron/core/tensor_parallel/
cross_entropy.py) exponentiates the fp32 copy in place, saves it for backward and writes the
gradient into the same buffer, so no third copy exists (issue 15: the constant was 10, which
counted that gradient separately, against this docstring's 6)."""
UNFUSED_ATTENTION_BYTES = 5.0
"""Per token, head and key without a fused kernel: softmax output (2), dropout mask (1) and
dropout output (2) (Korthikanti et al. 2022, Table 2, the 5as/t term)."""
ACTIVATION_BYTES = 2.0
"""16-bit activations (also under FP8 training: Transformer Engine stores bf16 inputs)."""
XLA_RUNTIME_BYTES = 1.0 * 2**30
"""HBM an XLA runtime keeps outside the compiled step's buffers (program binaries, infeed and
collective scratch): an assumption, not a fit (no public TPU run prints its peak); it stands
in for the CUDA context, NCCL and workspace bytes that a TPU does not have."""
DEEPSPEED_MAX_LIVE_PARAMS = 1e9
"""DeepSpeed ZeRO-3 ``stage3_max_live_parameters`` default: parameters kept gathered at once
(DeepSpeed configuration docs, ZeRO optimizations)."""
OFFLOAD_LAYERS_IN_TRANSIT = 2.0
"""With activation offload the device holds the layer being written to (or read from) the host
and the one prefetched next (double buffering, as in ZeRO-Infinity's activation offload,
Rajbhandari et al. 2021, section 5.2, and MaxText's host-offload remat policies)."""


FP32_LOGITS_BYTES_PER_ENTRY = 4.0
"""The fp32 copy of the logits that torchtitan's ``F.cross_entropy(pred.float())`` and
Megatron's vocab-parallel cross-entropy (``vocab_parallel_logits.float()``) make: the largest
single block such a step allocates when the vocabulary is large."""


ADAMW_8BIT_BLOCK_SIZE = 2048
"""bitsandbytes' 8-bit optimizers quantise each state in blocks of 2,048 values, each with one
fp32 absolute maximum (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization",
arXiv 2110.02861, section 2.1; bitsandbytes ``optimizer_update_8bit_blockwise``)."""
ADAMW_8BIT_MOMENT_BYTES_PER_PARAM = 2.0 * (1.0 + 4.0 / ADAMW_8BIT_BLOCK_SIZE)
"""AdamW8bit: m and v at 1 byte each plus their block constants (2 x 4/2048 B), about 2 B per
trainable parameter instead of Adam's 8 (the same paper, section 2; tensors under 4,096
values stay 32-bit, ``min_8bit_size``, a negligible share of a transformer's parameters)."""


@dataclass(frozen=True, slots=True)
class LossMemory:
    """What a cross-entropy kernel holds at the loss, per logit (``tokens x vocab``) and per
    token and hidden unit (a fused kernel's chunk)."""

    logits_bytes_per_entry: float
    """Bytes live at the loss per logit of the micro-batch."""
    block_bytes_per_entry: float
    """The largest single block per logit (the caching allocator's headroom)."""
    working_bytes_per_hidden: float = 0.0
    """A fused kernel's working set per token and hidden unit."""
    block_bytes_per_hidden: float = 0.0


LOSS_KERNELS: Mapping[LossKernel, LossMemory] = MappingProxyType({
    # PyTorch F.cross_entropy(logits.float(), labels): the bf16 logits (2), their fp32 copy
    # (4) and the fp32 log-softmax saved for the backward (4), whose gradient (4) replaces it
    # (``TORCH_CROSS_ENTROPY_BYTES_PER_ENTRY``, measured here at 9 to 11 bytes per logit).
    # Hugging Face transformers' ForCausalLMLoss (loss_utils.py: ``logits = logits.float()``
    # then ``nn.functional.cross_entropy``) and torchtitan's loss compute it so.
    LossKernel.STANDARD: LossMemory(logits_bytes_per_entry=10.0, block_bytes_per_entry=4.0),
    # torchtune CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py,
    # num_output_chunks=8): the output layer returns the bf16 logits as 8 chunks, all kept
    # (2 B per logit), and each chunk is upcast and reduced in turn under torch.compile, so
    # one chunk's fp32 copy and log-softmax are live: (4 + 4) / 8 = 1 B per logit. The
    # largest block is one fp32 chunk, 4 / 8 B per logit.
    LossKernel.CHUNKED: LossMemory(logits_bytes_per_entry=2.0 + (4.0 + 4.0) / 8.0,
                                   block_bytes_per_entry=4.0 / 8.0),
    # Liger Kernel's fused linear cross-entropy (Hsu et al. 2024, arXiv 2410.10989, section
    # 3.1; liger_kernel/ops/fused_linear_cross_entropy.py): the logits are never
    # materialised; each chunk of next_power_of_2(BT / ceil(V / H)) tokens computes its
    # logits (at most 2 x BT x H entries, bf16, 2 B, the gradient written in place) and the
    # input gradient of all BT x H (bf16, 2 B) is built during the forward: 4 + 2 B per token
    # and hidden unit, the chunk's 4 the largest block. Cut Cross-Entropy (Wijmans et al.
    # 2024, arXiv 2411.09009) keeps less; this bounds both.
    LossKernel.FUSED: LossMemory(logits_bytes_per_entry=0.0, block_bytes_per_entry=0.0,
                                 working_bytes_per_hidden=2.0 * 2.0 + 2.0,
                                 block_bytes_per_hidden=2.0 * 2.0),
})
"""Loss kernels by name (``TrainingSpec.loss_kernel``); not given, the stack's own logits
figures (``StackMemory.logits_bytes_per_entry``, the ones the pre-training fit used)."""


NF4_BYTES_PER_PARAM = 0.5
"""4-bit NormalFloat storage (Dettmers et al. 2023, QLoRA, arXiv 2305.14314, section 3)."""
NF4_DOUBLE_QUANT_BITS_PER_PARAM = 0.127
"""QLoRA's quantisation constants with double quantisation: 8-bit constants per block of 64
weights plus fp32 second-level constants per 256 blocks, 8/64 + 32/(64*256) = 0.127 bits per
parameter, down from 0.5 (QLoRA, section 3, "Double Quantization")."""
NF4_SINGLE_QUANT_BITS_PER_PARAM = 32.0 / 64.0
"""Without double quantisation one fp32 absmax per block of 64 weights: 32/64 = 0.5 bits per
parameter (QLoRA, section 3, "Double Quantization": "with a blocksize of 64 ... 32/64 = 0.5
bits per parameter on average"; bitsandbytes ``quantize_4bit(compress_statistics=False)``)."""
BASE_BYTES_PER_PARAM: Mapping[BasePrecision, float] = MappingProxyType({
    BasePrecision.BF16: 2.0,
    BasePrecision.FP8: 1.0,
    BasePrecision.NF4: NF4_BYTES_PER_PARAM + NF4_DOUBLE_QUANT_BITS_PER_PARAM / 8.0,
})
"""Bytes per frozen base weight of the transformer layers. The embedding and the output head
stay bf16 (``FROZEN_EMBEDDING_BYTES_PER_PARAM``)."""
FROZEN_EMBEDDING_BYTES_PER_PARAM = 2.0
"""bitsandbytes quantises ``nn.Linear`` layers only, and PEFT's QLoRA recipes skip the output
head (transformers ``BitsAndBytesConfig``: ``llm_int8_skip_modules`` keeps ``lm_head``), so
the embedding and the head stay bf16 on every base precision; LitGPT's head is the exception
(``LoraSpec.quantize_head``). The embedding is never quantised (Lightning's
``BitsandbytesPrecision``: "TODO: this could also support replacing `Embedding`")."""
ADAPTER_ACTIVATION_BYTES = 2.0
"""LoRA saves the bf16 rank-r output of A (x A) per adapted matrix per token for B's weight
gradient; its input x is the frozen layer's input, stored already."""
DEQUANT_NOTE = ("the frozen base is dequantised to bf16 one weight matrix at a time for each "
                "matmul (bitsandbytes, torchao): one bf16 copy of the largest matrix is "
                "counted in other")
PAGED_OPTIMIZER_NOTE = ("QLoRA's paged optimizer (NVIDIA unified memory) pages optimizer states "
                        "to the CPU only under memory pressure (Dettmers et al. 2023, section 3); "
                        "no saving is counted for it")


def frozen_base_bytes_per_param(training: TrainingSpec) -> float:
    """Bytes per frozen transformer-layer weight at the training's base precision (an nf4
    base without double quantisation: ``NF4_SINGLE_QUANT_BITS_PER_PARAM``)."""
    if training.base_precision == BasePrecision.NF4 and not training.lora_spec.double_quant:
        return NF4_BYTES_PER_PARAM + NF4_SINGLE_QUANT_BITS_PER_PARAM / 8.0
    return BASE_BYTES_PER_PARAM[training.base_precision]


def quantized_head(training: TrainingSpec) -> bool:
    """Whether an untied output head is stored at the base precision (``LoraSpec.quantize_head``
    on an nf4 base) instead of bf16."""
    return (training.adapters and training.base_precision == BasePrecision.NF4
            and training.lora_spec.quantize_head)


def retained_input_bytes_per_token(model: ModelSpec, plan: PlanVars, training: TrainingSpec,
                                   xp: Num = SCALAR) -> Num:
    """Per token and layer, the bf16 inputs that a 4-bit matmul keeps for nothing
    (``LoraSpec.keeps_matmul_inputs``: bitsandbytes before 0.43.2 stores ``ctx.tensors = (A,
    B)`` in ``MatMul4Bit.forward``; its backward computes only the input gradient, from B).
    A frozen layer's matmuls keep no input otherwise: PyTorch saves a matmul's input only for
    its weight's gradient (autograd's codegen guards ``mm``'s saved ``self`` on
    ``should_compute_output`` of ``mat2``), which is why the frozen-layer count validates on
    bf16 LoRA rows without them. The layer's distinct matmul inputs: the attention and MLP
    norm outputs (2h each, outside the tensor-parallel region), the attention output that the
    output projection reads (a contiguous copy of the kernel's output: LitGPT's and
    transformers' ``transpose(1, 2)`` then reshape) and the MLP's down-projection input (f);
    the QKV and gate/up matmuls share their input."""
    if not (training.adapters and training.base_precision == BasePrecision.NF4
            and training.lora_spec.keeps_matmul_inputs):
        return 0.0
    norms = 2 * ACTIVATION_BYTES * model.hidden_size
    norms = xp.where(plan.sequence_parallel, norms / plan.tp, norms)
    inside = ACTIVATION_BYTES * (model.num_heads * model.value_head_dim
                                 + model.ffn_hidden_size) / plan.tp
    return norms + inside


def adapter_activation_bytes_per_token(model: ModelSpec, training: TrainingSpec) -> float:
    """Stored LoRA intermediates per token and layer: 2 x r per adapted matrix."""
    if not training.adapters:
        return 0.0
    lora = training.lora_spec
    shapes = lora_matrix_shapes(model)
    matrices = sum(1 for name in lora.target_modules if name in shapes)
    return ADAPTER_ACTIVATION_BYTES * lora.rank * matrices


@dataclass(frozen=True, slots=True)
class StackMemory:
    """A training stack's memory conventions."""

    separate_master: bool
    """16-bit working weights beside fp32 master weights in the optimizer state (Megatron,
    DeepSpeed); otherwise the stored parameters are the master copy (FSDP, XLA)."""
    gradient_bytes_per_param: float
    """The gradient buffer when the caller does not say (``TrainingSpec.gradient_precision``)."""
    logits_bytes_per_entry: float
    caching_allocator: bool
    """PyTorch's caching allocator fragments (``Calibration.memory_fragmentation_fraction``)
    and CUDA holds its context, NCCL buffers and cuBLAS workspaces
    (``Calibration.memory_overhead_bytes``). XLA assigns buffers when it compiles the step,
    so a JAX stack has no runtime fragmentation (openxla.org/xla/architecture, buffer
    assignment), and its runtime reserve is ``XLA_RUNTIME_BYTES``."""
    logits_block_bytes_per_entry: float = FP32_LOGITS_BYTES_PER_ENTRY
    """The largest single block of the loss, per logit: the fp32 copy that PyTorch's and
    Megatron's cross-entropy make of the whole logits (4); 2 where the trainer's loss is fused
    or compiled and works on the bf16 logits in chunks (``ALLOCATOR_HEADROOM_NOTE``)."""
    gradients_freed: bool = False
    """The trainer frees the gradients after each optimizer step (PyTorch's
    ``optimizer.zero_grad(set_to_none=True)``, the default since PyTorch 2.0, with FSDP's
    sharded gradients) instead of keeping a persistent gradient buffer (Megatron's
    ``main_grad``, DeepSpeed's contiguous gradient partitions). With one micro-batch per step
    the gradients are then allocated during the only backward, while the activations are
    freed, and the two never peak together (``GRADIENTS_FREED_NOTE``)."""


MEGATRON_MEMORY = StackMemory(
    separate_master=True, gradient_bytes_per_param=GRAD_BYTES_PER_PARAM,
    logits_bytes_per_entry=LOGITS_BYTES_PER_ENTRY, caching_allocator=True,
)
"""Megatron-LM with bf16: working weights 2 B, fp32 ``main_grad`` 4 B (``arguments.py`` turns
on ``accumulate_allreduce_grads_in_fp32`` for bf16; NeMo's performance recipes turn it off,
which a caller states with ``gradient_precision: bf16``), fp32 master weights and Adam moments
12 B sharded by the distributed optimizer (Megatron-LM docs, distributed optimizer: 6 + 12/d
bytes per parameter for bf16 parameters with fp32 gradients)."""
FSDP_MEMORY = StackMemory(
    separate_master=False, gradient_bytes_per_param=4.0,
    logits_bytes_per_entry=LOGITS_BYTES_PER_ENTRY, caching_allocator=True,
    gradients_freed=True, logits_block_bytes_per_entry=ACTIVATION_BYTES,
)
"""PyTorch FSDP with mixed precision (Zhao et al. 2023, arXiv 2304.11277, section 4.4; FSDP2
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``): the sharded parameters stay
fp32 and are the optimizer's master copy (4 B), sharded fp32 gradients (4 B), Adam m and v
(8 B); bf16 copies exist only inside the all-gather buffers. These trainers fuse or compile
the loss (llm-foundry's flash-attn cross-entropy, OLMo-core's compiled loss), so its largest
block is the bf16 logits (2 B per logit), not an fp32 copy."""
EDGE_FRACTION = 0.97
"""Above this share of the capacity a "fits" carries a warning: measured on this project's lent
GPUs (benchmarks/device), layouts predicted between 99.8% and 101.7% of the capacity both ran
and failed with out-of-memory, so the model cannot promise either way within a few percent
(decision 143). The memory fit keeps every measured failure above it (``calibrate.OOM_MARGIN``)
and every layout that ran at most at 99% of its capacity (``calibrate.RAN_MARGIN``)."""
ALLOCATOR_HEADROOM_NOTE = (
    "PyTorch's caching allocator needs a contiguous free block for each allocation, and the "
    "free memory it holds can be split into smaller pieces, so what must fit includes one "
    "more of the step's largest block (the fp32 logits, or one MLP intermediate)")
"""Measured at the edge on this project's lent GPUs (benchmarks/device, 2026-11-26): on an H100
(79.18 GiB usable) a 1.5B model at 8 x 4096 tokens with full recompute, whose allocated peak
is 66.9 GiB, failed to allocate one 15.66 GiB block (its fp32 logits) with 14.77 GiB reserved
but unallocated, and a 3.6B model at 77.7 GiB allocated failed on a 3.91 GiB block (the same);
an 8B model at 123.6 GiB allocated with 7.8 GiB logits blocks ran on an H200 (139.8 GiB)."""
TORCH_CROSS_ENTROPY_BYTES_PER_ENTRY = 10.0
"""Peak bytes per logit when the loss is PyTorch's ``F.cross_entropy`` on an fp32 upcast of
bf16 logits, as torchtitan computes it (``torchtitan/components/loss.py``: ``cross_entropy(
pred.flatten(0, 1).float(), labels)``): the bf16 logits the caller still holds (2), their fp32
copy (4) and the fp32 ``log_softmax`` output saved for backward (4). Measured on this project's
H200 (benchmarks/device, rows ``device-h200-*``): full-recompute runs, where the logits
dominate what is not model state, held 9 to 11 bytes per logit beyond the states and the
stored layer inputs."""
TORCHTITAN_MEMORY = StackMemory(
    separate_master=False, gradient_bytes_per_param=4.0,
    logits_bytes_per_entry=TORCH_CROSS_ENTROPY_BYTES_PER_ENTRY, caching_allocator=True,
    gradients_freed=True,
)
"""torchtitan: FSDP2's state layout (``FSDP_MEMORY``) with PyTorch's unfused cross-entropy on
fp32 logits (``TORCH_CROSS_ENTROPY_BYTES_PER_ENTRY``)."""
DEEPSPEED_MEMORY = StackMemory(
    separate_master=True, gradient_bytes_per_param=2.0,
    logits_bytes_per_entry=LOGITS_BYTES_PER_ENTRY, caching_allocator=True,
)
"""DeepSpeed ZeRO: 16-bit weights and gradients (2 + 2 B) and K = 12 B of fp32 optimizer state,
the 2Psi + 2Psi + K*Psi of Rajbhandari et al. 2020 (arXiv 1910.02054), section 3.1."""
XLA_MEMORY = StackMemory(
    separate_master=False, gradient_bytes_per_param=4.0, logits_bytes_per_entry=4.0,
    caching_allocator=False,
)
"""MaxText (JAX/XLA): fp32 weights (``weight_dtype: float32`` in configs/base.yml) that are the
optimizer's master copy, gradients in the weights' dtype, optax AdamW m and v in it too. The
logits are a bf16 tensor and its bf16 gradient (4 B): XLA fuses the fp32 upcast and softmax
of the cross-entropy into the reductions that consume them."""
STACK_MEMORY: Mapping[Framework, StackMemory] = MappingProxyType({
    Framework.MEGATRON: MEGATRON_MEMORY,
    Framework.TORCHTITAN: TORCHTITAN_MEMORY,
    Framework.FSDP: FSDP_MEMORY,
    Framework.DEEPSPEED: DEEPSPEED_MEMORY,
    Framework.MAXTEXT: XLA_MEMORY,
    Framework.UNKNOWN: MEGATRON_MEMORY,
})
"""``unknown`` takes Megatron's conventions, the largest model state (18 B per parameter with
Adam) and logits, so an unstated stack is not promised memory that a known one would need."""


@dataclass(frozen=True, slots=True)
class StateLayout:
    """Bytes per parameter on the device before sharding, and per logit."""

    weight_bytes_per_param: float
    gather_bytes_per_param: float
    grad_bytes_per_param: float
    optimizer_bytes_per_param: float
    logits_bytes_per_entry: float
    caching_allocator: bool
    gradients_freed: bool
    logits_block_bytes_per_entry: float
    loss_working_bytes_per_hidden: float = 0.0
    """A fused loss kernel's working set per token and hidden unit (``LOSS_KERNELS``)."""
    loss_block_bytes_per_hidden: float = 0.0


def state_layout(training: TrainingSpec) -> StateLayout:
    """The stack's conventions with the caller's precisions and optimizer applied."""
    stack = STACK_MEMORY[training.framework]
    fp32_master = training.master_weights == StatePrecision.FP32
    working_weights = 1.0 if training.fp8_params else WEIGHT_BYTES_PER_PARAM
    if stack.separate_master:
        weights = working_weights
        master = 4.0 if fp32_master else 0.0
    else:
        weights = 4.0 if fp32_master else WEIGHT_BYTES_PER_PARAM
        master = 0.0
    if training.optimizer == Optimizer.ADAMW:
        moments = 2.0 * (4.0 if fp32_master else 2.0)
    elif training.optimizer == Optimizer.ADAMW_8BIT:
        moments = ADAMW_8BIT_MOMENT_BYTES_PER_PARAM
    else:
        moments = 0.0
    if training.gradient_precision is not None:
        grads = 4.0 if training.gradient_precision == StatePrecision.FP32 else 2.0
    elif stack.separate_master:
        grads = stack.gradient_bytes_per_param
    else:
        grads = weights
    logits, block = stack.logits_bytes_per_entry, stack.logits_block_bytes_per_entry
    working = block_hidden = 0.0
    if training.loss_kernel is not None:
        loss = LOSS_KERNELS[training.loss_kernel]
        logits, block = loss.logits_bytes_per_entry, loss.block_bytes_per_entry
        working, block_hidden = loss.working_bytes_per_hidden, loss.block_bytes_per_hidden
    return StateLayout(
        weight_bytes_per_param=weights,
        gather_bytes_per_param=working_weights,
        grad_bytes_per_param=grads,
        optimizer_bytes_per_param=master + moments,
        logits_bytes_per_entry=logits,
        caching_allocator=stack.caching_allocator,
        gradients_freed=stack.gradients_freed,
        logits_block_bytes_per_entry=block,
        loss_working_bytes_per_hidden=working,
        loss_block_bytes_per_hidden=block_hidden,
    )


GRADIENTS_FREED_NOTE = (
    "gradients and activations at the peak: this stack frees its gradients after each "
    "optimizer step (zero_grad(set_to_none=True)), so with one micro-batch per step and no "
    "pipeline the gradients are allocated during the backward as the activations are freed; "
    "the peak is the larger of the backward's start (every activation, no gradient) and its "
    "end (every gradient, one layer's working set), and the breakdown is that moment's"
)
"""Measured on this project's H200 (benchmarks/device): an 8B model's peak allocated memory was
132.7 GB at 1, 2 and 4 sequences per step (the end of the backward), and a second micro-batch
added exactly the gradients (1.5B model: +5.96 GB = 4 B x 1.5B parameters)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBreakdown:
    """Peak bytes on the most loaded GPU, by kind, at the moment of the peak (on stacks that
    free their gradients, the larger of the backward's start and end: ``GRADIENTS_FREED_NOTE``)."""

    weights_bytes: Num
    gradients_bytes: Num
    optimizer_bytes: Num
    activations_bytes: Num
    other_bytes: Num
    capacity_bytes: float
    reserved_bytes: Num = 0.0
    """What the allocator would reserve (``Calibration.allocator_reserve_fraction``): the
    figure tools print as peak reserved memory; ``fits`` compares ``peak_bytes``."""
    allocated_bytes: Num = 0.0
    """The tensors alone at the peak, as PyTorch's ``max_memory_allocated`` (and its
    ``active_bytes`` peak) reports it: the peak without the CUDA context, NCCL and workspace
    bytes (``Calibration.memory_overhead_bytes``), the fragmentation share and the
    largest-block headroom, which the allocator holds outside its allocated tensors; on XLA
    the peak without ``XLA_RUNTIME_BYTES``."""

    @property
    def peak_bytes(self) -> Num:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.other_bytes
        )

    @property
    def fits(self) -> Num:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def at_edge(self) -> Num:
        """Fits, but within ``1 - EDGE_FRACTION`` of the capacity."""
        return (self.peak_bytes > EDGE_FRACTION * self.capacity_bytes) & (
            self.peak_bytes <= self.capacity_bytes)


def mlp_activation_bytes(ffn: float, kind: MlpKind) -> float:
    """Stored MLP tensors per token inside the TP region: 4f (two-matrix) or 6f (SwiGLU)."""
    return (6.0 if kind == MlpKind.SWIGLU else 4.0) * ffn


def layer_activation_bytes_per_token(
    model: ModelSpec,
    plan: PlanVars,
    *,
    moe_layer: bool,
    unfused_attention_seq_len: int = 0,
    xp: Num = SCALAR,
) -> Num:
    """Bytes stored per token for one layer without recomputation (see module docstring)."""
    h, t = model.hidden_size, plan.tp
    a, g = model.num_heads, model.num_kv_heads
    d_qk, d_v = model.attention_head_dim, model.value_head_dim
    kv_heads = a if model.mla is not None else g
    outside = 4 * ACTIVATION_BYTES * h
    outside = xp.where(plan.sequence_parallel, outside / t, outside)
    attention = (
        ACTIVATION_BYTES * (a * d_qk + kv_heads * (d_qk + d_v) + a * d_v)
        + 4.0 * a
        + UNFUSED_ATTENTION_BYTES * a * unfused_attention_seq_len
    ) / t
    if not moe_layer:
        return outside + attention + mlp_activation_bytes(model.ffn_hidden_size, model.mlp) / t
    k = model.experts_per_token
    sp_divisor = xp.where(plan.sequence_parallel, t, 1)
    # Expert TP = TP: the group's tokens are gathered and each rank holds every routed copy's
    # input with 1/etp of its MLP tensors. Expert TP below TP (folding) with sequence
    # parallelism: each rank routes only its 1/t of the tokens and holds them whole, so the
    # share is etp/t (Megatron-Core MoE parallel folding, Liu et al. 2025, arXiv 2504.14960).
    expert = plan.moe_capacity_factor * k * (
        ACTIVATION_BYTES * h
        + mlp_activation_bytes(model.expert_ffn_hidden_size, model.mlp) / plan.expert_tp
    ) * xp.minimum(1.0, plan.expert_tp / sp_divisor)
    shared = model.num_shared_experts * mlp_activation_bytes(
        model.expert_ffn_hidden_size, model.mlp
    ) / t
    router = 4.0 * model.num_experts / sp_divisor
    return outside + attention + expert + shared + router


def stage_activation_bytes(
    model: ModelSpec, plan: PlanVars, training: TrainingSpec, geometry: Geometry,
    xp: Num = SCALAR,
) -> tuple[Num, Num]:
    """Activation bytes of one micro-batch for the whole stage, and of its largest layer."""
    unfused = 0 if training.flash_attention else training.seq_len
    dense = layer_activation_bytes_per_token(
        model, plan, moe_layer=False, unfused_attention_seq_len=unfused, xp=xp,
    )
    if training.adapters:
        dense = (dense + adapter_activation_bytes_per_token(model, training)
                 + retained_input_bytes_per_token(model, plan, training, xp))
    moe = (
        layer_activation_bytes_per_token(
            model, plan, moe_layer=True, unfused_attention_seq_len=unfused, xp=xp,
        )
        if model.is_moe
        else 0.0
    )
    tokens = geometry.tokens_per_micro_batch
    per_micro_batch = tokens * (
        geometry.dense_layers_per_stage * dense + geometry.moe_layers_per_stage * moe
    )
    return per_micro_batch, tokens * xp.maximum(dense, moe)


def in_flight_micro_batches(plan: PlanVars, xp: Num = SCALAR) -> Num:
    """Micro-batches whose activations the first stage holds at once under (interleaved) 1F1B."""
    in_flight = 1.0 * xp.minimum(plan.pp, plan.num_micro_batches)
    in_flight = xp.where(
        plan.vp > 1, in_flight * (1.0 + (plan.pp - 1) / (plan.pp * plan.vp)), in_flight
    )
    return xp.where(plan.pp == 1, 1.0, in_flight)


def memory_breakdown(
    model: ModelSpec,
    plan: PlanVars,
    training: TrainingSpec,
    geometry: Geometry,
    calibration: Calibration,
    capacity_bytes: float,
    xp: Num = SCALAR,
    stage_activations: tuple[Num, Num] | None = None,
) -> MemoryBreakdown:
    """Peak memory of the most loaded GPU: the larger of the first and the last stage.

    ``stage_activations`` is ``stage_activation_bytes(...)`` when the caller has it already."""
    per_micro_batch, largest_layer = stage_activations or stage_activation_bytes(
        model, plan, training, geometry, xp
    )
    tokens = geometry.tokens_per_micro_batch
    boundary = ACTIVATION_BYTES * model.hidden_size * tokens
    boundary = xp.where(plan.sequence_parallel, boundary / plan.tp, boundary)
    selective = per_micro_batch * calibration.selective_activation_fraction
    stored = xp.where(
        plan.full_recompute, boundary * geometry.layers_per_stage,
        xp.where(plan.selective_recompute, selective, per_micro_batch),
    )
    working = xp.where(plan.full_recompute, largest_layer, 0.0)
    in_flight = in_flight_micro_batches(plan, xp)
    layers = xp.maximum(1, geometry.layers_per_stage)
    # Offload flags are one Python bool for every candidate (not searched): branch, so that
    # the search does not pay for arrays it would throw away.
    if plan.offload_activations:
        first_stored = last_stored = stored * xp.minimum(1.0, OFFLOAD_LAYERS_IN_TRANSIT / layers)
    else:
        first_stored, last_stored = stored * in_flight, stored
    layout = state_layout(training)
    logits = (layout.logits_bytes_per_entry * tokens * model.vocab_size
              + layout.loss_working_bytes_per_hidden * tokens * model.hidden_size) / plan.tp

    single_stage = plan.pp == 1
    first_params = geometry.layer_params_per_gpu + geometry.embedding_params_per_gpu
    last_params = geometry.layer_params_per_gpu + geometry.head_params_per_gpu
    first_params = xp.where(single_stage, first_params + geometry.head_params_per_gpu,
                            first_params)
    last_params = xp.where(single_stage, first_params, last_params)

    if training.adapters:
        first_head = xp.where(single_stage, geometry.head_params_per_gpu, 0.0)
        first_states = _adapter_state_bytes(model, first_params, first_head, plan, geometry,
                                            training, layout, xp)
        last_states = _adapter_state_bytes(model, last_params, geometry.head_params_per_gpu,
                                           plan, geometry, training, layout, xp)
    else:
        first_states = _model_state_bytes(first_params, geometry.expert_params_per_gpu, plan,
                                          geometry, layout, xp)
        last_states = _model_state_bytes(last_params, geometry.expert_params_per_gpu, plan,
                                         geometry, layout, xp)
    first_transient = xp.maximum(working, xp.where(single_stage, logits, 0.0))
    first = (*first_states, first_stored + first_transient)
    last = (*last_states, last_stored + xp.maximum(working, logits))
    # The more loaded stage; the first wins ties (as Python's max does).
    first_is_peak = sum(first) >= sum(last)
    weights, grads, optimizer, activations = (
        xp.where(first_is_peak, f, la) for f, la in zip(first, last, strict=True)
    )
    if layout.gradients_freed:
        # One backward per step on one stage: it starts with every activation and no
        # gradient, and ends with every gradient and one layer's recompute working set. The
        # breakdown is the larger moment's (GRADIENTS_FREED_NOTE).
        once = (plan.num_micro_batches == 1) & single_stage
        at_end = grads + working >= activations
        grads, activations = (xp.where(once, xp.where(at_end, grads, 0.0), grads),
                              xp.where(once, xp.where(at_end, working, activations),
                                       activations))

    per_layer = (geometry.layer_params_per_gpu + geometry.expert_params_per_gpu) / layers
    largest_matrix = model.hidden_size * max(
        model.ffn_hidden_size, model.expert_ffn_hidden_size if model.is_moe else 0,
        model.num_heads * model.attention_head_dim,
    ) / plan.tp
    unit = xp.where(plan.gather_matrices, xp.minimum(per_layer, largest_matrix), per_layer)
    live = 2.0 * unit  # the computing unit and the prefetched next one
    if training.framework == Framework.DEEPSPEED:
        # ZeRO-3 releases parameters beyond stage3_max_live_parameters, but never the module
        # that is computing.
        live = xp.maximum(unit, xp.minimum(live, DEEPSPEED_MAX_LIVE_PARAMS))
    gather_buffers = xp.where(
        (plan.zero_stage == 3) & single_stage, layout.gather_bytes_per_param * live, 0.0,
    )
    if training.adapters:
        # ZeRO-3 (FSDP) shards the frozen base too, at its stored precision, and gathers the
        # computing unit and the next one as for trainable weights (torchtune's distributed
        # LoRA/QLoRA recipes wrap the base in FSDP; QLoRA-FSDP, Answer.AI 2024, shards the
        # quantised weights). A quantised base is dequantised one matrix at a time.
        gather_buffers = xp.where((plan.zero_stage == 3) & single_stage,
                                  frozen_base_bytes_per_param(training) * live, 0.0)
        if dequantises(training):
            # A quantised head is the largest matrix dequantised (its forward and input
            # gradient, beside the logits): bitsandbytes MatMul4Bit dequantises the whole
            # weight, ``F.dequantize_4bit(B, quant_state).to(A.dtype)``.
            dequantised = largest_matrix
            if quantized_head(training):
                dequantised = xp.maximum(largest_matrix,
                                         geometry.head_params_per_gpu * 1.0)
            copies = 2.0 if training.lora_spec.dequant_cast else 1.0
            gather_buffers = gather_buffers + copies * ACTIVATION_BYTES * dequantised
    if layout.caching_allocator:
        # The largest block the step allocates at once: the fp32 logits on the stage that
        # holds the head, else one MLP intermediate (ALLOCATOR_HEADROOM_NOTE).
        logits_block = (layout.logits_block_bytes_per_entry * tokens * model.vocab_size
                        + layout.loss_block_bytes_per_hidden * tokens * model.hidden_size
                        ) / plan.tp
        logits_block = xp.where(single_stage, logits_block,
                                xp.where(first_is_peak, 0.0, logits_block))
        mlp_block = ACTIVATION_BYTES * tokens * model.ffn_hidden_size / plan.tp
        headroom = xp.maximum(mlp_block, logits_block)
        other = (calibration.memory_overhead_bytes
                 + calibration.memory_fragmentation_fraction * activations
                 + gather_buffers + headroom)
        reserve = calibration.allocator_reserve_fraction
        outside_tensors = (calibration.memory_overhead_bytes
                           + calibration.memory_fragmentation_fraction * activations + headroom)
    else:
        headroom = 0.0
        other = XLA_RUNTIME_BYTES + gather_buffers
        reserve = 0.0
        outside_tensors = XLA_RUNTIME_BYTES
    peak = weights + grads + optimizer + activations + other
    return MemoryBreakdown(
        weights_bytes=weights,
        gradients_bytes=grads,
        optimizer_bytes=optimizer,
        activations_bytes=activations,
        other_bytes=other,
        capacity_bytes=capacity_bytes,
        reserved_bytes=(peak - headroom) * (1.0 + reserve),
        allocated_bytes=peak - outside_tensors,
    )


def _model_state_bytes(
    params: Num, expert_params: Num, plan: PlanVars, geometry: Geometry, layout: StateLayout,
    xp: Num,
) -> tuple[Num, Num, Num]:
    """Weights, gradients and optimizer bytes on the device after ZeRO sharding and offload."""

    # FSDP with pipelining keeps the stage's weights and gradients unsharded across
    # micro-batches instead of re-gathering them each time (torchtitan, reshard_after_forward
    # off under PP; its PP schedule syncs gradients after the last micro-batch).
    held_unsharded = (plan.zero_stage == 3) & (plan.pp > 1)

    def sharded(count: Num, group: Num, stage_needed: int) -> Num:
        divided = xp.where(plan.zero_stage >= stage_needed, count / group, count)
        if stage_needed in (2, 3):
            return xp.where(held_unsharded, count, divided)
        return divided

    groups = ((params, geometry.shard_group_size),
              (expert_params, geometry.expert_shard_group_size))
    weights = sum(layout.weight_bytes_per_param * sharded(n, g, 3) for n, g in groups)
    # Held unsharded under PP, the weights are the 16-bit working copy; a stack whose fp32
    # parameters are the master copy (FSDP, XLA) keeps those sharded beside it.
    if layout.weight_bytes_per_param > layout.gather_bytes_per_param:
        held = sum(layout.gather_bytes_per_param * n + layout.weight_bytes_per_param * n / g
                   for n, g in groups)
        weights = xp.where(held_unsharded, held, weights)
    grads = sum(layout.grad_bytes_per_param * sharded(n, g, 2) for n, g in groups)
    optimizer = sum(layout.optimizer_bytes_per_param * sharded(n, g, 1) for n, g in groups)
    # ZeRO-Offload moves the optimizer state and the reduced gradient shards to the host (the
    # full-size gradients of ZeRO-0/1 are reduced on the device first); ZeRO-Infinity and FSDP
    # CPU offload also the weight shards (gathered into the buffers counted separately).
    if plan.offload_optimizer:
        optimizer = 0.0 * optimizer
        grads = xp.where(plan.zero_stage >= 2, 0.0, grads)
    if plan.offload_weights:
        weights = 0.0 * weights
    return weights, grads, optimizer


def dequantises(training: TrainingSpec) -> bool:
    """Whether each frozen matmul first dequantises its weights to bf16: an nf4 base, or an
    fp8 base under bf16 matmuls (``DEQUANT_NOTE``)."""
    if not training.adapters:
        return False
    base = training.base_precision
    return base == BasePrecision.NF4 or (base == BasePrecision.FP8
                                         and training.precision != Precision.FP8)


def adapter_params_per_gpu(model: ModelSpec, training: TrainingSpec, geometry: Geometry,
                           tp: Num) -> Num:
    """LoRA parameters of the stage's layers on one GPU (divided by tp, as their layers)."""
    return (geometry.layers_per_stage * adapter_params_per_layer(model, training.lora_spec)
            / tp)


def _adapter_state_bytes(
    model: ModelSpec, params: Num, head_params: Num, plan: PlanVars, geometry: Geometry,
    training: TrainingSpec, layout: StateLayout, xp: Num,
) -> tuple[Num, Num, Num]:
    """Weights, gradients and optimizer bytes with a frozen base (lora, qlora): the base's
    layers at the base precision and its embedding and head in bf16, neither with gradients
    or optimizer state, sharded over the shard group under ZeRO-3 (FSDP shards every
    parameter, frozen or not; held whole under pipeline stages, as trainable weights are);
    the adapters with the stack's full per-parameter state (``state_layout``), sharded by
    ZeRO like any trainable parameters. ``head_params`` is the untied head's share of
    ``params``, at the base precision where the head is quantised (``quantized_head``)."""
    layer_params = geometry.layer_params_per_gpu
    embedding_params = params - layer_params
    base = (frozen_base_bytes_per_param(training) * layer_params
            + FROZEN_EMBEDDING_BYTES_PER_PARAM * embedding_params)
    if quantized_head(training):
        base = base - (FROZEN_EMBEDDING_BYTES_PER_PARAM
                       - frozen_base_bytes_per_param(training)) * head_params
    base = xp.where((plan.zero_stage == 3) & (plan.pp == 1),
                    base / geometry.shard_group_size, base)
    if plan.offload_weights:
        base = 0.0 * base
    adapters = adapter_params_per_gpu(model, training, geometry, plan.tp)
    weights, grads, optimizer = _model_state_bytes(adapters, 0.0, plan, geometry, layout, xp)
    return base + weights, grads, optimizer
