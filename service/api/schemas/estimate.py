"""``POST /v1/estimates``: request and response bodies."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import BaseModel, Field, model_validator

from service.api.schemas.calibration_ref import CalibrationIdField
from service.api.schemas.common import AcceleratorRef, RequestModel, TextRule
from service.core.errors import InvalidSpecError
from service.core.estimate import Estimate
from service.core.plausibility import (
    DEFAULTED_INPUT,
    WARNING_CODES,
    WarningDetail,
    detail_of,
)
from service.core.presets import default_vocab, get_preset
from service.core.serving import Engine
from service.core.specs import (
    FABRIC_LATENCY_RANGE_S,
    FABRIC_MAX_LOSS_FRACTION,
    FABRIC_MAX_RAILS,
    FABRIC_OVERSUBSCRIPTION_RANGE,
    MAX_LORA_RANK,
    MAX_POWERSGD_RANK,
    MAX_RL_ROLLOUTS,
    MAX_RL_STEPS,
    AcceleratorSpec,
    AttentionKernel,
    BasePrecision,
    ClusterSpec,
    CompressionMethod,
    EnergySpec,
    FabricProtocol,
    FabricSpec,
    Framework,
    GradientCompression,
    LoraSpec,
    LoraTarget,
    LossKernel,
    MlpKind,
    ModelSpec,
    MoeOverlap,
    Offload,
    Optimizer,
    ParallelismPlan,
    Precision,
    RecomputeMode,
    RlPlacement,
    RlSpec,
    ShardUnit,
    StatePrecision,
    TrainingMethod,
    TrainingSpec,
    dataset_tokens,
)
from service.core.timing import EAGER_ELEMENTWISE_STACKS

Count = Annotated[int, Field(strict=True, ge=1, le=1_000_000)]
ARCHITECTURE_REQUIRED = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "ffn_hidden_size",
)
ARCHITECTURE_FIELDS = (*ARCHITECTURE_REQUIRED, "vocab_size")


class ModelIn(RequestModel):
    """A preset name, or a full architecture (never both)."""

    preset: Annotated[str, TextRule(max_length=64)] | None = Field(
        default=None,
        description="Preset name from GET /v1/models.",
        examples=["llama3.1-70b"],
    )
    name: Annotated[str, TextRule(max_length=64)] = Field(
        default="custom", description="Label for a custom model.")
    num_layers: int | None = Field(
        strict=True, default=None, ge=1, le=10_000, description="Layers L."
    )
    hidden_size: int | None = Field(
        strict=True, default=None, ge=1, le=1_000_000, description="Width h."
    )
    num_heads: int | None = Field(
        strict=True, default=None, ge=1, le=100_000, description="Query heads a."
    )
    num_kv_heads: int | None = Field(
        strict=True,
        default=None,
        ge=1,
        le=100_000,
        description="Key/value heads g (GQA); a for MHA.",
    )
    head_dim: int | None = Field(
        strict=True,
        default=None,
        ge=1,
        le=100_000,
        description="Per-head width; default hidden/heads.",
    )
    ffn_hidden_size: int | None = Field(
        strict=True, default=None, ge=1, le=10_000_000, description="MLP width f (dense layers)."
    )
    mlp: MlpKind = Field(default=MlpKind.SWIGLU, description="MLP type.")
    vocab_size: int | None = Field(
        strict=True, default=None, ge=1, le=100_000_000,
        description="Vocabulary. Default: the model family's or era's, with a warning in the "
                    "answer (warning_details code defaulted_input, field model.vocab_size): "
                    "50,257 (GPT-2's, kept by GPT-3 and Megatron GPT) for a name with gpt or "
                    "megatron or a gelu MLP; 32,000 (Llama 1 and 2) for a name with llama2 or "
                    "a swiglu MLP without GQA; otherwise 128,256 (Llama 3's).")
    tied_embeddings: bool = Field(
        strict=True, default=False, description="Output head shares embeddings."
    )
    num_experts: int = Field(
        strict=True, default=0, ge=0, le=100_000, description="Routed experts; 0 = dense."
    )
    experts_per_token: int = Field(
        strict=True, default=0, ge=0, le=100_000, description="Top-k routing."
    )
    num_shared_experts: int = Field(
        strict=True, default=0, ge=0, le=1_000, description="Always-on experts."
    )
    moe_ffn_hidden_size: int | None = Field(
        strict=True,
        default=None,
        ge=1,
        le=10_000_000,
        description="Expert MLP width; default ffn_hidden_size.",
    )
    num_dense_layers: int = Field(
        strict=True, default=0, ge=0, le=10_000, description="Leading dense layers of an MoE model."
    )

    @model_validator(mode="after")
    def _preset_or_architecture(self) -> Self:
        given = [name for name in ARCHITECTURE_FIELDS if getattr(self, name) is not None]
        if self.preset is not None and given:
            raise ValueError(
                f"give either preset or an architecture, not both (also given: {', '.join(given)})"
            )
        if self.preset is None:
            missing = [name for name in ARCHITECTURE_REQUIRED if getattr(self, name) is None]
            if missing:
                raise ValueError("model needs a preset, or all of: " + ", ".join(missing))
        return self

    def to_core(self) -> ModelSpec:
        if self.preset is not None:
            return get_preset(self.preset).model
        return ModelSpec(
            name=self.name,
            num_layers=self.num_layers or 0,
            hidden_size=self.hidden_size or 0,
            num_heads=self.num_heads or 0,
            num_kv_heads=self.num_kv_heads or 0,
            head_dim=self.head_dim,
            ffn_hidden_size=self.ffn_hidden_size or 0,
            mlp=self.mlp,
            vocab_size=self.vocab_size or default_vocab(
                self.name, self.mlp, self.num_heads or 0, self.num_kv_heads or 0).size,
            vocab_size_assumed=self.vocab_size is None,
            tied_embeddings=self.tied_embeddings,
            num_experts=self.num_experts,
            experts_per_token=self.experts_per_token,
            num_shared_experts=self.num_shared_experts,
            moe_ffn_hidden_size=self.moe_ffn_hidden_size,
            num_dense_layers=self.num_dense_layers,
        )


class FabricIn(RequestModel):
    """The scale-out fabric (issue 42; docs/model.md, "Fabric"). Every field is optional; a
    field left out takes the protocol's default."""

    protocol: FabricProtocol = Field(default=FabricProtocol.INFINIBAND, description=(
        "The transport between nodes: infiniband (link-level retry; defaults 1.5 us), roce "
        "(RoCE v2, go-back-N on loss; 3 us), efa (AWS SRD, selective repeat; 12 us, 0.9 of "
        "InfiniBand's bus bandwidth), tcpx (GPUDirect-TCPX; 25 us, 0.8), ethernet_tcp (NCCL "
        "sockets; 40 us, 0.5), ici (TPU; 1 us). TCP protocols follow Mathis et al. 1997 "
        "under loss."), examples=["roce"])
    latency_s: float | None = Field(
        strict=True, default=None, ge=FABRIC_LATENCY_RANGE_S[0], le=FABRIC_LATENCY_RANGE_S[1],
        description=(
            "One-way small-message latency NIC to NIC across the fabric, seconds. Each network "
            "hop of a collective pays NCCL's InfiniBand-tuned hop latency plus the difference "
            "from 1.5 us. Default: the protocol's."), examples=[3e-6])
    packet_loss_fraction: float = Field(
        strict=True, default=0.0, ge=0.0, le=FABRIC_MAX_LOSS_FRACTION, description=(
            "Packets lost per packet sent (0.001 is 0.1%). Costs goodput by the protocol's "
            "recovery: link retry and selective repeat resend the lost packet, RoCE's "
            "go-back-N the window in flight, TCP halves its window. Default 0."),
        examples=[0.001])
    oversubscription: float = Field(
        strict=True, default=1.0, ge=FABRIC_OVERSUBSCRIPTION_RANGE[0],
        le=FABRIC_OVERSUBSCRIPTION_RANGE[1], description=(
            "Leaf-to-spine oversubscription (2 is 2:1). Collectives whose group spans more "
            "nodes than one leaf reaches (32 x rails / GPUs per node) run their network part "
            "at 1/oversubscription of the bandwidth. Default 1 (non-blocking)."),
        examples=[2.0])
    rails: int | None = Field(
        strict=True, default=None, ge=1, le=FABRIC_MAX_RAILS, description=(
            "Leaf switches a node's NICs are spread over: rail-optimised nodes have one per "
            "NIC, which keeps rail-aligned traffic on a leaf over 32 nodes; 1 is one "
            "top-of-rack switch for the node's NICs. Default: the GPUs per node."),
        examples=[8])

    def to_core(self) -> FabricSpec:
        return FabricSpec(protocol=self.protocol, latency_s=self.latency_s,
                          packet_loss_fraction=self.packet_loss_fraction,
                          oversubscription=self.oversubscription, rails=self.rails)


