/**
 * deploy/k8s/ checked offline: every object against the Kubernetes (and Prometheus Operator,
 * KEDA) JSON schemas shipped in the pinned kubernetes-models packages, then the rules no schema
 * knows: the ConfigMap and Secret parse with the host's own config parsers (so every variable
 * exists and every required one is given), the probes hit /readyz and /healthz on the port the
 * host listens on, on an address a kubelet can reach, the grace period outlasts the host's
 * drain, and the monitoring and scaling objects point at the Deployment and at metrics the host
 * exports. The last cases break a copy of the manifests one way each and expect the checker to
 * say so: a checker that cannot fail proves nothing.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import { Deployment } from "kubernetes-models/apps/v1";
import { ConfigMap, Secret } from "kubernetes-models/v1";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { OFFLOAD_DRAIN_MS } from "../../sandbox-host/host";
import { HOST_ENV_NAMES, hostConfigFromEnv } from "../../sandbox-host/host-config";
import { MCP_ENV_NAMES } from "../../sandbox-host/mcp/mcp-config";
import { createHostMetrics } from "../../sandbox-host/metrics/metrics";
import { registerQueueDepthGauges } from "../../sandbox-host/metrics/queue-depth";
import { hostModelsFromEnv, MODEL_ENV_NAMES } from "../../sandbox-host/model/provider-config";
import { HAND_OFF_WAIT_MS } from "../../sandbox-host/runner/runner";
import { TRACING_ENV_NAMES } from "../../sandbox-host/tracing/tracing";
import { parseModelRegistry } from "../../src/domain/models";

const DIR = resolve(import.meta.dirname, "../../deploy/k8s");
/** Closing the Postgres pool, Redis and Docker clients after the outbox: seconds, not tens. */
const CLOSE_MARGIN_MS = 10_000;

// biome-ignore lint/suspicious/noExplicitAny: manifests are untyped YAML until validated.
type Doc = Record<string, any>;
interface Manifest {
  file: string;
  doc: Doc;
}

// Each model class validates its object against the JSON schema generated from the API's OpenAPI.
const SCHEMAS: Record<string, (data: Doc) => { validate(): void }> = {
  "apps/v1 Deployment": (d) => new Deployment(d as never),
  "v1 ConfigMap": (d) => new ConfigMap(d as never),
  "v1 Secret": (d) => new Secret(d as never),
  "monitoring.coreos.com/v1 PodMonitor": (d) => new PodMonitor(d as never),
  "keda.sh/v1alpha1 ScaledObject": (d) => new ScaledObject(d as never),
};

function load(): { manifests: Manifest[]; scrape: Doc[] } {
  const manifests: Manifest[] = [];
  for (const file of readdirSync(DIR).filter((f) => f.endsWith(".yaml"))) {
    for (const d of parseAllDocuments(readFileSync(join(DIR, file), "utf8"))) {
      if (d.errors.length > 0) throw new Error(`${file}: ${d.errors[0]!.message}`);
      manifests.push({ file, doc: d.toJS() as Doc });
    }
  }
  const scrape = parse(readFileSync(join(DIR, "prometheus-scrape.yml"), "utf8")) as Doc[];
  return { manifests, scrape };
}

/** Names of every metric a host exports (its registry plus the queue-depth gauges). */
async function exportedMetricNames(): Promise<Set<string>> {
  const metrics = createHostMetrics("k8s-test");
  metrics.stop();
  const registry = new Registry();
  registerQueueDepthGauges(registry);
  const names = [...(await metrics.registry.getMetricsAsJSON()), ...(await registry.getMetricsAsJSON())].map(
    (m) => m.name,
  );
  return new Set(names);
}

const matches = (selector: Doc | undefined, labels: Doc | undefined) =>
  !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);

