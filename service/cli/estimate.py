"""``cq estimate``: one training run on one layout (``POST /v1/estimates``), with the 80%
band, and a cost at ``--price`` or at ``--provider``'s cheapest on-demand offer."""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import Annotated, Any

import typer
from rich.table import Table

from service.api import presentation as fmt
from service.cli import tables as tb
from service.cli.client import DEFAULT_API_URL, Api, CliError, connect
from service.cli.common import (
    Accelerator,
    ApiKey,
    ApiUrl,
    AsJson,
    Batch,
    Gpus,
    Local,
    Model,
    RequestFile,
    SeqLen,
    Tokens,
    _defaults,
    _emit,
    _load,
    _price,
    _put,
    _put_model_and_training,
    _table,
    handled,
    labelled,
    out,
)


def _count_or_auto(text: str | None) -> int | str | None:
    """--vp and --micro-batch: a count, or "auto" (the API names any other word)."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text


def _provider_price(client: Api, accelerator: str, provider: str) -> dict[str, Any]:
    """The provider's cheapest on-demand offer of the accelerator, per GPU-hour (the offers
    list is sorted by it)."""
    page = client.call("GET", "/v1/offers", params={
        "accelerator": accelerator, "provider": provider, "term": "on_demand",
        "page_size": 1}).json()
    if not page["items"]:
        raise CliError(f"the catalogue has no on-demand offer of {accelerator} from "
                       f"{provider}; cq offers --accelerator {accelerator} lists who has one")
    offer = page["items"][0]
    where = " ".join(p for p in (offer["provider"], offer["region"], offer.get("zone"),
                                 offer["instance_type"]) if p)
    return {"price_per_gpu_hour": offer["price_per_gpu_hour"], "currency": offer["currency"],
            "source": f"{where} on demand, offer {offer['id']}", "offer_id": offer["id"]}


def _cost_json(answer: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any]:
    """--json with a price: the API's answer plus a ``cost`` block (amounts as decimal
    strings, like the API's money)."""
    time = answer["time"]
    total = Decimal(cost["price_per_gpu_hour"]) * Decimal(str(time["gpu_hours"]))
    tps = time["tokens_per_s"]
    return {"price_per_gpu_hour": cost["price_per_gpu_hour"], "currency": cost["currency"],
            "source": cost["source"], "offer_id": cost.get("offer_id"),
            "total": f"{total:.2f}",
            "total_low": f"{total * Decimal(str(tps / time['tokens_per_s_high'])):.2f}",
            "total_high": f"{total * Decimal(str(tps / time['tokens_per_s_low'])):.2f}"}


def _figures_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value")
    for name, value in rows:
        table.add_row(name, value)
    return table


def band_figures(answer: dict[str, Any], cost: dict[str, Any] | None = None,
                 ) -> list[tuple[str, str]]:
    """The 80% band (time.tokens_per_s_low/high) as throughput, training time and, with a
    price, cost: time and cost scale with tokens/s ÷ the band's end."""
    time = answer["time"]
    tps, low, high = time["tokens_per_s"], time["tokens_per_s_low"], time["tokens_per_s_high"]
    rows = [("tokens/s, 80% band", f"{fmt.number(low)} – {fmt.number(high)}"),
            ("time, 80% band", f"{fmt.duration(time['train_s'] * tps / high)} – "
                               f"{fmt.duration(time['train_s'] * tps / low)}")]
    if cost is not None:
        price, currency = Decimal(cost["price_per_gpu_hour"]), cost["currency"]
        total = price * Decimal(str(time["gpu_hours"]))
        rows.insert(0, ("cost", f"{fmt.money(str(total), currency)} at "
                                f"{fmt.money(str(price), currency)} per GPU-hour "
                                f"({cost['source']})"))
        rows.append(("cost, 80% band",
                     f"{fmt.money(str(total * Decimal(str(tps / high))), currency)} – "
                     f"{fmt.money(str(total * Decimal(str(tps / low))), currency)}"))
    return rows