class GradientCompressionIn(RequestModel):
    """Data-parallel gradient compression (issue 42)."""

    method: CompressionMethod = Field(default=CompressionMethod.NONE, description=(
        "none; powersgd (rank-r factors P and Q in fp32, r(n+m) numbers per n x m gradient "
        "matrix instead of nm, all-reduced, plus its matmuls per step; Vogels et al. 2019); "
        "bf16 or fp8 (the gradients reduced in 2 or 1 bytes, where the stack's are wider). "
        "Any method but none carries outside_validated_range on training.gradient_compression: "
        "the steps to the same loss can change, which is not modelled."), examples=["powersgd"])
    rank: int = Field(strict=True, default=4, ge=1, le=MAX_POWERSGD_RANK, description=(
        "PowerSGD's rank r (ignored by the other methods)."), examples=[4])

    def to_core(self) -> GradientCompression:
        return GradientCompression(method=self.method, rank=self.rank)


class LoraIn(RequestModel):
    """Low-rank adapters on a frozen base (issue 43; Hu et al. 2021, Dettmers et al. 2023)."""

    rank: int = Field(strict=True, default=16, ge=1, le=MAX_LORA_RANK, description=(
        "The adapters' rank r: r x (d_in + d_out) parameters per adapted matrix. At most the "
        "narrowest targeted layer's width."), examples=[16])
    target_modules: list[LoraTarget] = Field(
        default_factory=lambda: list(LoraTarget), min_length=1, max_length=7, description=(
            "The linear layers adapted, of q, k, v, o, gate, up, down (default all seven, as "
            "QLoRA adapts every linear layer)."),
        examples=[["q", "k", "v", "o", "gate", "up", "down"]])
    base_precision: BasePrecision | None = Field(default=None, description=(
        "How the frozen base is held: bf16 (2 B per weight), fp8 (1 B) or nf4 (QLoRA's "
        "4-bit NormalFloat with double-quantised constants, 0.5 B + 0.127 bits). Default: "
        "nf4 for qlora, bf16 for lora."), examples=["nf4"])

    def to_core(self) -> LoraSpec:
        return LoraSpec(rank=self.rank, target_modules=frozenset(self.target_modules),
                        base_precision=self.base_precision)


class RlIn(RequestModel):
    """An RL post-training job's rollouts and scoring (issue 43; GRPO, Shao et al. 2024;
    docs/model.md, "RL post-training")."""

    steps: int = Field(strict=True, ge=1, le=MAX_RL_STEPS, description=(
        "RL steps (generate, score, update) in the job."), examples=[500])
    prompts_per_step: int = Field(strict=True, ge=1, le=MAX_RL_ROLLOUTS, description=(
        "Prompts per step (verl data.train_batch_size)."), examples=[128])
    samples_per_prompt: int = Field(strict=True, ge=1, le=1024, description=(
        "Responses sampled per prompt: GRPO's group size G (verl rollout.n)."), examples=[8])
    prompt_tokens: int = Field(strict=True, ge=1, le=10_000_000, description=(
        "Mean prompt length in tokens."), examples=[512])
    response_tokens: int = Field(strict=True, ge=1, le=10_000_000, description=(
        "Mean response (rollout) length in tokens: it sets the generation time and the KV "
        "cache. Required."), examples=[2048])
    max_response_tokens: int | None = Field(default=None, strict=True, ge=1, le=10_000_000,
                                            description=(
        "The longest response of a step (the length cap, where responses are truncated): a "
        "synchronous step waits for it, decoding its tail alone. Not given: every response "
        "has response_tokens (no straggler)."), examples=[8192])
    reference_model: bool = Field(strict=True, default=True, description=(
        "A frozen reference policy scores the rollouts for the KL term (one more forward "
        "pass of the policy's size)."))
    reward_model: ModelIn | None = Field(default=None, description=(
        "A learned reward model (a forward pass over every rollout); null: a rule-based "
        "reward on the CPU, not timed."), examples=[{"preset": "llama3.1-8b"}])
    placement: RlPlacement = Field(default=RlPlacement.COLOCATED, description=(
        "colocated: rollouts, forward passes and update in turn on every GPU (verl's hybrid "
        "engine); disaggregated: rollouts on GPUs of their own, overlapped one step "
        "off-policy (OpenRLHF, verl one_step_off_policy), the split searched. Both are "
        "estimated; rl.faster_placement says which is faster, and this one is priced."))
    rollout_engine: Engine = Field(default=Engine.VLLM, description=(
        "The serving engine that generates the rollouts (the serving model's efficiencies)."))

    def to_core(self) -> RlSpec:
        return RlSpec(steps=self.steps, prompts_per_step=self.prompts_per_step,
                      samples_per_prompt=self.samples_per_prompt,
                      prompt_tokens=self.prompt_tokens, response_tokens=self.response_tokens,
                      reference_model=self.reference_model,
                      reward_model=None if self.reward_model is None
                      else self.reward_model.to_core(),
                      placement=self.placement, rollout_engine=self.rollout_engine,
                      max_response_tokens=self.max_response_tokens)


