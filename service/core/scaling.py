"""Compute-optimal model sizes (issue 39, item 7): the tokens-per-parameter rule and a family of
generated Llama-style dense architectures, ordered by parameter count, that the budget plan's
``largest_model`` objective searches instead of climbing the preset ladder.

Pure: no state, no I/O; every constant names its source.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.params import count_parameters
from service.core.presets import default_vocab
from service.core.specs import MlpKind, ModelSpec

CHINCHILLA_TOKENS_PER_PARAM = 20.0
"""Compute-optimal training tokens per parameter: Hoffmann et al. 2022 ("Training
Compute-Optimal Large Language Models", arXiv 2203.15556), section 3 and Table 3: parameters
and tokens should grow in equal proportion, about 20 tokens per parameter (70B on 1.4T)."""

HEAD_DIM = 128
"""Per-head width: every Llama 2 and Llama 3 size, 7B to 405B (Touvron et al. 2023, Dubey et
al. 2024 Table 3: hidden / heads = 128)."""

HIDDEN_MULTIPLE = 1024
"""Hidden sizes are multiples of 1,024, so that heads = hidden / 128 is a multiple of 8 and
tensor parallelism 1, 2, 4 or 8 divides them (the search needs tp | heads); every Llama 2/3
hidden size (4,096, 5,120, 8,192, 16,384) is one."""

NUM_KV_HEADS = 8
"""Grouped-query attention with 8 KV heads at every size (Dubey et al. 2024, Table 3:
Llama 3 8B, 70B and 405B)."""

FFN_RATIO = 8.0 / 3.0
FFN_MULTIPLE = 256
"""SwiGLU width 8/3 × hidden (Shazeer 2020, "GLU Variants Improve Transformer", section 2:
2/3 of the 4h MLP keeps its parameters), rounded up to a multiple of 256 (Touvron et al. 2023a,
Llama's reference code ``multiple_of=256``: 4,096 -> 11,008 as in Llama 2 7B)."""

ASPECT_TARGET = 128.0
ASPECT_MIN = 96.0
ASPECT_MAX = 160.0
"""hidden / layers: Llama 3.1 8B is 4,096/32 = 128, 405B 16,384/126 = 130, 70B 8,192/80 =
102 (Dubey et al. 2024, Table 3). Kaplan et al. 2020 ("Scaling Laws for Neural Language
Models", arXiv 2001.08361, section 3.1 and Figure 5) find the loss changes by only a few
percent across aspect ratios from about 20 to 200 at fixed parameters, so any ratio in
[96, 160] is taken as the same family; the band lets the sizes step by a few percent."""

MIN_HIDDEN = 1024
MAX_HIDDEN = 24_576
"""The family's range: hidden 1,024 with 8 layers (about 0.4B parameters with Llama 3's
vocabulary) to hidden 24,576 with 192 layers (about 1.4T), beyond the largest dense preset
(405B) and any dense model a budget plan is likely to afford."""

MIN_SIZE_STEP = 1.02
"""Consecutive sizes differ by at least 2% in parameters (at 20 tokens per parameter compute
grows with parameters squared, so by about 4% in cost)."""

FAMILY_NAME = "llama3-style"

SHAPE_RULE = (
    f"Llama-style dense decoder ({FAMILY_NAME}): hidden a multiple of {HIDDEN_MULTIPLE:,}, "
    f"heads = hidden/{HEAD_DIM} (Llama 2/3), {NUM_KV_HEADS} KV heads (Llama 3 GQA), layers "
    f"with hidden/layers in [{ASPECT_MIN:g}, {ASPECT_MAX:g}] (Llama 3: 128; Kaplan et al. 2020 "
    f"section 3.1: the loss is nearly flat in aspect ratio), SwiGLU ffn = 8/3 × hidden rounded "
    f"up to {FFN_MULTIPLE} (Shazeer 2020; Llama multiple_of=256), vocabulary by family "
    "(presets.default_vocab: Llama 3's 128,256)"
)
TOKENS_RULE = (
    "tokens = tokens_per_param × parameters (Hoffmann et al. 2022, 'Chinchilla': "
    f"compute-optimal at about {CHINCHILLA_TOKENS_PER_PARAM:g} tokens per parameter)"
)


@dataclass(frozen=True, slots=True)
class GeneratedSize:
    """One size of the generated family: its architecture and exact parameter count."""

    model: ModelSpec
    params: int


def ffn_hidden_size(hidden_size: int) -> int:
    """SwiGLU width for ``hidden_size``: 8/3 × hidden rounded up to a multiple of 256."""
    raw = (8 * hidden_size + 2) // 3  # ceil(8h/3) in integers
    return -(-raw // FFN_MULTIPLE) * FFN_MULTIPLE


def llama_style(hidden_size: int, num_layers: int) -> ModelSpec:
    """The generated architecture of ``hidden_size`` (a multiple of 1,024) and ``num_layers``,
    named by its shape."""
    heads = hidden_size // HEAD_DIM
    kv_heads = min(NUM_KV_HEADS, heads)
    vocab = default_vocab(FAMILY_NAME, MlpKind.SWIGLU, heads, kv_heads)
    return ModelSpec(
        name=f"{FAMILY_NAME}-h{hidden_size}-l{num_layers}",
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_heads=heads,
        num_kv_heads=kv_heads,
        ffn_hidden_size=ffn_hidden_size(hidden_size),
        vocab_size=vocab.size,
        mlp=MlpKind.SWIGLU,
    )


def generated_family() -> tuple[GeneratedSize, ...]:
    """Every size of the family, smallest first, each at least ``MIN_SIZE_STEP`` larger than
    the one before (of shapes within 2% of each other the smallest is kept; of equal ones the
    aspect ratio nearest 128). Parameters grow strictly along the tuple, so a search may
    bisect on the index."""
    shapes: list[tuple[int, float, int, int]] = []
    for hidden in range(MIN_HIDDEN, MAX_HIDDEN + 1, HIDDEN_MULTIPLE):
        # Parameters are linear in the layer count: count one and two layers, extrapolate.
        one = count_parameters(llama_style(hidden, 1)).total
        per_layer = count_parameters(llama_style(hidden, 2)).total - one
        for layers in range(1, int(hidden / ASPECT_MIN) + 1):
            aspect = hidden / layers
            if ASPECT_MIN <= aspect <= ASPECT_MAX:
                params = int(one + (layers - 1) * per_layer)
                shapes.append((params, abs(aspect - ASPECT_TARGET), hidden, layers))
    shapes.sort()
    kept: list[GeneratedSize] = []
    for params, _, hidden, layers in shapes:
        if not kept or params >= MIN_SIZE_STEP * kept[-1].params:
            kept.append(GeneratedSize(llama_style(hidden, layers), params))
    return tuple(kept)
