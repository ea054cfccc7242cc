/**
 * A client generated from the served OpenAPI document type-checks: openapi-typescript turns the
 * document into `paths`, and a small file calls the API through openapi-fetch with them, under
 * tsc (strict). The file's `@ts-expect-error` lines prove that wrong calls are refused (tsc
 * fails on an unused one), and the tree read proves the recursive JobTree is typed (the
 * document's `__shared#/$defs/schema0` reference made `tree` the `$defs` container). A generator
 * that could not read the document, or a schema it types as `unknown`, fails here.
 */
import { execFile } from "node:child_process";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import openapiTS, { type OpenAPI3 } from "openapi-typescript";
import { afterAll, describe, expect, it } from "vitest";
import { gatewayOpenApiDocument } from "../helpers/openapi-document";

const run = promisify(execFile);
/** Inside the repo, so `openapi-fetch` resolves from its node_modules; .tmp is ignored by git. */
const dir = join(process.cwd(), ".tmp", `openapi-client-${process.pid}`);

const USES = `import createClient from "openapi-fetch";
import type { JobState } from "../../src/contracts/job-state";
import type { paths } from "./api";

const client = createClient<paths>({ baseUrl: "https://gateway.example" });

export async function uses(id: string): Promise<number> {
  const job = await client.GET("/v1/jobs/{id}", { params: { path: { id } } });
  if (job.error) {
    const code: string = job.error.error.code;
    void code;
  }
  const state: JobState | undefined = job.data?.job.state;
  void state;
  const created = await client.POST("/v1/jobs", {
    body: { input: { messages: [{ role: "user", content: "hi" }] }, idempotency_key: "k1" },
  });
  void created.data?.job.id;
  const decided = await client.POST("/v1/jobs/{id}/approvals/{call_id}", {
    params: { path: { id, call_id: "c1" } },
    body: { decision: "approve" },
  });
  void decided;
  const page = await client.GET("/v1/agents", { params: { query: { limit: 10 } } });
  void page.data?.next_cursor;
  const tree = await client.GET("/v1/jobs/{id}/tree", { params: { path: { id } } });
  const child = tree.data?.tree.children[0]?.children[0];
  const tokens: number | undefined = child?.subtree_usage.prompt_tokens;
  // @ts-expect-error no such route
  await client.GET("/v1/nope");
  // @ts-expect-error the job id is required
  await client.GET("/v1/jobs/{id}", {});
  // @ts-expect-error a job's input is messages, not a string
  await client.POST("/v1/jobs", { body: { input: "hi" } });
  // @ts-expect-error cancel is a POST
  await client.GET("/v1/jobs/{id}/cancel", { params: { path: { id } } });
  return tokens ?? 0;
}
`;

async function tsc(files: Record<string, string>): Promise<{ ok: boolean; output: string }> {
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  const tsconfig = {
    extends: "../../tsconfig.base.json",
    compilerOptions: { types: [], lib: ["ES2023", "DOM"] },
    files: ["uses.ts"],
  };
  await writeFile(join(dir, "tsconfig.json"), JSON.stringify(tsconfig));
  try {
    const { stdout } = await run(join(process.cwd(), "node_modules", ".bin", "tsc"), ["-p", dir]);
    return { ok: true, output: stdout };
  } catch (err) {
    return { ok: false, output: String((err as { stdout?: string }).stdout ?? err) };
  }
}

afterAll(() => rm(dir, { recursive: true, force: true }));

describe("a client generated from the OpenAPI document", () => {
  it("openapi-typescript + openapi-fetch: calls type-check, wrong calls are refused", async () => {
    await mkdir(dir, { recursive: true });
    const api = await openapiTS((await gatewayOpenApiDocument()) as unknown as OpenAPI3);
    expect(api).toContain('"/v1/jobs/{id}/tree"');
    const good = await tsc({ "api.d.ts": api, "uses.ts": USES });
    expect(good.output).toBe("");
    expect(good.ok).toBe(true);
    // The check can fail: a wrong type for a field of the generated schema is an error.
    const bad = await tsc({
      "uses.ts": USES.replace("const tokens: number | undefined", "const tokens: string | undefined"),
    });
    expect(bad.ok).toBe(false);
    expect(bad.output).toMatch(/uses\.ts\(\d+,\d+\): error TS2322/);
  }, 120_000);
});
