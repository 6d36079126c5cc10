"""Published model architectures, as data.

Each preset names the source of its architecture (paper or public config) and the published
parameter count it is checked against (``tests/core/test_presets.py``, tolerance 1%).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from service.core.errors import InvalidSpecError
from service.core.specs import MlaSpec, MlpKind, ModelSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    model: ModelSpec
    published_params: float
    """Published total parameter count, from ``source``."""
    published_active_params: float | None
    source: str


def _p(
    name: str,
    published: float,
    source: str,
    *,
    active: float | None = None,
    **arch: object,
) -> Preset:
    return Preset(
        model=ModelSpec(name=name, **arch),  # type: ignore[arg-type]
        published_params=published,
        published_active_params=active,
        source=source,
    )


_PRESETS: tuple[Preset, ...] = (
    _p(
        "gpt3-175b", 175.0e9,
        "Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads); GPT-2 vocabulary "
        "50257, tied embeddings, 2048 learned positions, biases",
        num_layers=96, hidden_size=12288, num_heads=96, num_kv_heads=96,
        ffn_hidden_size=49152, vocab_size=50257, mlp=MlpKind.GELU, tied_embeddings=True,
        linear_bias=True, learned_position_embeddings=2048,
    ),
    _p(
        "llama2-7b", 6.74e9,
        "Touvron et al. 2023 (Llama 2), Table 1 and the public config (meta-llama/Llama-2-7b-hf)",
        num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=32,
        ffn_hidden_size=11008, vocab_size=32000,
    ),
    _p(
        "llama2-13b", 13.02e9,
        "Touvron et al. 2023 (Llama 2) and the public config (meta-llama/Llama-2-13b-hf)",
        num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40,
        ffn_hidden_size=13824, vocab_size=32000,
    ),
    _p(
        "llama1-65b", 65.2e9,
        "Touvron et al. 2023 (LLaMA, arXiv 2302.13971), Table 2 (65.2B: dimension 8192, 64 "
        "heads, 80 layers); FFN 22016 and vocabulary 32000 from the public config "
        "(huggyllama/llama-65b); the base of QLoRA's 65B Guanaco (Dettmers et al. 2023)",
        num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=64,
        ffn_hidden_size=22016, vocab_size=32000,
    ),
    _p(
        "llama2-70b", 68.98e9,
        "Touvron et al. 2023 (Llama 2; GQA with 8 KV heads) and the public config",
        num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
        ffn_hidden_size=28672, vocab_size=32000,
    ),
    _p(
        "llama3.1-8b", 8.03e9,
        "meta-llama/Llama-3.1-8B config.json (Hugging Face)",
        num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
        ffn_hidden_size=14336, vocab_size=128256,
    ),
    _p(
        "llama3.1-70b", 70.55e9,
        "meta-llama/Llama-3.1-70B config.json (Hugging Face)",
        num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
        ffn_hidden_size=28672, vocab_size=128256,
    ),
    _p(
        "llama3.1-405b", 405.85e9,
        "meta-llama/Llama-3.1-405B config.json (Hugging Face)",
        num_layers=126, hidden_size=16384, num_heads=128, num_kv_heads=8,
        ffn_hidden_size=53248, vocab_size=128256,
    ),
    _p(
        "mixtral-8x7b", 46.7e9,
        "Jiang et al. 2024 (Mixtral of Experts), section 2: 47B total, 13B active; public config",
        active=12.9e9,
        num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
        ffn_hidden_size=14336, vocab_size=32000, num_experts=8, experts_per_token=2,
    ),
    _p(
        "mixtral-8x22b", 140.6e9,
        "Mistral AI, Mixtral 8x22B announcement (141B total, 39B active); public config",
        active=39.2e9,
        num_layers=56, hidden_size=6144, num_heads=48, num_kv_heads=8,
        ffn_hidden_size=16384, vocab_size=32768, num_experts=8, experts_per_token=2,
    ),
    _p(
        "deepseek-v3", 671.0e9,
        "DeepSeek-AI 2024 (arXiv 2412.19437), section 4.2: 671B total, 37B active, MLA, 1 shared "
        "+ 256 routed experts (top-8), first 3 layers dense; multi-token-prediction module "
        "excluded",
        active=37.0e9,
        num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128,
        ffn_hidden_size=18432, vocab_size=129280, num_experts=256, experts_per_token=8,
        num_shared_experts=1, moe_ffn_hidden_size=2048, num_dense_layers=3,
        mla=MlaSpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                    qk_rope_head_dim=64, v_head_dim=128),
    ),
    _p(
        "nemotron4-15b", 15.7e9,
        "Parmar et al. 2024 (Nemotron-4 15B), Table 1: 3.2B embedding + 12.5B non-embedding",
        num_layers=32, hidden_size=6144, num_heads=48, num_kv_heads=8,
        ffn_hidden_size=24576, vocab_size=256000, mlp=MlpKind.SQUARED_RELU,
    ),
    _p(
        "nemotron4-340b", 341.0e9,
        "NVIDIA 2024 (Nemotron-4 340B Technical Report), Table 1: 9.4B embedding + 331.6B "
        "non-embedding",
        num_layers=96, hidden_size=18432, num_heads=96, num_kv_heads=8,
        ffn_hidden_size=73728, vocab_size=256000, mlp=MlpKind.SQUARED_RELU,
    ),
    _p(
        "qwen3-235b-a22b", 235.0e9,
        "Qwen Team 2025 (Qwen3 Technical Report), Table 2: 235B total, 22B active; public config",
        active=22.0e9,
        num_layers=94, hidden_size=4096, num_heads=64, num_kv_heads=4, head_dim=128,
        ffn_hidden_size=12288, vocab_size=151936, num_experts=128, experts_per_token=8,
        moe_ffn_hidden_size=1536,
    ),
    _p(
        "gpt-oss-120b", 116.83e9,
        "OpenAI 2025, gpt-oss-120b model card, Table 1: 116.83B total, 5.13B active; public "
        "config (alternating 128-token sliding-window layers modelled as full attention)",
        active=5.13e9,
        num_layers=36, hidden_size=2880, num_heads=64, num_kv_heads=8, head_dim=64,
        ffn_hidden_size=2880, vocab_size=201088, num_experts=128, experts_per_token=4,
        linear_bias=True,
    ),
)

PRESETS: Mapping[str, Preset] = MappingProxyType({preset.model.name: preset for preset in _PRESETS})


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises ``InvalidSpecError`` listing the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise InvalidSpecError(
            f"not a model preset; known presets: {', '.join(sorted(PRESETS))}",
            field="model.preset",
        ) from None


@dataclass(frozen=True, slots=True)
class VocabDefault:
    """The vocabulary assumed for a model given without one, and why."""

    size: int
    reason: str


GPT2_VOCAB = VocabDefault(50_257, "GPT-2's BPE vocabulary (Radford et al. 2019, section 2.2), "
                                  "kept by GPT-3 and Megatron-LM's GPT models, which pad it, "
                                  "e.g. to 51,200 in Narayanan et al. 2021")
LLAMA2_VOCAB = VocabDefault(32_000, "Llama 2's tokenizer (Touvron et al. 2023, arXiv 2307.09288, "
                                    "section 2.1: 32k tokens, as Llama 1)")
LLAMA3_VOCAB = VocabDefault(128_256, "Llama 3's tokenizer (meta-llama/Llama-3.1-8B "
                                     "config.json vocab_size 128,256: 128K tokens with the "
                                     "special tokens, tokenizer.json)")
_VOCAB_BY_NAME: tuple[tuple[tuple[str, ...], VocabDefault], ...] = (
    (("llama3", "llama-3", "llama 3"), LLAMA3_VOCAB),
    (("llama2", "llama-2", "llama 2", "llama1", "llama-1", "llama 1"), LLAMA2_VOCAB),
    (("gpt", "megatron"), GPT2_VOCAB),
)


def default_vocab(name: str, mlp: MlpKind, num_heads: int, num_kv_heads: int) -> VocabDefault:
    """The vocabulary of the model's family or era (issue 37: Llama 3's 128,256 used to stand
    in for every model, 2021 GPT models included): by the model's name where it names a
    family (llama3, llama2, gpt, megatron), else by its architecture: a GELU MLP is the GPT
    family's (GPT-2, GPT-3, Megatron-GPT: 50,257), a SwiGLU MLP with as many KV heads as
    query heads (no GQA) is the Llama 1/2 era's (32,000), anything else Llama 3's (128,256:
    the largest common open vocabulary, so that the logits are not understated)."""
    lowered = name.lower()
    for words, vocab in _VOCAB_BY_NAME:
        # gpt-oss has its own o200k-based vocabulary (201,088): not GPT-2's.
        if "gpt-oss" not in lowered and any(word in lowered for word in words):
            return vocab
    if mlp == MlpKind.GELU:
        return GPT2_VOCAB
    if mlp == MlpKind.SWIGLU and num_kv_heads == num_heads:
        return LLAMA2_VOCAB
    return LLAMA3_VOCAB