class ClusterIn(RequestModel):
    accelerator: AcceleratorRef = Field(
        description="Accelerator id from GET /v1/accelerators.",
        examples=["h100-sxm5-80gb"],
    )
    num_gpus: Count = Field(description="GPUs in the job.", examples=[64])
    gpus_per_node: int | None = Field(
        strict=True,
        default=None,
        ge=1,
        le=100_000,
        description="GPUs per node (scale-up domain). Default: the accelerator's domain size, "
        "or num_gpus if smaller.",
        examples=[8],
    )

    scaleout_bytes_per_s_per_gpu: float | None = Field(
        strict=True, default=None, ge=1e8, le=1e13, description=(
            "The network between nodes, bytes/s per GPU each way, where it differs from the "
            "accelerator's catalogue figure: e.g. 400 Gb/s per 8-GPU node (AWS p4d EFA) is "
            "6.25e9, 8 x 400 Gb/s InfiniBand NDR is 5e10."), examples=[6.25e9])
    scaleup_bytes_per_s_per_gpu: float | None = Field(
        strict=True, default=None, ge=1e8, le=1e13, description=(
            "The scale-up link (NVLink), bytes/s per GPU each way, where it differs from the "
            "catalogue: e.g. A800 (NVLink 400 GB/s) is 2e11."), examples=[2e11])
    fabric: FabricIn | None = Field(default=None, description=(
        "The scale-out fabric's protocol, latency, packet loss, oversubscription and rails "
        "(docs/model.md, \"Fabric\"). Not given: the network as the calibration fitted it, "
        "with NCCL's InfiniBand-tuned latencies."),
        examples=[{"protocol": "roce", "packet_loss_fraction": 0.0001, "oversubscription": 2.0}])

    def to_core(self, accelerator: AcceleratorSpec) -> ClusterSpec:
        per_node = self.gpus_per_node or min(accelerator.scaleup_domain_size, self.num_gpus)
        return ClusterSpec(accelerator=with_links(accelerator, self.scaleout_bytes_per_s_per_gpu,
                                                  self.scaleup_bytes_per_s_per_gpu),
                           num_gpus=self.num_gpus, gpus_per_node=per_node,
                           fabric=None if self.fabric is None else self.fabric.to_core())


def with_links(accelerator: AcceleratorSpec, scaleout_bytes_per_s: float | None,
               scaleup_bytes_per_s: float | None) -> AcceleratorSpec:
    """The catalogue accelerator on the caller's network and scale-up links; its id, and so
    its calibration, stays."""
    if scaleout_bytes_per_s is not None:
        accelerator = dataclasses.replace(accelerator, scaleout_bytes_per_s=scaleout_bytes_per_s)
    if scaleup_bytes_per_s is not None:
        accelerator = dataclasses.replace(accelerator, scaleup_bytes_per_s=scaleup_bytes_per_s)
    return accelerator


class Auto(StrEnum):
    """The optimiser chooses this field (an enum rather than a const, so that generated
    clients parse the integer-or-auto union)."""

    AUTO = "auto"


AUTO = Auto.AUTO
AUTO_FIELDS = ("vp", "micro_batch", "recompute")