def render_estimate(answer: dict[str, Any], cost: dict[str, Any] | None = None) -> None:
    figures = fmt.estimate_figures(answer)
    at = next(i for i, (name, _) in enumerate(figures) if name == "training time") + 1
    out.print(_figures_table("Estimate", [*figures[:at], *band_figures(answer, cost),
                                          *figures[at:]]))
    step = answer["time"]["step_s"]
    parts = _table("Step time", [tb.Col("step time part", max_width=40), tb.num("time"),
                                   tb.num("share")])
    for label, seconds in fmt.step_parts(answer):
        parts.add_row(label, fmt.duration(seconds), fmt.percent(seconds / step))
    out.print(parts)
    memory = _table("Memory per GPU", [tb.Col("memory part", max_width=40),
                                         tb.num("per GPU")])
    for label, size in fmt.memory_parts(answer):
        memory.add_row(label, fmt.gib(size))
    memory.add_row("capacity", fmt.gib(answer["memory"]["capacity_bytes_per_gpu"]))
    out.print(memory)
    render_rl(answer)
    for warning in answer.get("warnings", []):
        out.print(labelled("warning:", "yellow", warning))


def render_rl(answer: dict[str, Any]) -> None:
    """Method rl: each placement's step, phase by phase, and which is faster."""
    rl = answer.get("rl")
    if not rl:
        return
    placements = [rl["colocated"], *([rl["disaggregated"]] if rl["disaggregated"] else [])]
    table = _table(f"RL step by phase (faster: {rl['faster_placement']}; priced: "
                   f"{rl['placement']})",
                   [tb.Col("phase", max_width=30),
                    *(tb.num(p["placement"]) for p in placements)])
    for key in ("generation", "old_log_prob", "reference", "reward", "policy_update",
                "weight_sync", "offload"):
        table.add_row(key.replace("_", " "),
                      *(fmt.duration(p["phases_s"][key]) for p in placements))
    table.add_row("step", *(fmt.duration(p["step_s"]) for p in placements))
    table.add_row("GPUs (train / rollout)",
                  *(f"{p['training_gpus']} / {p['rollout_gpus']}" for p in placements))
    table.add_row("rollout tp x replicas",
                  *(f"{p['rollout_tp']} x {p['rollout_replicas']}" for p in placements))
    table.add_row("fits", *("yes" if p["fits"] else "no" for p in placements))
    out.print(table)


def rl_request(body: dict[str, Any], method: str | None, lora_rank: int | None,
               rl: dict[str, Any]) -> None:
    """--method, --lora-rank and the --rl-* options into the body. For rl, the update's
    sequence length defaults to prompt + the longest response, and its batch to one update
    per step (every rollout), before the estimate's own defaults."""
    _put(body, "training.method", method)
    _put(body, "training.lora.rank", lora_rank)
    for key, value in rl.items():
        _put(body, f"training.rl.{key}", value)
    given = body.get("training", {}).get("rl")
    if not given:
        return
    training = body["training"]
    training.setdefault("method", "rl")
    response = given.get("max_response_tokens") or given.get("response_tokens") or 0
    if "prompt_tokens" in given and response:
        training.setdefault("seq_len", given["prompt_tokens"] + response)
    if "prompts_per_step" in given and "samples_per_prompt" in given:
        training.setdefault("global_batch_seqs",
                            given["prompts_per_step"] * given["samples_per_prompt"])


