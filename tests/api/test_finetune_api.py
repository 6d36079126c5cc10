"""POST /v1/estimates with training.method, training.lora and dataset sizing (issue 43)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_estimates import assert_problem


def qlora_65b(**training: Any) -> dict[str, Any]:
    """QLoRA's headline case (Dettmers et al. 2023): a 65B model on one 48 GB GPU, micro-batch
    1, sequences of 512 (Guanaco's), full recomputation (gradient checkpointing)."""
    values: dict[str, Any] = {"seq_len": 512, "global_batch_seqs": 16, "tokens": 1e8,
                              "method": "qlora"}
    values.update(training)
    return {
        "model": {"preset": "llama1-65b"},
        "cluster": {"accelerator": "l40s-48gb", "num_gpus": 1, "gpus_per_node": 1},
        "parallelism": {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "micro_batch": 1,
                        "recompute": "full"},
        "training": values,
    }


class TestCreateFinetuneEstimate:
    def test_qlora_65b_fits_on_one_48gb_gpu(self, client: TestClient) -> None:
        response = client.post("/v1/estimates", json=qlora_65b())
        assert response.status_code == 200, response.text
        answer = response.json()
        memory = answer["memory"]
        assert memory["fits"] is True
        assert memory["peak_bytes_per_gpu"] < memory["capacity_bytes_per_gpu"]
        assert 0 < answer["params"]["trainable"] < answer["params"]["total"] / 100
        assert set(memory["breakdown_bytes"]) >= {"weights", "gradients", "optimizer",
                                            "activations", "other"}

    def test_full_finetune_65b_does_not_fit(self, client: TestClient) -> None:
        response = client.post("/v1/estimates", json=qlora_65b(method="full_finetune"))
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["memory"]["fits"] is False
        assert answer["params"]["trainable"] == answer["params"]["total"]

    def test_pretrain_reports_every_parameter_trainable(self, client: TestClient) -> None:
        response = client.post("/v1/estimates", json=qlora_65b(method="pretrain"))
        assert response.status_code == 200, response.text
        params = response.json()["params"]
        assert params["trainable"] == params["total"]

    def test_examples_size_the_dataset(self, client: TestClient) -> None:
        body = qlora_65b(examples=10_000, mean_example_tokens=256.0, packing=False)
        del body["training"]["tokens"]
        response = client.post("/v1/estimates", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["flops"]["total_training"] == pytest.approx(
            answer["flops"]["model_per_token"] * 10_000 * 512)
        assert any("50% of the tokens processed are padding" in n
                   for n in answer["assumptions"])


class TestFinetuneValidation:
    @pytest.mark.parametrize(("training", "field"), [
        ({"lora": {"rank": 9000}}, "training.lora.rank"),
        ({"method": "full_finetune", "lora": {"base_precision": "nf4"}},
         "training.lora.base_precision"),
        ({"method": "pretrain", "lora": {"rank": 8}}, "training.lora"),
        ({"method": "full_finetune", "lora": {"rank": 8}}, "training.lora"),
        ({"lora": {"target_modules": ["q", "attn"]}}, "training.lora.target_modules.1"),
        ({"examples": 100, "mean_example_tokens": 300.0}, "training.examples"),
        ({"method": "dpo"}, "training.method"),
    ])
    def test_bad_input_is_a_422_naming_the_field(
        self, client: TestClient, training: dict[str, Any], field: str,
    ) -> None:
        response = client.post("/v1/estimates", json=qlora_65b(**training))
        assert_problem(response, 422, field)

    def test_neither_tokens_nor_examples_is_a_422(self, client: TestClient) -> None:
        body = qlora_65b()
        del body["training"]["tokens"]
        assert_problem(client.post("/v1/estimates", json=body), 422, "training.tokens")

    def test_examples_without_their_length_is_a_422(self, client: TestClient) -> None:
        body = qlora_65b(examples=100)
        del body["training"]["tokens"]
        assert_problem(client.post("/v1/estimates", json=body), 422,
                       "training.mean_example_tokens")