class ParallelismIn(RequestModel):
    tp: Count = Field(default=1, description="Tensor-parallel size.")
    pp: Count = Field(default=1, description="Pipeline-parallel stages.")
    dp: Count | None = Field(
        default=None, description="Data-parallel size. Default: num_gpus / (tp*pp*cp)."
    )
    cp: Count = Field(default=1, description="Context-parallel size (splits the sequence).")
    ep: Count = Field(default=1, description="Expert-parallel size (MoE; within tp*dp*cp).")
    vp: Count | Auto = Field(default=1, description=(
        "Virtual pipeline stages per GPU (interleaving), or \"auto\": the fastest that fits, "
        "chosen by the optimiser with the other fields fixed."))
    micro_batch: Count | Auto = Field(default=1, description=(
        "Sequences per micro-batch, or \"auto\" (chosen by the optimiser)."))
    sequence_parallel: bool = Field(
        strict=True, default=True, description="Megatron sequence parallelism."
    )
    zero_stage: int = Field(strict=True, default=1, ge=0, le=3, description="ZeRO stage; 3 = FSDP.")
    recompute: RecomputeMode | Auto = Field(default=RecomputeMode.NONE, description=(
        "Recomputation, or \"auto\": the least that fits with the fastest step, chosen by "
        "the optimiser."))
    offload: list[Offload] = Field(default_factory=list, max_length=3, description=(
        "What lives in host memory instead of on the GPU: optimizer (optimizer state and "
        "sharded gradients, CPU optimizer step: ZeRO-Offload), weights (also the sharded "
        "weights: ZeRO-Infinity, FSDP CPU offload; needs zero_stage 3), activations (the "
        "activations saved for backward: MaxText host-offload remat, Megatron activation "
        "offloading). Frees device memory and adds host-link transfer time "
        "(time.breakdown_s.host_offload). Not searched by optimise-parallelism."),
        examples=[["optimizer"]])
    fsdp_unit: ShardUnit | None = Field(default=None, description=(
        "What ZeRO-3/FSDP gathers at once (with the next one prefetched): layer (a "
        "transformer block: FSDP per-block wrapping) or matrix (each linear wrapped; "
        "DeepSpeed ZeRO-3 submodules; XLA). Default: matrix for deepspeed and maxtext, "
        "layer otherwise."))
    etp: Count | None = Field(default=None, description=(
        "Expert tensor-parallel size (MoE; Megatron-Core --expert-tensor-parallel-size), a "
        "divisor of tp. Default: tp when ep fits in dp*cp, else 1 (MoE parallel folding)."))
    moe_overlap: MoeOverlap = Field(default=MoeOverlap.MEGATRON, description=(
        "How the expert-parallel all-to-all overlaps compute: none (fully exposed), megatron "
        "(Megatron-Core's default partial overlap, a fitted exposed share; the default) or "
        "dualpipe (two micro-batches in flight, as DeepSeek-V3's DualPipe or Megatron "
        "--combined-1f1b: exposed only where it outlasts the compute)."))
    moe_dispatch_fp8: bool = Field(strict=True, default=False, description=(
        "Dispatch tokens to experts in FP8 (combine and backward stay bf16), as DeepSeek-V3."))
    moe_capacity_factor: float | None = Field(strict=True, default=None, ge=1.0, le=64.0,
                                              description=(
        "Token-dropping MoE: each expert's buffer is this multiple of its average share of "
        "routed tokens (GShard, Switch, MaxText capacity_factor); the padding costs compute "
        "and memory. Default: dropless (Megatron-Core)."), examples=[1.25])
    moe_max_nodes_per_token: Count | None = Field(default=None, description=(
        "Node-limited routing: a token's experts span at most this many nodes and it crosses "
        "the network once per node (DeepSeek-V3: 4). Default: unlimited."))
    dp_shard: Count | None = Field(default=None, description=(
        "Hybrid sharding: the data-parallel ranks one ZeRO/FSDP shard group spans, a divisor "
        "of dp. The optimizer state (and, with zero_stage 2 and 3, the gradients and weights) "
        "is sharded over dp_shard x cp ranks and replicated dp / dp_shard times; each step "
        "all-reduces the gradient shards across the replicas. PyTorch FSDP HYBRID_SHARD "
        "(HSDP), torchtitan data_parallel_shard_degree, MaxText ici_fsdp_parallelism with "
        "dcn_data_parallelism, DeepSpeed MiCS, Megatron --num-distributed-optimizer-"
        "instances. It holds more state per GPU than sharding over every rank, and keeps the "
        "per-micro-batch gathers inside the group. Needs zero_stage 1, 2 or 3. Default: dp "
        "(one shard group). Not searched by optimise-parallelism."), examples=[8])

    def auto_dimensions(self) -> frozenset[str]:
        """The fields given as \"auto\" (the optimiser chooses them)."""
        return frozenset(name for name in AUTO_FIELDS if getattr(self, name) == AUTO)

    def to_core(self, num_gpus: int) -> ParallelismPlan:
        dp = self.dp
        if dp is None:
            dp = max(1, num_gpus // (self.tp * self.pp * self.cp))
        return ParallelismPlan(
            tp=self.tp,
            pp=self.pp,
            dp=dp,
            cp=self.cp,
            ep=self.ep,
            vp=self.vp if isinstance(self.vp, int) else 1,
            micro_batch=self.micro_batch if isinstance(self.micro_batch, int) else 1,
            sequence_parallel=self.sequence_parallel,
            zero_stage=self.zero_stage,
            recompute=(self.recompute if isinstance(self.recompute, RecomputeMode)
                       else RecomputeMode.NONE),
            offload=frozenset(self.offload),
            fsdp_unit=self.fsdp_unit,
            etp=self.etp,
            moe_overlap=self.moe_overlap,
            moe_dispatch_fp8=self.moe_dispatch_fp8,
            moe_max_nodes_per_token=self.moe_max_nodes_per_token,
            moe_capacity_factor=self.moe_capacity_factor,
            dp_shard=self.dp_shard,
        )


FRAMEWORK_DESCRIPTION = (
    "The training stack: megatron (Megatron-LM, NeMo, Megatron-Bridge), torchtitan, fsdp "
    "(PyTorch FSDP trainers such as Composer/llm-foundry or HF accelerate), deepspeed, "
    "maxtext (JAX), or unknown. It sets the stack's fitted efficiency (and, for FSDP and "
    "DeepSpeed, how much ZeRO-3 traffic is exposed) and selects the uncertainty band "
    "(tokens_per_s_low/high, from out-of-sample residuals of published runs on that stack). "
    "unknown, the default, takes the stacks' geometric-mean efficiency and the widest band. "
    "The regime used is named in assumptions.")


TORCH_COMPILE_DESCRIPTION = (
    "Whether the step runs under torch.compile, on PyTorch stacks whose elementwise ops are "
    "otherwise separate kernels (torchtitan, fsdp): false (eager) makes about twice the "
    "elementwise passes over the activations (a fitted multiplier; eager steps of 1-3B models "
    "on an H200 measured 9-10% slower than compiled ones); true or null (the default) is the "
    "fused work these stacks were fitted with. No effect on megatron (fused kernels), maxtext "
    "(always compiled), deepspeed or unknown.")
ATTENTION_KERNEL_DESCRIPTION = (
    "The fused attention kernel the run uses: fa2 (FlashAttention-2, PyTorch SDPA's flash "
    "backend), fa3 (FlashAttention-3, Hopper) or cudnn (cuDNN fused attention: Transformer "
    "Engine, XLA on GPU, and PyTorch SDPA's default on Hopper and Blackwell since PyTorch "
    "2.11). It sets the attention throughput from a table of measured kernel rates per GPU "
    "generation. Default (null): the stack's usual kernel on that GPU: fa2 on Ampere for "
    "every stack; cudnn on Blackwell for every stack; on Hopper cudnn for megatron, "
    "torchtitan and maxtext and fa2 for fsdp and deepspeed. A kernel the table "
    "has no rate for on that GPU, and unknown stacks, use the fitted global attention "
    "efficiency.")


FRAMEWORK_VERSION_DESCRIPTION = (
    "The stack's version: a date YYYY-MM (or YYYY-MM-DD), or a release string such as "
    "'torch 2.4'. Echoed in assumptions. Where a stack's defaults come from runs this project "
    "measured on its own GPUs (torchtitan: the cuDNN attention default on Hopper and "
    "Blackwell and the torchtitan band, from PyTorch 2.11 steps), a date before 2026-01 or a "
    "PyTorch release before 2.10 takes the published runs' kernel (fa2) and the pooled band "
    "instead, with defaulted_input on training.attention_kernel; a release that cannot be "
    "placed in time does the same with outside_validated_range on training.framework_version; "
    "not given, the local defaults hold, with defaulted_input on training.framework_version. "
    "No effect on other stacks.")


LOSS_KERNEL_DESCRIPTION = (
    "How the cross-entropy holds the logits of a micro-batch (memory only; docs/model.md, "
    "\"Fine-tuning\"): standard (the logits upcast to fp32 and saved with their "
    "log-softmax, 10 bytes per logit: PyTorch F.cross_entropy on logits.float(), as Hugging "
    "Face transformers and torchtitan), chunked (torchtune CEWithChunkedOutputLoss: the bf16 "
    "logits kept and one chunk of 8 upcast at a time, 3 bytes per logit) or fused (Liger "
    "Kernel's fused linear cross-entropy, Cut Cross-Entropy: the logits never materialised). "
    "Not given: the stack's own (the figures the calibration was fitted with), with "
    "defaulted_input on training.loss_kernel for full_finetune, lora and qlora.")


class TrainingIn(RequestModel):
    seq_len: int = Field(
        strict=True, ge=1, le=10_000_000, description="Tokens per sequence.", examples=[8192]
    )
    global_batch_seqs: int = Field(
        strict=True,
        ge=1,
        le=100_000_000,
        description="Sequences per optimizer step.",
        examples=[128],
    )
    tokens: float | None = Field(
        default=None, strict=True, gt=0, le=1e18, description=(
            "Tokens to train on. Give either tokens, or examples with mean_example_tokens."),
        examples=[15e12]
    )
    method: TrainingMethod = Field(default=TrainingMethod.PRETRAIN, description=(
        "pretrain (the default) or full_finetune: every weight trained (the same computation; "
        "a fine-tune runs on fewer tokens); lora or qlora: the base frozen, low-rank "
        "adapters trained (docs/model.md, \"Fine-tuning\"); rl: rollouts from a serving "
        "engine and a full-weight policy update on them, described by rl (docs/model.md, "
        "\"RL post-training\")."), examples=["qlora"])
    rl: RlIn | None = Field(default=None, description=(
        "The rollouts of method rl (required there, a 422 otherwise). tokens and examples "
        "are then not given: the job trains on steps x prompts x samples x (prompt + "
        "response) tokens, packed into seq_len sequences (at least prompt + response), "
        "global_batch_seqs per optimizer update."),
        examples=[{"steps": 500, "prompts_per_step": 128, "samples_per_prompt": 8,
                   "prompt_tokens": 512, "response_tokens": 2048}])
    lora: LoraIn | None = Field(default=None, description=(
        "The adapters of method lora or qlora (not given: LoraIn's defaults). A 422 when "
        "method is pretrain or full_finetune."),
        examples=[{"rank": 16, "target_modules": ["q", "k", "v", "o", "gate", "up", "down"]}])
    examples: int | None = Field(default=None, strict=True, ge=1, le=10**12, description=(
        "Dataset sizing instead of tokens: the number of training examples (sequences of "
        "mean_example_tokens each), with packing."), examples=[100_000])
    mean_example_tokens: float | None = Field(default=None, strict=True, gt=0, le=10_000_000,
                                              description="Mean tokens per example.",
                                              examples=[600])
    packing: bool = Field(strict=True, default=True, description=(
        "Examples packed back to back into full sequences (tokens = examples x "
        "mean_example_tokens); false: each example padded to seq_len (tokens processed = "
        "examples x seq_len, the padding named in assumptions)."))
    precision: Precision = Field(default=Precision.BF16, description="Matmul precision.")
    flash_attention: bool = Field(strict=True, default=True, description="Fused attention kernel.")
    framework: Framework = Field(default=Framework.UNKNOWN, description=FRAMEWORK_DESCRIPTION)
    master_weights: StatePrecision = Field(default=StatePrecision.FP32, description=(
        "fp32: mixed precision with fp32 master weights (the default); bf16 or fp16: the "
        "16-bit weights are updated directly and the optimizer moments are 16-bit too "
        "(MaxText weight_dtype bfloat16)."))
    gradient_precision: StatePrecision | None = Field(default=None, description=(
        "The gradient buffer and its reduction. Default: the stack's (fp32 for megatron, "
        "fsdp, torchtitan and unknown; 16-bit for deepspeed; the weights' precision for "
        "maxtext). NeMo's performance recipes reduce in bf16."))
    optimizer: Optimizer = Field(default=Optimizer.ADAMW, description=(
        "adamw (two moments per parameter), adamw_8bit (bitsandbytes 8-bit AdamW or "
        "PagedAdamW8bit: both moments block-wise quantised, about 2 bytes per trainable "
        "parameter instead of 8; Dettmers et al. 2022) or sgd (no optimizer state)."))
    loss_kernel: LossKernel | None = Field(default=None, description=LOSS_KERNEL_DESCRIPTION,
                                           examples=["chunked"])
    fp8_params: bool = Field(strict=True, default=False, description=(
        "FP8 working weights (Transformer Engine fp8_model_init, Megatron --fp8-param-gather): "
        "1 byte per parameter on the GPU and in the all-gather. Needs precision fp8."))
    attention_kernel: AttentionKernel | None = Field(default=None, description=(
        ATTENTION_KERNEL_DESCRIPTION))
    torch_compile: bool | None = Field(strict=True, default=None, description=(
        TORCH_COMPILE_DESCRIPTION))
    framework_version: Annotated[str, TextRule(max_length=64, min_length=1)] | None = Field(
        default=None, description=FRAMEWORK_VERSION_DESCRIPTION, examples=["2024-12"])
    gradient_compression: GradientCompressionIn | None = Field(default=None, description=(
        "Data-parallel gradient compression (docs/model.md, \"Fabric\"). Not given: the "
        "gradients travel as the stack sends them."),
        examples=[{"method": "powersgd", "rank": 4}])

    def to_core(self) -> TrainingSpec:
        rl = None if self.rl is None else self.rl.to_core()
        if self.method == TrainingMethod.RL and rl is None:
            raise InvalidSpecError("training.method rl needs training.rl (steps, prompts, "
                                   "samples, prompt and response tokens)", field="training.rl")
        if rl is not None and self.tokens is not None:
            raise InvalidSpecError("training.tokens cannot be given with training.rl: an RL "
                                   "job's tokens are its rollouts (steps x prompts x samples "
                                   "x (prompt + response))", field="training.tokens")
        if rl is not None and self.examples is None:
            tokens = rl.total_tokens
        elif self.examples is not None:
            if self.tokens is not None:
                raise InvalidSpecError("give either training.tokens or training.examples, "
                                       "not both", field="training.examples")
            if self.mean_example_tokens is None:
                raise InvalidSpecError("training.examples needs training.mean_example_tokens",
                                       field="training.mean_example_tokens")
            tokens = dataset_tokens(examples=self.examples,
                                    mean_example_tokens=self.mean_example_tokens,
                                    seq_len=self.seq_len, packing=self.packing)
        elif self.tokens is None:
            raise InvalidSpecError("training needs tokens, or examples with "
                                   "mean_example_tokens", field="training.tokens")
        else:
            tokens = self.tokens
        return TrainingSpec(
            seq_len=self.seq_len,
            global_batch_seqs=self.global_batch_seqs,
            tokens=tokens,
            method=self.method,
            lora=None if self.lora is None else self.lora.to_core(),
            rl=rl,
            examples=self.examples,
            mean_example_tokens=self.mean_example_tokens,
            packing=self.packing,
            precision=self.precision,
            flash_attention=self.flash_attention,
            framework=self.framework,
            master_weights=self.master_weights,
            gradient_precision=self.gradient_precision,
            optimizer=self.optimizer,
            loss_kernel=self.loss_kernel,
            fp8_params=self.fp8_params,
            attention_kernel=self.attention_kernel,
            torch_compile=self.torch_compile,
            framework_version=self.framework_version,
            gradient_compression=(None if self.gradient_compression is None
                                  else self.gradient_compression.to_core()),
        )


class EnergyIn(RequestModel):
    pue: float = Field(
        strict=True, default=1.2, ge=1.0, le=5.0, description="Power usage effectiveness."
    )
    grid_gco2e_per_kwh: float = Field(
        strict=True,
        default=480.0,
        ge=0.0,
        le=2000.0,
        description="Grid carbon intensity, g CO2e per kWh.",
    )
    gpu_power_fraction: float = Field(
        strict=True,
        default=0.8,
        gt=0.0,
        le=1.0,
        description="Average GPU power as a fraction of TDP.",
    )
    host_power_fraction: float = Field(
        strict=True,
        default=0.4,
        ge=0.0,
        le=5.0,
        description="Host power per GPU as a fraction of GPU TDP.",
    )

    def to_core(self) -> EnergySpec:
        return EnergySpec(
            pue=self.pue,
            grid_gco2e_per_kwh=self.grid_gco2e_per_kwh,
            gpu_power_fraction=self.gpu_power_fraction,
            host_power_fraction=self.host_power_fraction,
        )


ESTIMATE_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama3.1-70b"},
    "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 64, "gpus_per_node": 8},
    "parallelism": {
        "tp": 4,
        "pp": 4,
        "dp": 2,
        "cp": 2,
        "ep": 1,
        "vp": 5,
        "micro_batch": 1,
        "sequence_parallel": True,
        "zero_stage": 1,
        "recompute": "none",
    },
    "training": {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 15e12, "precision": "bf16",
                 "framework": "megatron"},
}


