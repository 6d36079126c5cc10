"""Frozen inputs of the core: model architecture, accelerator, cluster, parallel plan, training.

Each class validates itself in ``__post_init__`` and raises ``InvalidSpecError`` naming the
field and the limit. Cross-object rules (heads divisible by tp, tp*pp*dp*cp equal to the GPU
count, ...) live in ``validate_plan``, because they need more than one object.

Notation follows ``docs/model.md`` (Narayanan et al. 2021; Korthikanti et al. 2022): L layers,
h hidden size, a heads, g KV heads, f FFN width, V vocabulary, s sequence length, b
micro-batch, B global batch, t/p/d/c/e tensor/pipeline/data/context/expert parallel sizes, v
virtual pipeline stages per GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from service.core.errors import InvalidSpecError

if TYPE_CHECKING:
    from service.core.serving import Engine


class MlpKind(StrEnum):
    """Feed-forward block type. Gated SwiGLU has three matrices; the others two."""

    GELU = "gelu"
    SWIGLU = "swiglu"
    SQUARED_RELU = "squared_relu"


class Precision(StrEnum):
    """Matmul precision. ``fp8`` runs the linear layers in FP8 (Transformer Engine style)."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class StatePrecision(StrEnum):
    """Precision of stored model state: master weights or gradients."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


class Optimizer(StrEnum):
    """The optimizer, for its state bytes per parameter."""

    ADAMW = "adamw"
    """Two moments per parameter (Loshchilov and Hutter 2019)."""
    SGD = "sgd"
    """Plain SGD without momentum: no state (MaxText ``opt_type: sgd``)."""
    ADAMW_8BIT = "adamw_8bit"
    """AdamW with both moments block-wise quantised to 8 bits (bitsandbytes ``AdamW8bit``,
    ``PagedAdamW8bit``; Dettmers et al. 2022, "8-bit Optimizers via Block-wise
    Quantization", arXiv 2110.02861): 2 bytes of moments per parameter instead of 8
    (``memory.ADAMW_8BIT_MOMENT_BYTES_PER_PARAM``); master weights as ``master_weights``."""


class LossKernel(StrEnum):
    """How the cross-entropy loss holds the logits of a micro-batch (issue 43;
    ``memory.LOSS_KERNELS``)."""

    STANDARD = "standard"
    """The whole micro-batch's logits upcast to fp32 and saved with their log-softmax for the
    backward (PyTorch ``F.cross_entropy(logits.float(), labels)``, as Hugging Face
    transformers' ``ForCausalLMLoss`` and torchtitan compute it)."""
    CHUNKED = "chunked"
    """The logits are upcast and reduced one chunk of tokens at a time (torchtune
    ``CEWithChunkedOutputLoss``, 8 chunks): only a chunk's fp32 copy is live."""
    FUSED = "fused"
    """The output projection and the loss are fused and run in chunks, so the full logits are
    never materialised (Liger Kernel ``LigerFusedLinearCrossEntropyLoss``, Hsu et al. 2024,
    arXiv 2410.10989; Apple's Cut Cross-Entropy, Wijmans et al. 2024, arXiv 2411.09009)."""


MAX_NUM_GPUS = 1_000_000
"""The largest GPU count a cluster may have (the API's ``Count`` allows the same)."""
DEFAULT_VOCAB_SIZE = 128_256
"""The vocabulary assumed when a caller gives none: Llama 3's tokenizer (Meta, Llama 3 model
card and tokenizer.json: 128,000 BPE tokens + 256 special), the largest common open vocabulary,
so the logits' compute and memory are not understated."""


class Framework(StrEnum):
    """The training software stack. It sets the fitted stack efficiency and ZeRO-3 exposure
    (``Calibration.stack_efficiency``, ``stack_dp_exposed_fraction``) and selects the
    uncertainty band (docs/validation.md); ``unknown`` takes the geometric mean of the
    stacks' efficiency and the band of every stack."""

    MEGATRON = "megatron"
    """Megatron-LM, NeMo, Megatron-Bridge (Megatron-Core)."""
    TORCHTITAN = "torchtitan"
    FSDP = "fsdp"
    """PyTorch FSDP trainers: Composer/llm-foundry, fms-fsdp, HF accelerate, lit-gpt."""
    DEEPSPEED = "deepspeed"
    """DeepSpeed ZeRO and Megatron-DeepSpeed."""
    MAXTEXT = "maxtext"
    """JAX: MaxText and its TPU/GPU recipes."""
    UNKNOWN = "unknown"


class AttentionKernel(StrEnum):
    """The fused attention kernel a run uses, where the caller knows it; unset, the stack's
    default (``attention.STACK_KERNEL``)."""

    FA2 = "fa2"
    """FlashAttention-2 (Dao 2023, arXiv 2307.08691): PyTorch SDPA's flash backend."""
    FA3 = "fa3"
    """FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608), Hopper only."""
    CUDNN = "cudnn"
    """cuDNN fused attention: Transformer Engine's fused-attention backend, XLA on GPU, and
    PyTorch SDPA's cuDNN backend, which PyTorch 2.11 picks by default on an H200 (measured:
    benchmarks/data/device-h200-attention-2026-11-26.json)."""


class Offload(StrEnum):
    """What lives in host memory instead of on the accelerator.

    - ``optimizer``: the optimizer state (fp32 master weights, Adam m and v) and the sharded
      gradients; the optimizer step runs on the CPU (Ren et al. 2021, ZeRO-Offload, arXiv
      2101.06840, section 4.1; DeepSpeed ``offload_optimizer``).
    - ``weights``: also the sharded weights, fetched before every all-gather (Rajbhandari et al.
      2021, ZeRO-Infinity, arXiv 2104.07857; PyTorch FSDP ``CPUOffload(offload_params=True)``);
      needs ZeRO-3 and implies ``optimizer``.
    - ``activations``: the activations saved for backward, written to the host during forward
      and prefetched during backward (MaxText ``remat_policy`` host offload; Megatron-Core
      fine-grained activation offloading); the device keeps the layers in transit.
    """

    OPTIMIZER = "optimizer"
    WEIGHTS = "weights"
    ACTIVATIONS = "activations"


class ShardUnit(StrEnum):
    """How much of the weights ZeRO-3 gathers at once: the computing unit and the prefetched
    next one."""

    LAYER = "layer"
    """A transformer block (PyTorch FSDP per-block auto-wrap and backward prefetch, Zhao et
    al. 2023, arXiv 2304.11277, section 3.3)."""
    MATRIX = "matrix"
    """One weight matrix: FSDP wrapping each linear layer, DeepSpeed ZeRO-3's per-submodule
    fetch and prefetch (DeepSpeed config docs, ``stage3_prefetch_bucket_size``), and XLA's
    SPMD partitioner, which all-gathers each weight just before its matmul while the
    latency-hiding scheduler overlaps the next (Xu et al. 2021, GSPMD, arXiv 2105.04663)."""


class MoeOverlap(StrEnum):
    """How much of the expert-parallel all-to-all hides behind compute."""

    NONE = "none"
    """Dispatch and combine run between the expert GEMMs and nothing overlaps them."""
    MEGATRON = "megatron"
    """Megatron-Core's default overlap of the all-to-all with shared-expert and neighbouring
    work: ``Calibration.ep_comm_exposed_fraction`` of it stays exposed (fitted)."""
    DUALPIPE = "dualpipe"
    """Two micro-batches in flight, one's all-to-all under the other's compute (DeepSeek-V3,
    arXiv 2412.19437, section 3.2.1; Megatron-Core ``--combined-1f1b``): exposed only where it
    is longer than the compute."""


class RecomputeMode(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022, section 5)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class FabricProtocol(StrEnum):
    """The scale-out network's transport (issue 42; ``fabric`` has each one's defaults and
    sources): InfiniBand, RoCE v2 (go-back-N), AWS EFA (SRD), Google GPUDirect-TCPX, plain
    Ethernet TCP sockets, and TPU ICI."""

    INFINIBAND = "infiniband"
    ROCE = "roce"
    EFA = "efa"
    TCPX = "tcpx"
    ETHERNET_TCP = "ethernet_tcp"
    ICI = "ici"


class CompressionMethod(StrEnum):
    """Data-parallel gradient compression (issue 42; ``fabric.gradient_bytes_fraction``)."""

    NONE = "none"
    POWERSGD = "powersgd"
    BF16 = "bf16"
    FP8 = "fp8"


FABRIC_LATENCY_RANGE_S = (1e-7, 1e-2)
"""Bounds on ``FabricSpec.latency_s``: 100 ns (below any NIC-to-NIC latency) to 10 ms (a WAN)."""
FABRIC_MAX_LOSS_FRACTION = 0.1
"""Bounds on ``FabricSpec.packet_loss_fraction``: 0 to 10% (past it no transport makes progress
worth modelling)."""
FABRIC_OVERSUBSCRIPTION_RANGE = (1.0, 16.0)
FABRIC_MAX_RAILS = 16
MAX_POWERSGD_RANK = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricSpec:
    """The scale-out fabric as a planner states it (``ClusterSpec.fabric``; issue 42). None
    fields take the protocol's defaults (``fabric.PROTOCOL_DEFAULTS``)."""

    protocol: FabricProtocol = FabricProtocol.INFINIBAND
    latency_s: float | None = None
    """One-way small-message latency between two NICs across the fabric."""
    packet_loss_fraction: float = 0.0
    """Packets lost (dropped or corrupted) per packet sent, 0 to 0.1."""
    oversubscription: float = 1.0
    """Leaf downlink to spine uplink bandwidth ratio: 1 is a non-blocking fat tree."""
    rails: int | None = None
    """Leaf switches a node's NICs are spread over (rail-optimised: one per NIC); None takes
    the node's GPU count (one NIC per GPU, rail-optimised, as DGX SuperPOD)."""

    def __post_init__(self) -> None:
        low, high = FABRIC_LATENCY_RANGE_S
        if self.latency_s is not None and not (
                math.isfinite(self.latency_s) and low <= self.latency_s <= high):
            raise InvalidSpecError(
                f"cluster.fabric.latency_s ({self.latency_s}) must be in [{low:g}, {high:g}]",
                field="cluster.fabric.latency_s")
        loss = self.packet_loss_fraction
        if not (math.isfinite(loss) and 0.0 <= loss <= FABRIC_MAX_LOSS_FRACTION):
            raise InvalidSpecError(
                f"cluster.fabric.packet_loss_fraction ({loss}) must be in "
                f"[0, {FABRIC_MAX_LOSS_FRACTION:g}]", field="cluster.fabric.packet_loss_fraction")
        low, high = FABRIC_OVERSUBSCRIPTION_RANGE
        ratio = self.oversubscription
        if not (math.isfinite(ratio) and low <= ratio <= high):
            raise InvalidSpecError(
                f"cluster.fabric.oversubscription ({ratio}) must be in [{low:g}, {high:g}]",
                field="cluster.fabric.oversubscription")
        if self.rails is not None:
            _require_positive_int(self.rails, "cluster.fabric.rails", maximum=FABRIC_MAX_RAILS)


@dataclass(frozen=True, slots=True, kw_only=True)
class GradientCompression:
    """Compression of the data-parallel gradient traffic (``TrainingSpec.gradient_compression``;
    issue 42): PowerSGD of a given rank (Vogels, Karimireddy and Jaggi, NeurIPS 2019), or the
    gradients cast to bf16 or fp8 for their reduction."""

    method: CompressionMethod = CompressionMethod.NONE
    rank: int = 4
    """PowerSGD's rank r (the paper's default experiments use 1 to 4); ignored otherwise."""

    def __post_init__(self) -> None:
        _require_positive_int(self.rank, "training.gradient_compression.rank",
                              maximum=MAX_POWERSGD_RANK)


class TrainingMethod(StrEnum):
    """What the job trains (issue 43). ``pretrain`` and ``full_finetune`` train every weight
    (the same computation; a fine-tune runs on fewer tokens); ``lora`` and ``qlora`` freeze the
    base and train low-rank adapters (Hu et al. 2021, LoRA, arXiv 2106.09685; Dettmers et al.
    2023, QLoRA, arXiv 2305.14314)."""

    PRETRAIN = "pretrain"
    FULL_FINETUNE = "full_finetune"
    LORA = "lora"
    QLORA = "qlora"
    RL = "rl"


class LoraTarget(StrEnum):
    """The linear layers an adapter can wrap: attention q, k, v, o and the MLP's gate, up and
    down projections (the names PEFT's ``target_modules`` and torchtune's
    ``lora_attn_modules``/``apply_lora_to_mlp`` use for Llama-style models)."""

    Q = "q"
    K = "k"
    V = "v"
    O = "o"  # noqa: E741 - the module's name
    GATE = "gate"
    UP = "up"
    DOWN = "down"


class BasePrecision(StrEnum):
    """How the frozen base weights are held: bf16 (2 B), fp8 (1 B) or QLoRA's 4-bit NormalFloat
    with double-quantised constants (``memory.BASE_BYTES_PER_PARAM``)."""

    BF16 = "bf16"
    FP8 = "fp8"
    NF4 = "nf4"


MAX_LORA_RANK = 65_536
"""A bound on the input; the width check against the model (``validate_lora``) is the real one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraSpec:
    """Low-rank adapters on a frozen base (``TrainingSpec.lora``). Defaults: rank 16 (PEFT's
    and torchtune's recipes commonly use 8-64; QLoRA's paper r = 64 for its largest runs), all
    seven linear layers (QLoRA, section 4: adapters on every linear layer are needed to match
    full fine-tuning), and the base at bf16 for lora, nf4 for qlora (None here: the method
    decides, ``TrainingSpec.base_precision``)."""

    rank: int = 16
    target_modules: frozenset[LoraTarget] = frozenset(LoraTarget)
    base_precision: BasePrecision | None = None
    double_quant: bool = True
    """An nf4 base's quantisation constants are themselves quantised (QLoRA's double
    quantisation, Dettmers et al. 2023, section 3: 0.127 bits per parameter); False keeps one
    fp32 absmax per block of 64 (0.5 bits per parameter: bitsandbytes ``compress_statistics=
    False``, LitGPT's ``bnb.nf4`` as against ``bnb.nf4-dq``). Core only, not in the API: the
    API's nf4 is QLoRA's, double-quantised."""
    quantize_head: bool = False
    """An nf4 base also quantises the (untied) output head. PEFT/transformers keep ``lm_head``
    in bf16 (``llm_int8_skip_modules``) and torchtune's QLoRA builders leave ``output_proj`` an
    ``nn.Linear`` ("quantize_base is not applied to final output_proj currently",
    torchtune/models/llama3_1/_component_builders.py at 30b8519e8); Lightning's
    ``BitsandbytesPrecision``, which LitGPT's ``--quantize bnb.nf4`` uses, replaces every
    ``torch.nn.Linear`` built under ``init_module`` (module_init_context, Lightning 2.1-2.3),
    LitGPT's ``lm_head`` (a ``LoRALinear`` around ``torch.nn.Linear``) included. Core only."""
    keeps_matmul_inputs: bool = False
    """The 4-bit matmul keeps its input for a backward that never uses it: bitsandbytes
    before 0.43.2 (``MatMul4Bit.forward``: ``ctx.tensors = (A, B)``; fixed by commit 9e75374,
    "fix QLoRA mem bug: delete useless buffered activation", PR #1270, 2024-07-16). LitGPT's
    published QLoRA rows ran bitsandbytes 0.41.1 and 0.42.0. Core only."""
    dequant_cast: bool = False
    """The quantised weights record fp16 as their dtype while the matmuls run in bf16, so each
    dequantisation writes an fp16 copy and casts it (bitsandbytes ``quantize_4bit`` keeps
    ``dtype=A.dtype`` in the QuantState and ``dequantize_4bit`` allocates that dtype;
    ``MatMul4Bit`` then calls ``.to(A.dtype)``; Lightning's ``BitsandbytesPrecision``
    quantises ``weight.to(dtype=torch.half)``): both copies live at the cast, 4 B per weight
    of the dequantised matrix instead of 2. Core only."""

    def __post_init__(self) -> None:
        _require_positive_int(self.rank, "training.lora.rank", maximum=MAX_LORA_RANK)
        if not self.target_modules:
            raise InvalidSpecError("training.lora.target_modules must name at least one "
                                   "module", field="training.lora.target_modules")


class RlWeightSync(StrEnum):
    """How a colocated RL job moves the trained weights into its rollout engine
    (``service/core/rl.py``). ``reshard``: each GPU gathers only its engine shard and copies it
    in place, the training state staying resident when it fits (HybridFlow's 3D-HybridEngine,
    Sheng et al. 2024, arXiv 2409.19256, section 5). ``offload_full_gather``: NeMo RL's
    colocated protocol (NVIDIA-NeMo/RL ``nemo_rl/algorithms/grpo.py`` ``refit_policy_generation``
    and the Megatron and DTensor policy workers, v0.3.0 ``b1c86a8``; the same calls at v0.4.0-
    v0.6.0): every step the training weights and optimizer state go to host memory and back,
    the engine sleeps (vLLM ``sleep(level=1)``: weights backed up to the host) and wakes, the
    reference weights are swapped in from the host, and each training GPU materialises every
    full bf16 tensor of the model (gathered over its model-parallel group) for the engine."""

    RESHARD = "reshard"
    OFFLOAD_FULL_GATHER = "offload_full_gather"


class RlPlacement(StrEnum):
    """Where an RL job's rollouts run (``service/core/rl.py``): ``colocated`` on the training
    GPUs in turn with the update (verl's hybrid engine, Sheng et al. 2024, HybridFlow, arXiv
    2409.19256, section 5); ``disaggregated`` on GPUs of their own, overlapped with the update
    one step off-policy (OpenRLHF, Hu et al. 2024, arXiv 2405.11143, section 3; verl's
    one_step_off_policy recipe)."""

    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"


MAX_RL_STEPS = 10_000_000
MAX_RL_ROLLOUTS = 1_000_000
"""Bounds on the input (prompts x samples per step); the real limits are memory and time."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RlSpec:
    """A GRPO/PPO-style post-training job (issue 43): ``steps`` steps, each generating
    ``samples_per_prompt`` responses of ``response_tokens`` (mean) to ``prompts_per_step``
    prompts of ``prompt_tokens`` (a group of G samples per prompt, DeepSeekMath, Shao et al.
    2024, arXiv 2402.03300, section 4.1), scoring them with a reward model (None: a rule-based
    reward on the CPU) and the reference policy's log-probabilities for the KL term, then
    updating the policy on every generated sequence."""

    steps: int
    prompts_per_step: int
    samples_per_prompt: int
    prompt_tokens: int
    response_tokens: int | None
    reference_model: bool = True
    reward_model: ModelSpec | None = None
    placement: RlPlacement = RlPlacement.COLOCATED
    rollout_engine: Engine | None = None
    """None: vLLM, the engine verl and OpenRLHF default to."""
    max_response_tokens: int | None = None
    """The longest response of a step (the cap, where responses are truncated). A synchronous
    step waits for it (verl one_step_off docs: "model updates must wait for the longest output
    in the generation phase to complete"): the straggler decodes alone after the others end.
    None: every response has ``response_tokens`` (no tail)."""
    rollout_tp: int | None = None
    """The rollout engine's tensor-parallel size per replica, where the job fixes it (verl's
    ``rollout.tensor_model_parallel_size``, NeMo RL's ``generation.vllm_cfg.
    tensor_parallel_size``); None: the fastest power of two within a node that fits (decision
    402). Core only: not in the API contract."""

    weight_sync: RlWeightSync = RlWeightSync.RESHARD
    """The colocated weight-sync protocol (``RlWeightSync``); the default keeps every answer as
    it was. Core only: not in the API contract."""
    rollout_memory_fraction: float | None = None
    """The share of each GPU's whole memory the rollout engine may take for its weights, KV
    cache and workspace, where the job sets it: vLLM's ``gpu_memory_utilization``, "the
    fraction of GPU memory to be used for the model executor ... a per-instance limit"
    (https://docs.vllm.ai/en/stable/configuration/engine_args/#-gpu-memory-utilization; the
    engine requests total memory x the fraction), as NeMo RL passes it from
    ``policy.generation.vllm_cfg.gpu_memory_utilization`` (0.6 in examples/configs/
    grpo_math_1B.yaml, v0.3.0 to v0.6.0) and verl from ``rollout.gpu_memory_utilization``. At
    most what the resident training state leaves. None: the engine's default fraction
    (``serving.ENGINE_EFFICIENCY``) of what the training state leaves, as before. Core only:
    not in the API contract."""

    def __post_init__(self) -> None:
        _require_positive_int(self.steps, "training.rl.steps", maximum=MAX_RL_STEPS)
        fraction = self.rollout_memory_fraction
        if fraction is not None and not 0.0 < fraction <= 1.0:
            raise InvalidSpecError(
                f"training.rl.rollout_memory_fraction ({fraction}) must be in (0, 1]",
                field="training.rl.rollout_memory_fraction")
        if self.rollout_tp is not None:
            _require_positive_int(self.rollout_tp, "training.rl.rollout_tp", maximum=1024)
        _require_positive_int(self.prompts_per_step, "training.rl.prompts_per_step",
                              maximum=MAX_RL_ROLLOUTS)
        _require_positive_int(self.samples_per_prompt, "training.rl.samples_per_prompt",
                              maximum=1024)
        _require_positive_int(self.prompt_tokens, "training.rl.prompt_tokens",
                              maximum=10_000_000)
        if self.response_tokens is None:
            raise InvalidSpecError(
                "training.rl.response_tokens is required: the rollout length sets the "
                "generation time, the KV cache and the tokens the policy is trained on",
                field="training.rl.response_tokens")
        _require_positive_int(self.response_tokens, "training.rl.response_tokens",
                              maximum=10_000_000)
        longest = self.max_response_tokens
        if longest is not None:
            _require_positive_int(longest, "training.rl.max_response_tokens",
                                  maximum=10_000_000)
            if longest < self.response_tokens:
                raise InvalidSpecError(
                    f"training.rl.max_response_tokens ({longest}) must be at least "
                    f"response_tokens ({self.response_tokens}), the mean",
                    field="training.rl.max_response_tokens")
        if self.rollouts_per_step > MAX_RL_ROLLOUTS:
            raise InvalidSpecError(
                f"training.rl.prompts_per_step x samples_per_prompt ({self.rollouts_per_step:,})"
                f" must be at most {MAX_RL_ROLLOUTS:,}", field="training.rl.samples_per_prompt")

    @property
    def rollouts_per_step(self) -> int:
        """Sequences generated per step: prompts x samples per prompt."""
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def sequence_tokens(self) -> int:
        """One rollout's tokens, prompt and response (``response_tokens`` is set once valid)."""
        return self.prompt_tokens + (self.response_tokens or 0)

    @property
    def tokens_per_step(self) -> int:
        """Tokens the forward passes and the update process per step (packed)."""
        return self.rollouts_per_step * self.sequence_tokens

    @property
    def total_tokens(self) -> float:
        return float(self.steps * self.tokens_per_step)


def _require_positive_int(value: int, name: str, *, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpecError(f"{name} must be an integer", field=name)
    if value < 1:
        raise InvalidSpecError(f"{name} ({value}) must be at least 1", field=name)
    if maximum is not None and value > maximum:
        raise InvalidSpecError(f"{name} ({value}) must be at most {maximum}", field=name)


def _require_finite_positive(value: float, name: str) -> None:
    if not math.isfinite(value) or value <= 0:
        raise InvalidSpecError(f"{name} ({value}) must be a finite number above 0", field=name)


def _require_fraction(value: float, name: str, *, allow_zero: bool = True) -> None:
    low_ok = value >= 0 if allow_zero else value > 0
    if not math.isfinite(value) or not low_ok or value > 1:
        bound = "[0, 1]" if allow_zero else "(0, 1]"
        raise InvalidSpecError(f"{name} ({value}) must be in {bound}", field=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 section 2.1).

    Queries and keys/values are projected through low-rank latents; each head has a
    non-positional part (``qk_nope_head_dim``) and a rotary part (``qk_rope_head_dim``).
    """

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        for name in (
            "q_lora_rank",
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
        ):
            _require_positive_int(getattr(self, name), f"model.mla.{name}", maximum=1_000_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer, dense or mixture-of-experts.

    MoE models set ``num_experts`` > 0; the first ``num_dense_layers`` layers then use a dense
    MLP of width ``ffn_hidden_size`` and the others ``num_experts`` routed experts of width
    ``moe_ffn_hidden_size`` (top-``experts_per_token``) plus ``num_shared_experts``.
    """

    name: str = "custom"
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    mlp: MlpKind = MlpKind.SWIGLU
    tied_embeddings: bool = False
    head_dim: int | None = None
    linear_bias: bool = False
    learned_position_embeddings: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_ffn_hidden_size: int | None = None
    num_dense_layers: int = 0
    mla: MlaSpec | None = None
    vocab_size_assumed: bool = False
    """True when the caller gave no vocabulary and ``DEFAULT_VOCAB_SIZE`` stands in (the
    estimate then warns)."""

    def __post_init__(self) -> None:
        limits = {
            "num_layers": 10_000,
            "hidden_size": 1_000_000,
            "num_heads": 100_000,
            "num_kv_heads": 100_000,
            "ffn_hidden_size": 10_000_000,
            "vocab_size": 100_000_000,
        }
        for name, maximum in limits.items():
            _require_positive_int(getattr(self, name), f"model.{name}", maximum=maximum)
        if self.num_heads % self.num_kv_heads:
            raise InvalidSpecError(
                f"model.num_heads ({self.num_heads}) must be divisible by "
                f"model.num_kv_heads ({self.num_kv_heads})",
                field="model.num_kv_heads",
            )
        if self.head_dim is not None:
            _require_positive_int(self.head_dim, "model.head_dim", maximum=100_000)
        elif self.hidden_size % self.num_heads:
            raise InvalidSpecError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by model.num_heads "
                f"({self.num_heads}) unless model.head_dim is given",
                field="model.num_heads",
            )
        if self.learned_position_embeddings < 0:
            raise InvalidSpecError(
                "model.learned_position_embeddings must be 0 or more",
                field="model.learned_position_embeddings",
            )
        self._validate_moe()

    def _validate_moe(self) -> None:
        if self.num_experts < 0 or self.num_experts > 100_000:
            raise InvalidSpecError(
                f"model.num_experts ({self.num_experts}) must be in [0, 100000]",
                field="model.num_experts",
            )
        if self.num_experts == 0:
            if self.experts_per_token or self.num_shared_experts or self.num_dense_layers:
                raise InvalidSpecError(
                    "model.experts_per_token, num_shared_experts and num_dense_layers need "
                    "model.num_experts > 0",
                    field="model.num_experts",
                )
            return
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise InvalidSpecError(
                f"model.experts_per_token ({self.experts_per_token}) must be in "
                f"[1, num_experts={self.num_experts}]",
                field="model.experts_per_token",
            )
        if not 0 <= self.num_shared_experts <= 1_000:
            raise InvalidSpecError(
                "model.num_shared_experts must be in [0, 1000]", field="model.num_shared_experts"
            )
        if not 0 <= self.num_dense_layers < self.num_layers:
            raise InvalidSpecError(
                f"model.num_dense_layers ({self.num_dense_layers}) must be in "
                f"[0, num_layers={self.num_layers})",
                field="model.num_dense_layers",
            )
        if self.moe_ffn_hidden_size is not None:
            _require_positive_int(
                self.moe_ffn_hidden_size, "model.moe_ffn_hidden_size", maximum=10_000_000
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_head_dim(self) -> int:
        """Per-head width of queries and keys (h/a unless ``head_dim`` is set)."""
        if self.mla is not None:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    @property
    def value_head_dim(self) -> int:
        if self.mla is not None:
            return self.mla.v_head_dim
        return self.attention_head_dim

    @property
    def expert_ffn_hidden_size(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceleratorSpec:
    """One accelerator's datasheet facts, in SI units (converted in ``catalog/mapping.py``).

    Peaks are dense (no structured sparsity). ``scaleup_bytes_per_s`` is the per-GPU
    unidirectional bandwidth inside the scale-up domain (NVLink); ``scaleout_bytes_per_s`` is the
    per-GPU back-end network bandwidth (InfiniBand/RoCE/EFA).
    """

    id: str
    name: str = ""
    memory_bytes: float
    hbm_bytes_per_s: float
    peak_flops_per_s: dict[Precision, float]
    tdp_w: float
    scaleup_domain_size: int
    scaleup_bytes_per_s: float
    scaleout_bytes_per_s: float

    def __post_init__(self) -> None:
        _require_finite_positive(self.memory_bytes, "accelerator.memory_bytes")
        _require_finite_positive(self.hbm_bytes_per_s, "accelerator.hbm_bytes_per_s")
        _require_finite_positive(self.tdp_w, "accelerator.tdp_w")
        _require_finite_positive(self.scaleup_bytes_per_s, "accelerator.scaleup_bytes_per_s")
        _require_finite_positive(self.scaleout_bytes_per_s, "accelerator.scaleout_bytes_per_s")
        _require_positive_int(self.scaleup_domain_size, "accelerator.scaleup_domain_size")
        if not self.peak_flops_per_s:
            raise InvalidSpecError(
                "accelerator.peak_flops_per_s needs at least one precision",
                field="accelerator.peak_flops_per_s",
            )
        for precision, value in self.peak_flops_per_s.items():
            _require_finite_positive(value, f"accelerator.peak_flops_per_s.{precision}")

    def peak_for(self, precision: Precision) -> float:
        """Dense peak FLOP/s for a precision; raises if the accelerator lacks it."""
        try:
            return self.peak_flops_per_s[precision]
        except KeyError:
            raise InvalidSpecError(
                f"accelerator {self.id} has no {precision} tensor-core peak; choose one of "
                f"{sorted(str(p) for p in self.peak_flops_per_s)}",
                field="training.precision",
            ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """How many accelerators of one kind, and how many share a node (scale-up domain)."""

    accelerator: AcceleratorSpec
    num_gpus: int
    gpus_per_node: int
    grid_gco2e_per_kwh: float | None = None
    """Grid carbon intensity where this cluster runs (its region's published figure); None
    takes ``EnergySpec.grid_gco2e_per_kwh``. Only the search reads it (carbon objective)."""
    fabric: FabricSpec | None = None
    """The scale-out fabric's protocol, latency, loss and topology (issue 42); None keeps the
    accelerator's links as they are, with NCCL's InfiniBand-tuned latencies (``fabric``)."""

    def __post_init__(self) -> None:
        _require_positive_int(self.num_gpus, "cluster.num_gpus", maximum=MAX_NUM_GPUS)
        _require_positive_int(self.gpus_per_node, "cluster.gpus_per_node", maximum=1_000_000)
        grid = self.grid_gco2e_per_kwh
        if grid is not None and (not math.isfinite(grid) or not 0 <= grid <= 2000):
            raise InvalidSpecError(
                f"cluster.grid_gco2e_per_kwh ({grid}) must be in [0, 2000]",
                field="cluster.grid_gco2e_per_kwh")


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelismPlan:
    """A parallel layout. ``tp*pp*dp*cp`` is the GPU count; ``ep`` is carved out of tp*dp*cp
    (Megatron-Core MoE parallel folding), so it is not a separate factor."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int = 1
    micro_batch: int = 1
    sequence_parallel: bool = True
    zero_stage: int = 1
    recompute: RecomputeMode = RecomputeMode.NONE
    offload: frozenset[Offload] = frozenset()
    fsdp_unit: ShardUnit | None = None
    """ZeRO-3 gather granularity; None takes the stack's (``geometry.STACK_SHARD_UNIT``)."""
    etp: int | None = None
    """Expert tensor-parallel size (Megatron-Core ``--expert-tensor-parallel-size``); None: tp
    when ep fits in the data/context ranks, else 1 (MoE parallel folding)."""
    moe_overlap: MoeOverlap = MoeOverlap.MEGATRON
    moe_dispatch_fp8: bool = False
    """Dispatch tokens in FP8, combine in bf16 (DeepSeek-V3, arXiv 2412.19437, section 3.3)."""
    moe_capacity_factor: float | None = None
    """Token-dropping MoE: each expert processes a buffer of capacity_factor x its average
    share of routed tokens, padded or dropped (Lepikhin et al. 2021, GShard, section 2.2;
    Fedus et al. 2022, Switch Transformer, section 2.2; MaxText ``capacity_factor``); the
    padded buffers cost compute and memory. None: dropless (Megatron-Core's default)."""
    moe_max_nodes_per_token: int | None = None
    """Node-limited routing: each token's experts span at most this many nodes, and a token
    crosses the network once per node it visits (DeepSeek-V3 section 2.1.2: 4 nodes;
    DeepEP's node-deduplicated dispatch)."""
    dp_shard: int | None = None
    """Hybrid sharding: the data-parallel ranks one ZeRO/FSDP shard group spans. The state is
    sharded over ``dp_shard * cp`` ranks and replicated ``dp / dp_shard`` times, and each
    step all-reduces the gradient shards across the replicas: PyTorch FSDP ``HYBRID_SHARD``
    (HSDP; Zhao et al. 2023, "PyTorch FSDP", VLDB 16(12), section 3.2.2), torchtitan's
    ``data_parallel_shard_degree`` beside ``data_parallel_replicate_degree``, MaxText's
    ``ici_fsdp_parallelism`` with ``dcn_data_parallelism``, DeepSpeed MiCS (Zhang et al. 2022,
    arXiv 2205.00119) and Megatron's ``--num-distributed-optimizer-instances``. None: every
    data-parallel rank (one shard group)."""

    @property
    def dp_replicas(self) -> int:
        """Replicas of the sharded state: ``dp / dp_shard`` (1 without hybrid sharding)."""
        return self.dp // self.dp_shard if self.dp_shard else 1

    def __post_init__(self) -> None:
        if Offload.WEIGHTS in self.offload and self.zero_stage != 3:
            raise InvalidSpecError(
                "parallelism.offload 'weights' needs parallelism.zero_stage 3 (the weights are "
                f"sharded before they go to the host); zero_stage is {self.zero_stage}",
                field="parallelism.offload",
            )
        if self.etp is not None:
            _require_positive_int(self.etp, "parallelism.etp", maximum=1_000_000)
            if self.tp % self.etp:
                raise InvalidSpecError(
                    f"parallelism.etp ({self.etp}) must divide parallelism.tp ({self.tp})",
                    field="parallelism.etp",
                )
        if self.moe_capacity_factor is not None and not (
                math.isfinite(self.moe_capacity_factor) and 1.0 <= self.moe_capacity_factor <= 64):
            raise InvalidSpecError(
                f"parallelism.moe_capacity_factor ({self.moe_capacity_factor}) must be in "
                "[1, 64]", field="parallelism.moe_capacity_factor")
        if self.moe_max_nodes_per_token is not None:
            _require_positive_int(self.moe_max_nodes_per_token,
                                  "parallelism.moe_max_nodes_per_token", maximum=1_000_000)
        if Offload.OPTIMIZER in self.offload and self.zero_stage == 0:
            raise InvalidSpecError(
                "parallelism.offload 'optimizer' needs parallelism.zero_stage 1, 2 or 3",
                field="parallelism.offload",
            )
        for name in ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch"):
            _require_positive_int(getattr(self, name), f"parallelism.{name}", maximum=1_000_000)
        if self.dp_shard is not None:
            _require_positive_int(self.dp_shard, "parallelism.dp_shard", maximum=1_000_000)
            if self.dp % self.dp_shard:
                raise InvalidSpecError(
                    f"parallelism.dp_shard ({self.dp_shard}) must divide parallelism.dp "
                    f"({self.dp}): the data-parallel ranks form dp / dp_shard replicas",
                    field="parallelism.dp_shard")
            if self.dp_shard < self.dp and self.zero_stage == 0:
                raise InvalidSpecError(
                    "parallelism.dp_shard below dp (hybrid sharding) needs "
                    "parallelism.zero_stage 1, 2 or 3: with zero_stage 0 nothing is sharded",
                    field="parallelism.dp_shard")
        if self.zero_stage not in (0, 1, 2, 3):
            raise InvalidSpecError(
                f"parallelism.zero_stage ({self.zero_stage}) must be 0, 1, 2 or 3",
                field="parallelism.zero_stage",
            )
        if self.vp > 1 and self.pp == 1:
            raise InvalidSpecError(
                "parallelism.vp > 1 (interleaved pipeline) needs parallelism.pp > 1",
                field="parallelism.vp",
            )

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSpec:
    """The workload: sequence length, global batch in sequences, total tokens, precision, and
    whether the attention kernel is fused."""

    seq_len: int
    global_batch_seqs: int
    tokens: float
    precision: Precision = Precision.BF16
    flash_attention: bool = True
    """Fused attention that never stores the s x s score matrix (Dao et al. 2022). Off models
    the unfused kernels of 2021-era Megatron-LM (Korthikanti et al. 2022, Table 2, 5as/t)."""
    framework: Framework = Framework.UNKNOWN
    """The software stack: its fitted efficiency and its uncertainty band."""
    master_weights: StatePrecision = StatePrecision.FP32
    """fp32 master weights (mixed precision, Micikevicius et al. 2018) or none: the bf16
    weights are updated directly and the optimizer moments are bf16 too (MaxText
    ``weight_dtype: bfloat16``; optax keeps moments in the parameters' dtype)."""
    gradient_precision: StatePrecision | None = None
    """The gradient buffer and its reduction; None takes the stack's default
    (``memory.STACK_MEMORY``)."""
    optimizer: Optimizer = Optimizer.ADAMW
    loss_kernel: LossKernel | None = None
    """The cross-entropy's handling of the logits (issue 43); None takes the stack's own
    (``memory.STACK_MEMORY``: the figures the pre-training fit was made with)."""
    attention_kernel: AttentionKernel | None = None
    """The attention kernel; None takes the stack's default for the accelerator."""
    framework_version: str | None = None
    """The stack's version: a date ``YYYY-MM`` or a release string (issue 37). Where a
    stack's defaults come from this project's own measurements, an older version takes the
    published runs' defaults instead (``envelope.uses_local_defaults``)."""
    fp8_params: bool = False
    """FP8 working weights (Transformer Engine ``fp8_model_init``, Megatron ``--fp8-param-gather``):
    1 byte per parameter on the device and in the all-gather; needs precision fp8."""
    torch_compile: bool | None = None
    """``torch.compile`` on a PyTorch stack whose elementwise ops are otherwise separate
    kernels (``EAGER_ELEMENTWISE_STACKS``: torchtitan, FSDP trainers). False (eager) makes the
    elementwise work ``Calibration.eager_elementwise_multiplier`` times as many HBM passes
    (``timing``); True or None is the fused work the stacks were fitted with (most published
    runs of these stacks compile). No effect on Megatron (fused kernels), DeepSpeed, MaxText
    (XLA always compiles) or unknown stacks."""
    gradient_compression: GradientCompression | None = None
    """Data-parallel gradient compression (issue 42; ``fabric.gradient_bytes_fraction``);
    None or method none sends the gradients as the stack does."""
    method: TrainingMethod = TrainingMethod.PRETRAIN
    """What is trained (issue 43): every weight, or adapters on a frozen base."""
    lora: LoraSpec | None = None
    """The adapters of ``lora`` and ``qlora`` (None: ``LoraSpec()``'s defaults)."""
    examples: int | None = None
    """Dataset sizing (issue 43): examples, when ``tokens`` was derived from them
    (``dataset_tokens``); echoed in the assumptions."""
    mean_example_tokens: float | None = None
    packing: bool = True
    """Examples packed into full sequences (no padding), or each padded to ``seq_len``."""
    rl: RlSpec | None = None
    """The rollouts and scoring of method ``rl`` (required there, refused elsewhere). The
    update then runs ``seq_len``-token packed sequences, ``global_batch_seqs`` of them per
    optimizer update (the PPO mini-batch); ``tokens`` is ``rl.total_tokens``."""

    @property
    def adapters(self) -> bool:
        """Whether the base is frozen and only adapters train (lora, qlora)."""
        return self.method in (TrainingMethod.LORA, TrainingMethod.QLORA)

    @property
    def lora_spec(self) -> LoraSpec:
        return self.lora if self.lora is not None else LoraSpec()

    @property
    def base_precision(self) -> BasePrecision:
        """The frozen base's storage: the caller's, else nf4 for qlora and bf16 otherwise."""
        given = self.lora_spec.base_precision
        if given is not None:
            return given
        return BasePrecision.NF4 if self.method == TrainingMethod.QLORA else BasePrecision.BF16

    def __post_init__(self) -> None:
        if (self.lora is not None and self.lora.base_precision == BasePrecision.NF4
                and not self.adapters):
            raise InvalidSpecError(
                f"training.lora.base_precision nf4 needs method lora or qlora: {self.method} "
                "trains every weight, and 4-bit weights cannot be trained",
                field="training.lora.base_precision")
        if self.lora is not None and not self.adapters:
            raise InvalidSpecError(
                f"training.lora is given but training.method is {self.method}: adapters need "
                "method lora or qlora", field="training.lora")
        if self.examples is not None:
            _require_positive_int(self.examples, "training.examples", maximum=10**12)
        self._validate_rl()
        _require_positive_int(self.seq_len, "training.seq_len", maximum=100_000_000)
        _require_positive_int(
            self.global_batch_seqs, "training.global_batch_seqs", maximum=100_000_000
        )
        _require_finite_positive(self.tokens, "training.tokens")
        if self.tokens > 1e18:
            raise InvalidSpecError(
                f"training.tokens ({self.tokens:g}) must be at most 1e18", field="training.tokens"
            )
        if self.fp8_params and self.precision != Precision.FP8:
            raise InvalidSpecError(
                f"training.fp8_params needs training.precision fp8 (it is {self.precision})",
                field="training.fp8_params",
            )


    def _validate_rl(self) -> None:
        rl = self.rl
        if self.method == TrainingMethod.RL and rl is None:
            raise InvalidSpecError("training.method rl needs training.rl (the rollouts: steps, "
                                   "prompts, samples, prompt and response tokens)",
                                   field="training.rl")
        if rl is None:
            return
        if self.method != TrainingMethod.RL:
            raise InvalidSpecError(f"training.rl is given but training.method is "
                                   f"{self.method}: rollouts need method rl",
                                   field="training.rl")
        if self.examples is not None:
            raise InvalidSpecError("training.examples cannot size an RL job: its tokens are "
                                   "training.rl's rollouts", field="training.examples")
        if isinstance(self.seq_len, int) and self.seq_len < rl.sequence_tokens:
            raise InvalidSpecError(
                f"training.seq_len ({self.seq_len}) must be at least training.rl.prompt_tokens "
                f"+ response_tokens ({rl.sequence_tokens}): the update packs whole rollouts "
                "into sequences of seq_len", field="training.seq_len")
        if (isinstance(self.global_batch_seqs, int) and isinstance(self.seq_len, int)
                and self.global_batch_seqs * self.seq_len > rl.tokens_per_step):
            raise InvalidSpecError(
                f"training.global_batch_seqs x seq_len ({self.global_batch_seqs} x "
                f"{self.seq_len}) must be at most the tokens a step generates "
                f"({rl.tokens_per_step:,} = prompts x samples x (prompt + response)): it is "
                "the update's mini-batch", field="training.global_batch_seqs")


def dataset_tokens(*, examples: int, mean_example_tokens: float, seq_len: int,
                   packing: bool) -> float:
    """Tokens processed for ``examples`` examples (issue 43): packed, the examples fill whole
    sequences back to back, so examples x mean tokens; unpacked, each example is padded to
    ``seq_len`` (Hugging Face ``DataCollatorWithPadding`` with ``padding="max_length"``;
    torchtune's and TRL's ``packing`` options exist to avoid this), so examples x seq_len.
    An unpacked example longer than ``seq_len`` is truncated to it."""
    _require_positive_int(examples, "training.examples", maximum=10**12)
    _require_finite_positive(mean_example_tokens, "training.mean_example_tokens")
    if packing:
        return examples * mean_example_tokens
    return float(examples * seq_len)


def validate_lora(model: ModelSpec, training: TrainingSpec) -> None:
    """Cross-object rules of adapters: a rank no larger than the narrowest targeted layer's
    width (a rank-r update of a d_in x d_out matrix needs r <= min(d_in, d_out), Hu et al.
    2021, section 4.1); dense GQA models only for now (MoE experts and MLA projections are
    not yet modelled)."""
    if not training.adapters:
        return
    if model.is_moe or model.mla is not None:
        raise InvalidSpecError(
            f"training.method {training.method} is modelled for dense models with standard "
            "attention only (MoE experts and MLA projections are not yet)",
            field="training.method")
    lora = training.lora_spec
    widths = {name: min(shape) for name, shape in lora_matrix_shapes(model).items()
              if name in lora.target_modules}
    if not widths:
        raise InvalidSpecError(
            "training.lora.target_modules names no matrix of this model (gate exists only in "
            "gated MLPs)", field="training.lora.target_modules")
    narrowest = min(widths.values())
    if lora.rank > narrowest:
        name = min(widths, key=lambda k: widths[k])
        raise InvalidSpecError(
            f"training.lora.rank ({lora.rank}) must be at most the narrowest targeted layer's "
            f"width ({narrowest}, module {name})", field="training.lora.rank")


def lora_matrix_shapes(model: ModelSpec) -> dict[LoraTarget, tuple[int, int]]:
    """(d_in, d_out) of each adaptable matrix of one layer of a dense model. Two-matrix MLPs
    have no gate (``gate`` then adapts nothing)."""
    h = model.hidden_size
    q_width = model.num_heads * model.attention_head_dim
    kv_width = model.num_kv_heads * model.attention_head_dim
    f = model.ffn_hidden_size
    shapes = {
        LoraTarget.Q: (h, q_width),
        LoraTarget.K: (h, kv_width),
        LoraTarget.V: (h, model.num_kv_heads * model.value_head_dim),
        LoraTarget.O: (model.num_heads * model.value_head_dim, h),
        LoraTarget.UP: (h, f),
        LoraTarget.DOWN: (f, h),
    }
    if model.mlp == MlpKind.SWIGLU:
        shapes[LoraTarget.GATE] = (h, f)
    return shapes


@dataclass(frozen=True, slots=True, kw_only=True)
class EnergySpec:
    """Assumptions for energy and carbon (docs/model.md, section Energy).

    Defaults and their sources:
    - ``pue`` 1.2: a modern hyperscale data centre (Google reports a 1.10 fleet average for
      2023; the Uptime Institute 2023 survey average is 1.58). Override per site.
    - ``grid_gco2e_per_kwh`` 480: world average electricity carbon intensity in 2023 (Ember,
      Global Electricity Review 2024). Override with the region's figure.
    - ``gpu_power_fraction`` 0.8: average board power as a fraction of TDP during dense
      training (MLPerf Training power submissions and Meta's Llama 3 report show GPUs running
      close to, but below, their power limit).
    - ``host_power_fraction`` 0.4: CPU, memory, NICs, fans and switches per GPU as a fraction of
      GPU TDP. A DGX H100 draws 10.2 kW at most for 8 x 700 W GPUs (DGX H100 datasheet), so
      the non-GPU share is up to 0.82 x TDP; half of that is typical under training load.
    """

    pue: float = 1.2
    grid_gco2e_per_kwh: float = 480.0
    gpu_power_fraction: float = 0.8
    host_power_fraction: float = 0.4

    def __post_init__(self) -> None:
        if not math.isfinite(self.pue) or not 1.0 <= self.pue <= 5.0:
            raise InvalidSpecError(f"energy.pue ({self.pue}) must be in [1, 5]", field="energy.pue")
        if not math.isfinite(self.grid_gco2e_per_kwh) or not (
            0 <= self.grid_gco2e_per_kwh <= 2000
        ):
            raise InvalidSpecError(
                f"energy.grid_gco2e_per_kwh ({self.grid_gco2e_per_kwh}) must be in [0, 2000]",
                field="energy.grid_gco2e_per_kwh",
            )
        _require_fraction(self.gpu_power_fraction, "energy.gpu_power_fraction", allow_zero=False)
        if not math.isfinite(self.host_power_fraction) or not 0 <= self.host_power_fraction <= 5:
            raise InvalidSpecError(
                f"energy.host_power_fraction ({self.host_power_fraction}) must be in [0, 5]",
                field="energy.host_power_fraction",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanLayout:
    """Derived facts about a validated plan, computed once by ``validate_plan``."""

    num_micro_batches: int
    layers_per_stage: int
    layers_spread_unevenly: bool
    expert_tp: int
    warnings: tuple[str, ...] = field(default=())


def validate_plan(
    model: ModelSpec, cluster: ClusterSpec, plan: ParallelismPlan, training: TrainingSpec
) -> PlanLayout:
    """Check the cross-object rules of a layout and derive its micro-batch count.

    Rules (Narayanan et al. 2021 section 2; Megatron-Core argument checks):
    tp*pp*dp*cp equals the GPU count; tp divides the query heads and the KV heads (or the KV
    heads divide tp, in which case they are replicated); cp divides the sequence; dp*b divides
    the global batch; ep divides the experts and tp*dp*cp. Layers may be spread unevenly over
    pipeline stages, which is stated as a warning.
    """
    warnings: list[str] = []
    model_parallel = plan.tp * plan.pp * plan.cp
    if cluster.num_gpus % model_parallel:
        # The common mistake, said in the user's words with the two nearest counts that work.
        lower = cluster.num_gpus // model_parallel * model_parallel
        counts = [c for c in (lower, lower + model_parallel) if c > 0]
        raise InvalidSpecError(
            f"GPU count ({cluster.num_gpus:,}) must be a multiple of TP×PP×CP = "
            f"{plan.tp}×{plan.pp}×{plan.cp} = {model_parallel:,}: try "
            + " or ".join(f"{c:,}" for c in counts),
            field="parallelism",
        )
    if plan.num_gpus != cluster.num_gpus:
        raise InvalidSpecError(
            f"tp*pp*dp*cp ({plan.tp}*{plan.pp}*{plan.dp}*{plan.cp} = {plan.num_gpus}) must "
            f"equal cluster.num_gpus ({cluster.num_gpus})",
            field="parallelism",
        )
    if model.num_heads % plan.tp:
        raise InvalidSpecError(
            f"model.num_heads ({model.num_heads}) must be divisible by parallelism.tp ({plan.tp})",
            field="parallelism.tp",
        )
    if model.num_kv_heads % plan.tp and plan.tp % model.num_kv_heads:
        raise InvalidSpecError(
            f"model.num_kv_heads ({model.num_kv_heads}) and parallelism.tp ({plan.tp}) must "
            "divide one another",
            field="parallelism.tp",
        )
    if plan.pp > model.num_layers:
        raise InvalidSpecError(
            f"parallelism.pp ({plan.pp}) must be at most model.num_layers ({model.num_layers})",
            field="parallelism.pp",
        )
    layers_per_stage = -(-model.num_layers // plan.pp)
    uneven = model.num_layers % plan.pp != 0
    if uneven:
        warnings.append(
            f"{model.num_layers} layers do not divide evenly over {plan.pp} pipeline stages; "
            f"the slowest stage is modelled with {layers_per_stage} layers"
        )
    if plan.vp > layers_per_stage:
        raise InvalidSpecError(
            f"parallelism.vp ({plan.vp}) must be at most the layers per pipeline stage "
            f"({layers_per_stage})",
            field="parallelism.vp",
        )
    if training.seq_len % plan.cp:
        raise InvalidSpecError(
            f"training.seq_len ({training.seq_len}) must be divisible by parallelism.cp "
            f"({plan.cp})",
            field="parallelism.cp",
        )
    replica_batch = plan.dp * plan.micro_batch
    if training.global_batch_seqs % replica_batch:
        raise InvalidSpecError(
            f"training.global_batch_seqs ({training.global_batch_seqs}) must be divisible by "
            f"parallelism.dp * parallelism.micro_batch ({plan.dp}*{plan.micro_batch} = "
            f"{replica_batch})",
            field="training.global_batch_seqs",
        )
    num_micro_batches = training.global_batch_seqs // replica_batch
    expert_tp = _validate_experts(model, plan)
    if plan.vp > 1 and num_micro_batches % plan.pp:
        warnings.append(
            f"interleaved pipelining usually needs the micro-batch count ({num_micro_batches}) "
            f"to be a multiple of pp ({plan.pp})"
        )
    if plan.tp > cluster.gpus_per_node:
        warnings.append(
            f"tp ({plan.tp}) spans more than one node ({cluster.gpus_per_node} GPUs per node): "
            "tensor-parallel traffic runs over the scale-out network"
        )
    if plan.tp > 1 and plan.sequence_parallel is False and plan.recompute != RecomputeMode.FULL:
        warnings.append("sequence parallelism is off: activations outside TP regions replicate")
    return PlanLayout(
        num_micro_batches=num_micro_batches,
        layers_per_stage=layers_per_stage,
        layers_spread_unevenly=uneven,
        expert_tp=expert_tp,
        warnings=tuple(warnings),
    )


def _validate_experts(model: ModelSpec, plan: ParallelismPlan) -> int:
    """Return the tensor-parallel size used inside experts (1 when EP folds over TP)."""
    if not model.is_moe:
        if plan.ep != 1:
            raise InvalidSpecError(
                f"parallelism.ep ({plan.ep}) must be 1 for a dense model", field="parallelism.ep"
            )
        return plan.tp
    if model.num_experts % plan.ep:
        raise InvalidSpecError(
            f"model.num_experts ({model.num_experts}) must be divisible by parallelism.ep "
            f"({plan.ep})",
            field="parallelism.ep",
        )
    span = plan.tp * plan.dp * plan.cp
    if span % plan.ep:
        raise InvalidSpecError(
            f"parallelism.ep ({plan.ep}) must divide tp*dp*cp ({span}): experts are placed "
            "on data-, context- and tensor-parallel ranks",
            field="parallelism.ep",
        )
    if plan.etp is not None:
        if span % (plan.ep * plan.etp):
            raise InvalidSpecError(
                f"parallelism.ep x parallelism.etp ({plan.ep} x {plan.etp}) must divide "
                f"tp*dp*cp ({span})", field="parallelism.etp",
            )
        return plan.etp
    # Megatron-Core parallel folding: when EP fits in the data/context ranks, experts keep the
    # dense TP size; otherwise EP absorbs TP and experts run unsharded (expert TP = 1).
    return plan.tp if (plan.dp * plan.cp) % plan.ep == 0 else 1
