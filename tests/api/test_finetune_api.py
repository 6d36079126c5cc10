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


def llama32_3b_lora(**training: Any) -> dict[str, Any]:
    """torchtune's flags-table LoRA shape (Llama 3.2 3B has no preset: Llama 3.1 8B's here),
    one A100 80GB, 2 x 4096 tokens, a 128K vocabulary: the logits are a large block."""
    values: dict[str, Any] = {"seq_len": 4096, "global_batch_seqs": 2, "tokens": 1e8,
                              "method": "lora", "framework": "fsdp"}
    values.update(training)
    return {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"accelerator": "a100-sxm4-80gb", "num_gpus": 1, "gpus_per_node": 1},
        "parallelism": {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "micro_batch": 2,
                        "recompute": "full"},
        "training": values,
    }


def _defaulted(answer: dict[str, Any]) -> set[str]:
    return {d["field"] for d in answer["warning_details"] if d["code"] == "defaulted_input"}


class TestLossKernelAndEightBitAdam:
    def test_loss_kernels_order_the_peak_and_are_named_in_assumptions(
        self, client: TestClient,
    ) -> None:
        peaks = {}
        for kernel in ("standard", "chunked", "fused"):
            response = client.post("/v1/estimates", json=llama32_3b_lora(loss_kernel=kernel))
            assert response.status_code == 200, response.text
            answer = response.json()
            peaks[kernel] = answer["memory"]["peak_bytes_per_gpu"]
            assert any(a.startswith("loss: ") and kernel in a for a in answer["assumptions"])
            assert "training.loss_kernel" not in _defaulted(answer)
        assert peaks["fused"] < peaks["chunked"] < peaks["standard"]
        # 2 x 4096 tokens x 128,256 logits at 10 vs 3 B: at least 7 GB apart.
        assert peaks["standard"] - peaks["chunked"] > 7 * 2 * 4096 * 128_256

    def test_a_fine_tune_without_a_loss_kernel_says_it_was_defaulted(
        self, client: TestClient,
    ) -> None:
        answer = client.post("/v1/estimates", json=llama32_3b_lora()).json()
        assert "training.loss_kernel" in _defaulted(answer)
        assert any("training.loss_kernel not given" in a for a in answer["assumptions"])
        pretrain = client.post("/v1/estimates", json=llama32_3b_lora(method="pretrain")).json()
        assert "training.loss_kernel" not in _defaulted(pretrain)

    def test_allocated_is_reported_below_the_peak(self, client: TestClient) -> None:
        memory = client.post("/v1/estimates", json=llama32_3b_lora()).json()["memory"]
        assert 0 < memory["allocated_bytes_per_gpu"] < memory["peak_bytes_per_gpu"]
        breakdown = memory["breakdown_bytes"]
        tensors = sum(breakdown[k] for k in ("weights", "gradients", "optimizer",
                                             "activations"))
        assert memory["allocated_bytes_per_gpu"] >= tensors

    def test_adamw_8bit_shrinks_the_optimizer_state(self, client: TestClient) -> None:
        full = {"method": "full_finetune", "global_batch_seqs": 2}
        adam = client.post("/v1/estimates", json=llama32_3b_lora(**full)).json()
        eight = client.post("/v1/estimates",
                            json=llama32_3b_lora(optimizer="adamw_8bit", **full)).json()
        a = adam["memory"]["breakdown_bytes"]["optimizer"]
        b = eight["memory"]["breakdown_bytes"]["optimizer"]
        # FSDP: the fp32 parameters are the master copy (weights), the optimizer holds the
        # moments only: 8 B per parameter -> 2 B plus an fp32 absmax per 2,048.
        assert b / a == pytest.approx((2.0 + 8.0 / 2048) / 8.0, rel=1e-6)
        assert any(a.startswith("adamw_8bit:") for a in eight["assumptions"])

    @pytest.mark.parametrize(("training", "field"), [
        ({"loss_kernel": "flash"}, "training.loss_kernel"),
        ({"loss_kernel": 3}, "training.loss_kernel"),
        ({"optimizer": "adamw_4bit"}, "training.optimizer"),
    ])
    def test_bad_values_are_a_422_naming_the_field(
        self, client: TestClient, training: dict[str, Any], field: str,
    ) -> None:
        assert_problem(client.post("/v1/estimates", json=llama32_3b_lora(**training)), 422,
                       field)

    def test_plans_accept_the_loss_kernel_and_refuse_a_bad_one(
        self, client: TestClient,
    ) -> None:
        request = {"model": {"preset": "llama3.1-8b"},
                   "training": {"seq_len": 4096, "global_batch_seqs": 16, "tokens": 1e9,
                                "method": "lora", "framework": "fsdp",
                                "loss_kernel": "chunked", "optimizer": "adamw_8bit"},
                   "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8}}
        response = client.post("/v1/parallelism-plans", json=request)
        assert response.status_code == 200, response.text
        request["training"]["loss_kernel"] = "flash"
        assert_problem(client.post("/v1/parallelism-plans", json=request), 422,
                       "training.loss_kernel")


def test_the_train_tab_sends_the_optimizer_and_loss_kernel(client: TestClient) -> None:
    """The portal's Train tab takes training.optimizer and training.loss_kernel (issue 43):
    its answer is the API's for the same body, and a bad kernel is named on its field."""
    from service.api import presentation as fmt
    from tests.api.test_ui import ESTIMATE_BODY, FORM, error_of

    body = {**ESTIMATE_BODY, "training": {**ESTIMATE_BODY["training"], "method": "full_finetune",
                                          "optimizer": "adamw_8bit", "loss_kernel": "fused"}}
    api = client.post("/v1/estimates", json=body).json()
    page = client.get("/ui").text
    assert 'name="optimizer"' in page
    assert 'name="loss_kernel"' in page
    html = client.post("/ui", data={**FORM, "method": "full_finetune", "optimizer": "adamw_8bit",
                                    "loss_kernel": "fused", "action": "estimate"}).text
    assert fmt.gib(api["memory"]["peak_bytes_per_gpu"]) in html
    plain = client.post("/v1/estimates", json={**body, "training": {
        **body["training"], "optimizer": "adamw", "loss_kernel": "standard"}}).json()
    assert fmt.gib(plain["memory"]["peak_bytes_per_gpu"]) not in html  # the fields arrived
    bad = client.post("/ui", data={**FORM, "loss_kernel": "magic", "action": "estimate"})
    assert bad.status_code == 422
    assert error_of(bad.text, "loss_kernel")