class EstimateRequest(RequestModel):
    """A training workload on one cluster with one parallel layout."""

    model_config = RequestModel.model_config | {
        "json_schema_extra": {"examples": [ESTIMATE_EXAMPLE]}
    }

    model: ModelIn
    cluster: ClusterIn
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn)
    training: TrainingIn
    energy: EnergyIn = Field(default_factory=EnergyIn)
    calibration_id: CalibrationIdField = None


WARNING_DETAILS_DESCRIPTION = (
    "Every warning as data, additive to the sentences of warnings: code (" + ", ".join(
        WARNING_CODES) + "), field (the request field or model dimension concerned, or "
    "null) and message. defaulted_input names an input the request left to a default "
    "(model.vocab_size, training.framework, training.framework_version, "
    "training.attention_kernel, training.torch_compile, training.loss_kernel, "
    "parallelism.tp, parallelism.pp, "
    "parallelism.micro_batch, parallelism.recompute, parallelism.vp, "
    "parallelism.sequence_parallel, or a parallelism field given as \"auto\"); "
    "outside_validated_range names a dimension outside the region the calibration's published "
    "runs cover for the stack (cluster.num_gpus, model.hidden_size, training.seq_len, "
    "cluster.accelerator, model.num_experts for MoE, training.framework, "
    "training.framework_version; docs/validation.md, \"The envelope\"; and "
    "training.gradient_compression, whose effect on the steps to converge is not modelled; "
    "cluster.fabric, when loss, oversubscription, a changed latency or a protocol whose "
    "bandwidth is a judgement (efa, tcpx, ethernet_tcp, ici) enters the figures unchecked); "
    "uncalibrated_accelerator an accelerator without published runs. Every sentence of "
    "warnings has an entry (other when none of the codes fits).")