def register(app: typer.Typer) -> None:
    @app.command()
    @handled
    def estimate(
        model: Model = None, accelerator: Accelerator = None, gpus: Gpus = None,
        tokens: Tokens = None, seq_len: SeqLen = None, global_batch: Batch = None,
        tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
        pp: Annotated[int | None, typer.Option(help="Pipeline stages.")] = None,
        dp: Annotated[int | None, typer.Option(help="Data-parallel size.")] = None,
        cp: Annotated[int | None, typer.Option(help="Context-parallel size.")] = None,
        ep: Annotated[int | None, typer.Option(help="Expert-parallel size (MoE).")] = None,
        vp: Annotated[str | None, typer.Option(
            help="Virtual pipeline stages per GPU, or auto.")] = None,
        micro_batch: Annotated[str | None, typer.Option(
            help="Sequences per micro-batch, or auto.")] = None,
        zero_stage: Annotated[int | None, typer.Option(
            "--zero-stage", "--zero", min=0, max=3, help="ZeRO stage (3 = FSDP).")] = None,
        dp_shard: Annotated[int | None, typer.Option(
            help="Hybrid sharding (HSDP): data-parallel ranks per shard group, a divisor "
                 "of dp.")] = None,
        recompute: Annotated[str | None, typer.Option(
            help="none, selective, full or auto.")] = None,
        sequence_parallel: Annotated[bool | None, typer.Option(
            "--sequence-parallel/--no-sequence-parallel",
            help="Megatron sequence parallelism (the API's default: on).")] = None,
        method: Annotated[str | None, typer.Option(
            help="pretrain, full_finetune, lora, qlora or rl.")] = None,
        lora_rank: Annotated[int | None, typer.Option(
            help="LoRA rank (method lora or qlora).")] = None,
        optimizer: Annotated[str | None, typer.Option(
            help="adamw, adamw_8bit (bitsandbytes 8-bit moments) or sgd.")] = None,
        loss_kernel: Annotated[str | None, typer.Option(
            help="How the loss holds the logits: standard, chunked or fused (default: the "
                 "stack's own).")] = None,
        rl_steps: Annotated[int | None, typer.Option(help="RL steps (method rl).")] = None,
        prompts_per_step: Annotated[int | None, typer.Option(
            help="RL prompts per step.")] = None,
        samples_per_prompt: Annotated[int | None, typer.Option(
            help="RL responses per prompt (GRPO's group).")] = None,
        prompt_tokens: Annotated[int | None, typer.Option(
            help="RL mean prompt tokens.")] = None,
        response_tokens: Annotated[int | None, typer.Option(
            help="RL mean response tokens.")] = None,
        max_response_tokens: Annotated[int | None, typer.Option(
            help="RL longest response (the cap): the step waits for it.")] = None,
        reference_model: Annotated[bool | None, typer.Option(
            "--reference-model/--no-reference-model",
            help="RL: a reference policy's forward pass (the API's default: on).")] = None,
        reward_model: Annotated[str | None, typer.Option(
            help="RL: a learned reward model's preset (default: a rule-based reward).")] = None,
        placement: Annotated[str | None, typer.Option(
            help="RL: colocated or disaggregated (both are shown; this one is priced).")
        ] = None,
        rollout_engine: Annotated[str | None, typer.Option(
            help="RL: the serving engine of the rollouts (vllm, sglang, trtllm).")] = None,
        price: Annotated[str | None, typer.Option(
            help="USD per GPU-hour, to show a cost (and its 80% band).")] = None,
        provider: Annotated[str | None, typer.Option(
            help="Show the cost at this provider's cheapest on-demand offer of the "
                 "accelerator (per GPU-hour), named.")] = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """Time, memory, MFU, GPU-hours and energy of one training run on one layout, with
        the 80% band; a cost with --price or --provider."""
        if price is not None and provider is not None:
            raise typer.BadParameter("give --price or --provider, not both",
                                     param_hint="--price")
        cost = None if price is None else {"price_per_gpu_hour": _price(price),
                                           "currency": "USD", "source": "--price"}
        body = _load(request)
        _put_model_and_training(body, model, tokens, seq_len, global_batch)
        for path, value in (("cluster.accelerator", accelerator), ("cluster.num_gpus", gpus),
                            ("parallelism.tp", tp), ("parallelism.pp", pp),
                            ("parallelism.dp", dp), ("parallelism.cp", cp),
                            ("parallelism.ep", ep), ("parallelism.vp", _count_or_auto(vp)),
                            ("parallelism.micro_batch", _count_or_auto(micro_batch)),
                            ("parallelism.zero_stage", zero_stage),
                            ("parallelism.dp_shard", dp_shard),
                            ("parallelism.recompute", recompute),
                            ("parallelism.sequence_parallel", sequence_parallel),
                            ("training.optimizer", optimizer),
                            ("training.loss_kernel", loss_kernel)):
            _put(body, path, value)
        rl_request(body, method, lora_rank, {
            "steps": rl_steps, "prompts_per_step": prompts_per_step,
            "samples_per_prompt": samples_per_prompt, "prompt_tokens": prompt_tokens,
            "response_tokens": response_tokens, "max_response_tokens": max_response_tokens,
            "reference_model": reference_model,
            "reward_model": None if reward_model is None else {"preset": reward_model},
            "placement": placement, "rollout_engine": rollout_engine})
        _defaults(body)
        with connect(api, api_key, local) as client:
            answer = client.call("POST", "/v1/estimates", json=body).json()
            if provider is not None:
                cost = _provider_price(client, answer["resolved"]["accelerator"], provider)
        if as_json and cost is not None:
            answer = {**answer, "cost": _cost_json(answer, cost)}
        _emit(answer, as_json, functools.partial(render_estimate, cost=cost))
