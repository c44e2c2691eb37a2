// A distributed job's line (docs/runs.md "One run per distributed job"): files that differ
// only by a rank token are one run whose hosts are the ranks. The run's `job` (/api/runs,
// /api/run) holds the ranks in rank order and the grouping rule; this says them, e.g.
// "4 ranks: rank0 … rank3", the rule on hover and beside it.
import { el } from "../lib/dom.js";

export function jobLine(run, id = "rank-job") {
  if (!run || !run.job) return null;
  const ranks = run.job.ranks;
  return el("p", { class: "muted rank-job", id, title: `${run.job.rule}\n${ranks.join("\n")}`, "data-ranks": String(ranks.length) },
    el("strong", {}, `${ranks.length} ranks: ${ranks[0]} … ${ranks[ranks.length - 1]}`),
    ` — one distributed job: ${run.job.rule}. Pick a rank as the host to open it alone.`);
}