class WarningDetailOut(BaseModel):
    """One coded warning."""

    code: str = Field(examples=["outside_validated_range"])
    field: str | None = Field(examples=["cluster.num_gpus"])
    message: str


def details_out(details: Sequence[WarningDetail],
                warnings: Sequence[str] = ()) -> list[WarningDetailOut]:
    """``details`` as the answer shows them, then the coded form of each sentence of
    ``warnings`` that none of them carries (warnings the service added after the estimate:
    the wall-clock and cost limits)."""
    said = {d.message for d in details}
    every = [*details, *(detail_of(w) for w in warnings if w not in said)]
    return [WarningDetailOut(code=d.code, field=d.field, message=d.message) for d in every]


def training_defaults(training: TrainingIn | Any) -> list[WarningDetail]:
    """``defaulted_input`` for the training fields an estimate or plan request left out that
    change the answer: the stack (unknown: the stacks' mean efficiency and the pooled band)
    and, on PyTorch stacks that may run eager, torch.compile."""
    given = training.model_fields_set
    out: list[WarningDetail] = []
    if "framework" not in given:
        out.append(WarningDetail(
            DEFAULTED_INPUT, "training.framework",
            "training.framework not given: unknown, the stacks' geometric-mean efficiency and "
            "the pooled band, the widest"))
    if training.torch_compile is None and training.framework in EAGER_ELEMENTWISE_STACKS:
        out.append(WarningDetail(
            DEFAULTED_INPUT, "training.torch_compile",
            f"training.torch_compile not given: a compiled step assumed on "
            f"{training.framework.value}, as most of its published runs (eager makes about "
            "twice the elementwise passes)"))
    return out


LAYOUT_DEFAULTS = ("tp", "pp", "micro_batch", "recompute", "vp", "sequence_parallel")
"""The layout fields whose default is an assumption about the user's run (``dp`` is derived
from the others, the rest have one value nearly every run uses)."""


def parallelism_defaults(parallelism: ParallelismIn, plan: ParallelismPlan,
                         ) -> list[WarningDetail]:
    """``defaulted_input`` for each layout field left out (vp only with pipeline stages,
    sequence_parallel only with TP) and each one given as \"auto\" (the optimiser's fastest
    choice: optimistic by construction), with the value used."""
    given = parallelism.model_fields_set
    autos = parallelism.auto_dimensions()
    applies = {"vp": plan.pp > 1, "sequence_parallel": plan.tp > 1}
    out: list[WarningDetail] = []
    for name in LAYOUT_DEFAULTS:
        value = getattr(plan, name)
        shown = getattr(value, "value", value)
        if name in autos:
            out.append(WarningDetail(
                DEFAULTED_INPUT, f"parallelism.{name}",
                f"parallelism.{name} \"auto\": {shown}, the fastest that fits with the other "
                "fields as given (the optimiser's best, so optimistic by construction)"))
        elif name not in given and applies.get(name, True):
            out.append(WarningDetail(DEFAULTED_INPUT, f"parallelism.{name}",
                                     f"parallelism.{name} not given: {shown} assumed"))
    return out


def estimate_defaults(request: EstimateRequest | Any, plan: ParallelismPlan,
                      ) -> list[WarningDetail]:
    """Every ``defaulted_input`` of an estimate request (``model.vocab_size`` comes from the
    core estimate)."""
    return [*training_defaults(request.training), *parallelism_defaults(request.parallelism,
                                                                        plan)]


def with_details(result: Estimate, extra: Sequence[WarningDetail]) -> Estimate:
    """``result`` with ``extra`` coded warnings after its own."""
    if not extra:
        return result
    return dataclasses.replace(result, warning_details=(*result.warning_details, *extra))


