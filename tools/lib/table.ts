/** Plain-text and Markdown tables from rows of cells (the first row is the head): the load generator's summary and the benches' output. */

export function textTable(rows: string[][]): string {
  const widths = (rows[0] ?? []).map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i] as number)).join("  ")).join("\n");
}

export function markdownTable(rows: string[][]): string {
  const [head, ...body] = rows;
  if (!head) return "";
  return [
    `| ${head.join(" | ")} |`,
    `|${head.map(() => "---").join("|")}|`,
    ...body.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n");
}