function problemsOf(manifests: Manifest[], scrape: Doc[], metricNames: Set<string>): string[] {
  const problems: string[] = [];
  for (const { file, doc } of manifests) {
    const model = SCHEMAS[`${doc.apiVersion} ${doc.kind}`];
    if (!model) {
      problems.push(`${file}: no schema for ${doc.apiVersion} ${doc.kind}`);
      continue;
    }
    try {
      model(doc).validate();
    } catch (err) {
      problems.push(`${file}: schema: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  const find = (kind: string) => manifests.filter((m) => m.doc.kind === kind).map((m) => m.doc);
  const [dep] = find("Deployment");
  const [cm] = find("ConfigMap");
  const [secret] = find("Secret");
  if (!dep || !cm || !secret) return [...problems, "need one Deployment, one ConfigMap and one Secret"];

  // The env the pod gets, read by the host's own parsers.
  const env: Record<string, string> = { ...cm.data, ...secret.stringData };
  // A registry's key variables are the operator's own names: known once the registry names them.
  const registry = env.MODEL_REGISTRY ? parseModelRegistry(env.MODEL_REGISTRY) : null;
  const keyVars =
    registry && typeof registry !== "string"
      ? registry.entries.flatMap((e) => (e.provider ? [e.provider.apiKeyEnv] : []))
      : [];
  const known = new Set([...HOST_ENV_NAMES, ...MODEL_ENV_NAMES, ...MCP_ENV_NAMES, ...TRACING_ENV_NAMES, ...keyVars]);
  for (const name of Object.keys(env)) {
    if (!known.has(name))
      problems.push(`env ${name} is read by nothing in sandbox-host (host-config.ts, model/provider-config.ts)`);
  }
  let config: ReturnType<typeof hostConfigFromEnv>;
  try {
    config = hostConfigFromEnv(env);
    hostModelsFromEnv(env);
  } catch (err) {
    return [...problems, `ConfigMap + Secret do not configure a host: ${(err as Error).message}`];
  }

  const pod = dep.spec?.template?.spec ?? {};
  const podLabels = dep.spec?.template?.metadata?.labels;
  if (!matches(dep.spec?.selector?.matchLabels, podLabels))
    problems.push("Deployment selector does not match its pods");
  const c = pod.containers?.[0] ?? {};
  const from = (c.envFrom ?? []).map((e: Doc) => e.configMapRef?.name ?? e.secretRef?.name);
  if (!from.includes(cm.metadata.name) || !from.includes(secret.metadata.name)) {
    problems.push("container envFrom must name the ConfigMap and the Secret");
  }
  if (config.metricsHost !== "0.0.0.0") {
    problems.push(
      `HOST_METRICS_HOST is ${config.metricsHost}: the kubelet and Prometheus reach the pod IP, not loopback`,
    );
  }
  const metricsPort = (c.ports ?? []).find((p: Doc) => p.containerPort === config.metricsPort);
  if (!metricsPort) problems.push(`no container port is HOST_METRICS_PORT (${config.metricsPort})`);
  const probeTarget = (probe: Doc | undefined, path: string, what: string) => {
    const get = probe?.httpGet;
    const portOk = get && (get.port === config.metricsPort || (metricsPort && get.port === metricsPort.name));
    if (!get || get.path !== path || !portOk) {
      problems.push(`${what} must GET ${path} on the metrics port ${config.metricsPort}, is ${JSON.stringify(get)}`);
    }
  };
  probeTarget(c.readinessProbe, "/readyz", "readinessProbe");
  probeTarget(c.livenessProbe, "/healthz", "livenessProbe");

  const preStopMs = (c.lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000;
  if (!c.lifecycle?.preStop) problems.push("no preStop: SIGTERM would race the endpoint removal");
  const drainMs =
    preStopMs +
    config.shutdownGraceMs +
    HAND_OFF_WAIT_MS +
    OFFLOAD_DRAIN_MS +
    config.outboxFlushTimeoutMs +
    CLOSE_MARGIN_MS;
  const graceS = pod.terminationGracePeriodSeconds ?? 30;
  if (graceS * 1000 < drainMs) {
    problems.push(
      `terminationGracePeriodSeconds ${graceS} < preStop ${preStopMs} + HOST_SHUTDOWN_GRACE_MS ${config.shutdownGraceMs} + hand-off ${HAND_OFF_WAIT_MS} + offload ${OFFLOAD_DRAIN_MS} + HOST_OUTBOX_FLUSH_TIMEOUT_MS ${config.outboxFlushTimeoutMs} + ${CLOSE_MARGIN_MS} ms`,
    );
  }
  const sock = (pod.volumes ?? []).find((v: Doc) => v.hostPath?.path === "/var/run/docker.sock");
  if (!sock || !(c.volumeMounts ?? []).some((m: Doc) => m.name === sock.name)) {
    problems.push("the node's Docker socket is not mounted: sandboxes would be off");
  }

  for (const pm of find("PodMonitor")) {
    if (!matches(pm.spec?.selector?.matchLabels, podLabels)) problems.push("PodMonitor selects no host pod");
    for (const e of pm.spec?.podMetricsEndpoints ?? []) {
      if (e.port !== metricsPort?.name || e.path !== "/metrics")
        problems.push("PodMonitor endpoint is not metrics:/metrics");
    }
  }
  for (const job of scrape) {
    const keep = (label: string) =>
      (job.relabel_configs ?? []).find((r: Doc) => r.action === "keep" && r.source_labels?.[0] === label)?.regex;
    const nameLabel = "app.kubernetes.io/name";
    if (keep("__meta_kubernetes_pod_label_app_kubernetes_io_name") !== podLabels?.[nameLabel]) {
      problems.push("prometheus-scrape.yml keeps no host pod");
    }
    if (keep("__meta_kubernetes_pod_container_port_name") !== metricsPort?.name) {
      problems.push("prometheus-scrape.yml keeps another port than the metrics port");
    }
  }
  for (const so of find("ScaledObject")) {
    if (so.spec?.scaleTargetRef?.name !== dep.metadata.name) problems.push("ScaledObject scales another target");
    for (const t of so.spec?.triggers ?? []) {
      const query: string = t.metadata?.query ?? "";
      const used = [...query.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{/g)].map((m) => m[1]!);
      if (used.length === 0) problems.push(`ScaledObject query names no metric: ${query}`);
      for (const name of used) {
        if (!metricNames.has(name)) problems.push(`ScaledObject query uses ${name}, which no host exports`);
      }
    }
  }
  return problems;
}

describe("deploy/k8s manifests", () => {
  it("validate against their schemas and hold the cross-field rules", async () => {
    const { manifests, scrape } = load();
    expect(manifests.map((m) => m.doc.kind).sort()).toEqual([
      "ConfigMap",
      "Deployment",
      "PodMonitor",
      "ScaledObject",
      "Secret",
    ]);
    expect(problemsOf(manifests, scrape, await exportedMetricNames())).toEqual([]);
  });

  it("the checker catches a broken manifest, one break at a time", async () => {
    const names = await exportedMetricNames();
    const broken = (edit: (by: Record<string, Doc>) => void) => {
      const { manifests, scrape } = load();
      edit(Object.fromEntries(manifests.map((m) => [m.doc.kind, m.doc])));
      return problemsOf(manifests, scrape, names);
    };
    const container = (by: Record<string, Doc>) => by.Deployment!.spec.template.spec.containers[0];
    expect(broken((by) => (by.Deployment!.spec.template.spec.terminationGracePeriodSeconds = 30))).toEqual([
      expect.stringMatching(/^terminationGracePeriodSeconds 30 < /),
    ]);
    expect(broken((by) => (container(by).readinessProbe.httpGet.path = "/healthz"))).toEqual([
      expect.stringMatching(/^readinessProbe must GET \/readyz/),
    ]);
    expect(broken((by) => (by.ConfigMap!.data.HOST_METRICS_PORT = "9465"))).toEqual([
      "no container port is HOST_METRICS_PORT (9465)",
      expect.stringMatching(/^readinessProbe/),
      expect.stringMatching(/^livenessProbe/),
      "PodMonitor endpoint is not metrics:/metrics",
      "prometheus-scrape.yml keeps another port than the metrics port",
    ]);
    expect(broken((by) => delete by.ConfigMap!.data.HOST_METRICS_HOST)).toEqual([
      expect.stringMatching(/^HOST_METRICS_HOST is 127.0.0.1/),
    ]);
    expect(broken((by) => (by.ConfigMap!.data.HOST_METRICS_ADDR = "0.0.0.0"))).toEqual([
      "env HOST_METRICS_ADDR is read by nothing in sandbox-host (host-config.ts, model/provider-config.ts)",
    ]);
    expect(broken((by) => delete by.Secret!.stringData.INTERNAL_SIGNING_SECRET)).toEqual([
      expect.stringMatching(/INTERNAL_SIGNING_SECRET is required/),
    ]);
    expect(broken((by) => (by.Deployment!.spec.replicas = "two"))).toEqual([
      expect.stringMatching(/^deployment.yaml: schema: .*replicas/s),
    ]);
    expect(broken((by) => (by.ScaledObject!.spec.triggers[0].metadata.query = "max(queue_depth{})"))).toEqual([
      "ScaledObject query uses queue_depth, which no host exports",
    ]);
  });
});
