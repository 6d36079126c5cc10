import type { components, paths } from "./schema";

type EstimateRequest = components["schemas"]["EstimateRequest"];
type EstimateResponse = components["schemas"]["EstimateResponse"];
type QuoteLine = components["schemas"]["QuoteLineOut"];
type CreateQuote = paths["/v1/quotes"]["post"];
type ServingBody = paths["/v1/serving-estimates"]["post"]["requestBody"]["content"]["application/json"];
type PlanBody = paths["/v1/parallelism-plans"]["post"]["requestBody"]["content"]["application/json"];
type PolicyBody = paths["/v1/policies"]["post"]["requestBody"]["content"]["application/json"];
type BudgetBody = paths["/v1/budget-plans"]["post"]["requestBody"]["content"]["application/json"];
type OfferUpdate = paths["/v1/offers/{offer_id}"]["put"]["requestBody"]["content"]["application/json"];

// Requests as the README writes them: every field with a server-side default left out.
const request: EstimateRequest = {
  model: { preset: "llama3.1-70b" },
  cluster: { accelerator: "h100-sxm5-80gb", num_gpus: 64 },
  training: { seq_len: 8192, global_batch_seqs: 128, tokens: 15e12 },
};
const serving: ServingBody = {
  model: { preset: "llama3.1-70b" },
  deployment: { accelerator: "h100-sxm5-80gb", gpus_per_replica: 4, tp: 4 },
  traffic: { mode: "online", prompt_tokens: { mean: 1024 }, output_tokens: { mean: 256 },
             requests_per_s: 10 },
};
const plan: PlanBody = {
  model: { preset: "gpt3-175b" },
  training: { seq_len: 2048, global_batch_seqs: 1536, tokens: 300e9 },
  cluster: { accelerator: "a100-sxm4-80gb", num_gpus: 1024 },
};
const policy: PolicyBody = { name: "finance", rules: {} };
const budget: BudgetBody = {
  model: { preset: "llama3.1-8b" },
  training: { seq_len: 8192, global_batch_seqs: 512, tokens: 1e11 },
  clusters: [{ accelerator: "h100-sxm5-80gb", num_gpus_range: { start: 8, stop: 64, step: 8 } }],
  budget: { amount: "200000", currency: "USD" },
};
const offer: OfferUpdate = { price_per_hour: "52.000000", source: "AWS price list", as_of: "2026-11-20",
                             indicative: false };

// Responses: a field with a default is always present, so it reads without a check.
function tokensPerGpu(answer: EstimateResponse): number {
  return answer.time.tokens_per_s_per_gpu;
}

function cheapestTotal(lines: QuoteLine[]): string | null {
  const feasible = lines.filter((line) => line.feasible && line.total !== null);
  return feasible.length ? feasible[0].total : null;
}

// Headers as the README and curl spell them (a strict literal: a lower-cased name in the
// document made this an excess-property error).
const quoteHeaders: CreateQuote["parameters"]["header"] = { "Idempotency-Key": "plan-42" };
const offerHeaders: paths["/v1/offers/{offer_id}"]["put"]["parameters"]["header"] = {
  "If-Match": "\"etag\"" };

type QuoteBody = CreateQuote["requestBody"]["content"]["application/json"];
const quote: QuoteBody = { workload: { gpu_hours: { accelerator: "h100-sxm5-80gb", gpu_hours: 1000, num_gpus: 8 } } };
export { quoteHeaders, offerHeaders, request, serving, plan, policy, budget, offer, tokensPerGpu, cheapestTotal, quote };
