import type { components, paths } from "./schema";

type EstimateRequest = components["schemas"]["EstimateRequest"];
type QuoteLine = components["schemas"]["QuoteLineOut"];
type CreateQuote = paths["/v1/quotes"]["post"];

const request: EstimateRequest = {
  model: { preset: "llama3.1-70b" },
  cluster: { accelerator: "h100-sxm5-80gb", num_gpus: 64 },
  training: { seq_len: 8192, global_batch_seqs: 128, tokens: 15e12 },
};

function cheapestTotal(lines: QuoteLine[]): string | null {
  const feasible = lines.filter((line) => line.feasible && line.total !== null);
  return feasible.length ? feasible[0].total : null;
}

type QuoteBody = CreateQuote["requestBody"]["content"]["application/json"];
const quote: QuoteBody = { workload: { gpu_hours: { accelerator: "h100-sxm5-80gb", gpu_hours: 1000, num_gpus: 8 } } };
export { request, cheapestTotal, quote };
