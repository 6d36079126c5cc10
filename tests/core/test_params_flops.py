"""Parameter counts and FLOPs: hand-computed cases and published sizes."""

from __future__ import annotations

import pytest

from service.core.flops import token_flops
from service.core.params import count_parameters
from service.core.presets import PRESETS
from service.core.specs import MlpKind, ModelSpec, RecomputeMode
from tests.factories import model


class TestCountParameters:
    @pytest.mark.parametrize("name", sorted(PRESETS))
    def test_preset_total_within_one_percent_of_published(self, name: str) -> None:
        preset = PRESETS[name]
        total = count_parameters(preset.model).total
        assert total == pytest.approx(preset.published_params, rel=0.01), preset.source

    @pytest.mark.parametrize(("name", "rel"), [("mixtral-8x7b", 0.01), ("mixtral-8x22b", 0.01),
                                               ("qwen3-235b-a22b", 0.02), ("deepseek-v3", 0.02)])
    def test_moe_active_parameters_match_published(self, name: str, rel: float) -> None:
        preset = PRESETS[name]
        assert count_parameters(preset.model).active == pytest.approx(
            preset.published_active_params, rel=rel
        )

    def test_llama2_7b_by_hand(self) -> None:
        # 32 x (4 h^2 + 3 h f + 2 h) + 2 V h + h with h=4096, f=11008, V=32000.
        h, f, v = 4096, 11008, 32000
        expected = 32 * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h
        assert count_parameters(model("llama2-7b")).total == expected

    def test_gqa_shrinks_only_key_value_projections(self) -> None:
        mha = count_parameters(model("llama3.1-8b", num_kv_heads=32)).attention_per_layer
        gqa = count_parameters(model("llama3.1-8b")).attention_per_layer
        # K and V go from h x h to h x h/4 each: 2 * (h*h - h*h/4) fewer weights.
        assert mha - gqa == 2 * (4096 * 4096 - 4096 * 1024)

    def test_tied_embeddings_drop_the_output_head(self) -> None:
        untied = count_parameters(model("llama2-7b")).total
        tied = count_parameters(model("llama2-7b", tied_embeddings=True)).total
        assert untied - tied == 32000 * 4096


class TestTokenFlops:
    def test_matches_narayanan_formula_for_gpt(self) -> None:
        # Narayanan et al. 2021 eq. 3: 72 B s L h^2 (1 + s/6h + V/12Lh) per iteration, i.e.
        # 72 L h^2 (1 + s/6h + V/12Lh) per token, for MHA, f = 4h, no biases or norms.
        gpt = ModelSpec(num_layers=96, hidden_size=12288, num_heads=96, num_kv_heads=96,
                        ffn_hidden_size=4 * 12288, vocab_size=51200, mlp=MlpKind.GELU,
                        tied_embeddings=True)
        s, big_l, h, v = 2048, 96, 12288, 51200
        expected = 72 * big_l * h * h * (1 + s / (6 * h) + v / (12 * big_l * h))
        flops = token_flops(gpt, count_parameters(gpt), s)
        assert flops.model_training_flops == pytest.approx(expected, rel=1e-12)

    def test_full_recompute_matches_the_96_form(self) -> None:
        gpt = ModelSpec(num_layers=24, hidden_size=2304, num_heads=24, num_kv_heads=24,
                        ffn_hidden_size=9216, vocab_size=51200, mlp=MlpKind.GELU,
                        tied_embeddings=True)
        s, big_l, h, v = 2048, 24, 2304, 51200
        expected = 96 * big_l * h * h * (1 + s / (6 * h) + v / (16 * big_l * h))
        flops = token_flops(gpt, count_parameters(gpt), s)
        assert flops.hardware_training_flops(RecomputeMode.FULL) == pytest.approx(expected,
                                                                                   rel=1e-12)

    def test_about_six_n_for_a_large_dense_model(self) -> None:
        m = model("llama3.1-405b")
        counts = count_parameters(m)
        per_token = token_flops(m, counts, 2048).model_training_flops
        assert per_token == pytest.approx(6 * counts.total, rel=0.05)

    def test_moe_counts_only_routed_experts_used(self) -> None:
        m = model("mixtral-8x7b")
        counts = count_parameters(m)
        flops = token_flops(m, counts, 4096)
        assert flops.layer_matmul_flops < 2 * counts.total / 3
        assert flops.layer_matmul_flops == pytest.approx(
            2 * (counts.active - counts.embedding - counts.output_head), rel=0.01
        )