class ParamsOut(BaseModel):
    total: int = Field(description="All parameters.")
    active: int = Field(description="Parameters used per token (MoE: top-k experts).")
    embedding: int
    per_layer_attention: int
    trainable: int = Field(description=(
        "Parameters that receive gradients: total, or the LoRA adapters' "
        "(training.method lora or qlora)."))


class FlopsOut(BaseModel):
    model_per_token: float = Field(description="Model FLOPs per trained token (fwd + bwd).")
    hardware_per_token: float = Field(description="Model FLOPs plus recomputation.")
    total_training: float = Field(description="model_per_token x tokens.")
    attention_convention: str


class MemoryBreakdownOut(BaseModel):
    """Bytes per GPU at the moment of the peak. On PyTorch FSDP stacks (fsdp, torchtitan) with
    one micro-batch per step and no pipeline, gradients and activations never peak together:
    the moment is the backward's start (gradients near 0) or its end (activations: one
    layer's working set), as assumptions says."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float = Field(description=(
        "CUDA context, communication buffers and workspaces, the allocator's fragmentation "
        "share, ZeRO-3 gather buffers and, on PyTorch stacks, one more of the step's largest "
        "block (the caching allocator needs it contiguous)."))


class MemoryOut(BaseModel):
    peak_bytes_per_gpu: float
    capacity_bytes_per_gpu: float
    headroom_bytes: float = Field(description=(
        "capacity_bytes_per_gpu - peak_bytes_per_gpu: what is left on the most loaded GPU "
        "(negative: by how much it overflows). The peak is what must fit; its fitted terms "
        "(fragmentation, overhead, selective recomputation) are fitted so that all 239 "
        "layouts that ran fit and the layouts measured to run out of memory are at least at "
        "the edge. Within 3% of the capacity, where measured layouts both ran and failed, "
        "fits carries the warning 'fits at the edge'."))
    fits: bool
    reserved_bytes_per_gpu: float = Field(default=0.0, description=(
        "What PyTorch's caching allocator would reserve at the peak, the figure tools print "
        "as peak (reserved) memory: the peak without the largest-block headroom plus a "
        "fitted share of cached blocks it can release (median error 6.4% on 75 measured "
        "peaks). Equal to the peak for JAX/XLA. fits compares peak_bytes_per_gpu, not this."))
    allocated_bytes_per_gpu: float = Field(default=0.0, description=(
        "The tensors alone at the peak, the figure PyTorch prints as max allocated (or peak "
        "active) memory: the peak without the CUDA context, NCCL buffers and workspaces, the "
        "allocator's fragmentation share and the largest-block headroom; on JAX/XLA the peak "
        "without the runtime's reserve. Compare a published allocated peak with this, a "
        "reserved one with reserved_bytes_per_gpu. fits compares peak_bytes_per_gpu."))
    breakdown_bytes: MemoryBreakdownOut


class TimeBreakdownOut(BaseModel):
    compute: float
    tp_comm: float
    cp_comm: float
    ep_comm: float
    pp_comm: float
    pp_bubble: float
    dp_comm_exposed: float
    optimizer: float
    host_offload: float = Field(default=0.0, description=(
        "Exposed host-link and CPU time of parallelism.offload (0 without offload)."))
    fsdp_copy: float = Field(default=0.0, description=(
        "FSDP2's copies of parameters and gradients around its collectives, every "
        "micro-batch, once per step with pipeline stages (training.framework torchtitan with "
        "zero_stage 3; 0 otherwise)."))
    step_overhead: float = Field(default=0.0, description=(
        "Fixed time per optimizer step that does not scale with the work (launches, "
        "gradient-norm and loss reductions, logging): a fitted constant."))


class TimeOut(BaseModel):
    step_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s_low: float = Field(description=(
        "80% band, low end: out-of-sample residuals of published runs in the request's regime "
        "(training.framework, MoE, uncalibrated accelerator), named in assumptions."))
    tokens_per_s_high: float = Field(description="80% band, high end.")
    mfu_fraction: float
    hfu_fraction: float
    train_s: float
    gpu_hours: float
    num_steps: float
    num_micro_batches: int
    breakdown_s: TimeBreakdownOut


class EnergyOut(BaseModel):
    kwh: float
    co2e_kg: float
    average_power_w_per_gpu: float = Field(description="GPU plus host share, times PUE.")
    pue: float
    grid_gco2e_per_kwh: float


class ResolvedOut(BaseModel):
    """Inputs after defaults were applied."""

    model: str
    accelerator: str
    num_gpus: int
    gpus_per_node: int
    parallelism: dict[str, int | bool | str]


def plan_dict(plan: ParallelismPlan) -> dict[str, int | bool | str]:
    """A plan as JSON: every dimension, recompute by name; ``dp_shard`` only where the plan
    shards inside groups (hybrid sharding)."""
    out: dict[str, int | bool | str] = {
        "tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "cp": plan.cp, "ep": plan.ep,
        "vp": plan.vp, "micro_batch": plan.micro_batch,
        "sequence_parallel": plan.sequence_parallel, "zero_stage": plan.zero_stage,
        "recompute": plan.recompute.value}
    if plan.dp_shard is not None and plan.dp_replicas > 1:
        out["dp_shard"] = plan.dp_shard
    return out


class RlPhasesOut(BaseModel):
    """Seconds per RL step, by phase (docs/model.md, "RL post-training")."""

    generation: float = Field(description=(
        "Rollouts from the serving model at the batch they make (prefill and decode)."))
    old_log_prob: float = Field(description="The policy's forward pass over the rollouts.")
    reference: float = Field(description="The reference policy's forward pass (0 without).")
    reward: float = Field(description="The reward model's forward pass (0: rule-based).")
    policy_update: float = Field(description="The training step(s) on the rollouts' tokens.")
    weight_sync: float = Field(description=(
        "Resharding the new weights into the engine (colocated) or broadcasting them to it "
        "(disaggregated)."))
    offload: float = Field(description=(
        "Training state to host and back around the rollout (colocated, when that is "
        "faster than keeping it; 0 otherwise)."))


class RlPlacementOut(BaseModel):
    placement: RlPlacement
    step_s: float = Field(description=(
        "colocated: the phases' sum; disaggregated: max(generation, forward passes + "
        "update) + weight_sync."))
    phases_s: RlPhasesOut
    training_gpus: int
    rollout_gpus: int
    rollout_tp: int = Field(description="Tensor parallelism of each rollout replica.")
    rollout_replicas: int
    rollout_batch: float = Field(description="Sequences decoding together per replica.")
    rollout_waves: float = Field(description="Batches of rollout_batch per replica per step.")
    training_state_offloaded: bool
    training_peak_bytes_per_gpu: float = Field(description=(
        "During the update: its peak plus the reference and reward weights."))
    rollout_memory_bytes_per_gpu: float = Field(description=(
        "During generation: resident training state plus the engine's share."))
    fits: bool
    train_s: float = Field(description="steps x step_s.")
    gpu_hours: float


class RlOut(BaseModel):
    """Method rl: both placements phase by phase; the time block is the placement asked
    for."""

    placement: RlPlacement
    faster_placement: RlPlacement
    rollouts_per_step: int
    tokens_per_step: int = Field(description="Rollouts x (prompt + response) tokens.")
    response_tokens_per_step: int
    updates_per_step: float = Field(description=(
        "Optimizer updates per RL step: tokens_per_step / (global_batch_seqs x seq_len)."))
    colocated: RlPlacementOut
    disaggregated: RlPlacementOut | None = Field(description=(
        "null where the layout's data parallelism cannot be split."))


def _placement_out(figures: Any, steps: int, num_gpus: int) -> dict[str, Any]:
    phases = figures.phases
    train_s = steps * figures.step_s
    return {
        "placement": figures.placement, "step_s": figures.step_s,
        "phases_s": {"generation": phases.generation_s, "old_log_prob": phases.old_log_prob_s,
                     "reference": phases.reference_s, "reward": phases.reward_s,
                     "policy_update": phases.policy_update_s,
                     "weight_sync": phases.weight_sync_s, "offload": phases.offload_s},
        "training_gpus": figures.training_gpus, "rollout_gpus": figures.rollout_gpus,
        "rollout_tp": figures.rollout_tp, "rollout_replicas": figures.rollout_replicas,
        "rollout_batch": figures.rollout_batch, "rollout_waves": figures.rollout_waves,
        "training_state_offloaded": figures.training_state_offloaded,
        "training_peak_bytes_per_gpu": figures.training_peak_bytes,
        "rollout_memory_bytes_per_gpu": figures.rollout_memory_bytes,
        "fits": figures.fits, "train_s": train_s,
        "gpu_hours": train_s * num_gpus / 3600.0}


def rl_out(result: Estimate, steps: int, num_gpus: int) -> dict[str, Any] | None:
    """The ``rl`` block of an estimate (None unless method rl)."""
    rl = result.rl
    if rl is None:
        return None
    return {
        "placement": rl.placement, "faster_placement": rl.faster_placement,
        "rollouts_per_step": rl.rollouts_per_step, "tokens_per_step": rl.tokens_per_step,
        "response_tokens_per_step": rl.response_tokens_per_step,
        "updates_per_step": rl.updates_per_step,
        "colocated": _placement_out(rl.colocated, steps, num_gpus),
        "disaggregated": None if rl.disaggregated is None
        else _placement_out(rl.disaggregated, steps, num_gpus)}


class EstimateResponse(BaseModel):
    params: ParamsOut
    flops: FlopsOut
    memory: MemoryOut
    time: TimeOut
    energy: EnergyOut
    resolved: ResolvedOut
    warnings: list[str]
    assumptions: list[str]
    calibration_version: str
    warning_details: list[WarningDetailOut] = Field(
        default_factory=list, description=WARNING_DETAILS_DESCRIPTION)
    rl: RlOut | None = Field(default=None, description=(
        "Method rl only: the RL step phase by phase in both placements, and which is faster "
        "(time then describes the RL job: steps x the placement's step)."))

    @classmethod
    def from_core(
        cls,
        result: Estimate,
        *,
        model: ModelSpec,
        cluster: ClusterSpec,
        plan: ParallelismPlan,
        energy: EnergySpec,
    ) -> EstimateResponse:
        """The answer, validated once as a whole (pydantic-core builds every nested block in
        one call: constructing the ten blocks one by one took 2.5x as long, issue 38)."""
        mem, thr, step = result.memory, result.throughput, result.throughput.step
        return cls.model_validate({
            "params": {
                "total": result.params.total,
                "active": result.params.active,
                "embedding": result.params.embedding,
                "per_layer_attention": result.params.attention_per_layer,
                "trainable": result.trainable_params or result.params.total,
            },
            "flops": {
                "model_per_token": result.flops.model_training_flops,
                "hardware_per_token": result.flops.hardware_training_flops(plan.recompute),
                "total_training": result.total_training_flops,
                "attention_convention": "full (non-causal) attention, as PaLM and Megatron-LM",
            },
            "memory": {
                "reserved_bytes_per_gpu": mem.reserved_bytes,
                "allocated_bytes_per_gpu": mem.allocated_bytes,
                "peak_bytes_per_gpu": mem.peak_bytes,
                "capacity_bytes_per_gpu": mem.capacity_bytes,
                "headroom_bytes": mem.capacity_bytes - mem.peak_bytes,
                "fits": mem.fits,
                "breakdown_bytes": {
                    "weights": mem.weights_bytes,
                    "gradients": mem.gradients_bytes,
                    "optimizer": mem.optimizer_bytes,
                    "activations": mem.activations_bytes,
                    "other": mem.other_bytes,
                },
            },
            "time": {
                "step_s": step.step_s,
                "tokens_per_s": thr.tokens_per_s,
                "tokens_per_s_per_gpu": thr.tokens_per_s_per_gpu,
                "tokens_per_s_low": thr.tokens_per_s_low,
                "tokens_per_s_high": thr.tokens_per_s_high,
                "mfu_fraction": thr.mfu_fraction,
                "hfu_fraction": thr.hfu_fraction,
                "train_s": thr.train_s,
                "gpu_hours": thr.gpu_hours,
                "num_steps": thr.num_steps,
                "num_micro_batches": result.num_micro_batches,
                "breakdown_s": {
                    "compute": step.compute_s,
                    "tp_comm": step.tp_comm_s,
                    "cp_comm": step.cp_comm_s,
                    "ep_comm": step.ep_comm_s,
                    "pp_comm": step.pp_comm_s,
                    "pp_bubble": step.pp_bubble_s,
                    "dp_comm_exposed": step.dp_comm_exposed_s,
                    "optimizer": step.optimizer_s,
                    "host_offload": step.host_offload_s,
                    "fsdp_copy": step.fsdp_copy_s,
                    "step_overhead": step.overhead_s,
                },
            },
            "energy": {
                "kwh": result.energy.kwh,
                "co2e_kg": result.energy.co2e_kg,
                "average_power_w_per_gpu": result.energy.average_power_w_per_gpu,
                "pue": energy.pue,
                "grid_gco2e_per_kwh": energy.grid_gco2e_per_kwh,
            },
            "resolved": {
                "model": model.name,
                "accelerator": cluster.accelerator.id,
                "num_gpus": cluster.num_gpus,
                "gpus_per_node": cluster.gpus_per_node,
                "parallelism": plan_dict(plan),
            },
            "warnings": list(result.warnings),
            "assumptions": list(result.assumptions),
            "calibration_version": result.calibration_version,
            "warning_details": details_out(result.warning_details, result.warnings),
            "rl": rl_out(result, int(result.throughput.num_steps), cluster.num_gpus),
        })
