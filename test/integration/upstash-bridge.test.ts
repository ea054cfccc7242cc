/**
 * The Upstash REST bridge against a real redis-server, driven by the real @upstash/redis client
 * exactly as runtime code builds it (createRedisClient): auto-pipelining and base64 responses on.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Ratelimit } from "@upstash/ratelimit";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRedisClient, type Redis } from "../../src/quota/redis";
import { startUpstashBridge, type UpstashBridge } from "../../tools/bridges/upstash-rest/main";
import { type RedisService, startRedis } from "../../tools/stack/services/redis";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe.skipIf(!canRun)("upstash bridge", () => {
  const token = randomBytes(16).toString("hex");
  let redis: RedisService;
  let bridge: UpstashBridge;
  let client: Redis;
  let direct: IORedis;
  const logs: string[] = [];

  /** A raw request, for what the client hides: status codes, the exact JSON shape. */
  const rawPost = async (path: string, body: string, headers: Record<string, string> = {}) => {
    const res = await fetch(`${bridge.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, ...headers },
      body,
    });
    return { status: res.status, json: (await res.json()) as unknown };
  };

  beforeAll(async () => {
    redis = await startRedis();
    bridge = await startUpstashBridge({ redisUrl: redis.url, token, log: (l) => logs.push(l) });
    client = createRedisClient({ url: bridge.url, token });
    direct = new IORedis(redis.url, { protocol: 2 });
  });

  afterAll(async () => {
    direct?.disconnect();
    await bridge?.close();
    await redis?.stop();
  });

  it("runs @upstash/ratelimit's Upstash-flagged Lua scripts (EVALSHA after the first EVAL)", async () => {
    const limiter = new Ratelimit({
      redis: client,
      limiter: Ratelimit.slidingWindow(3, "60 s"),
      prefix: `rl-test-${randomBytes(4).toString("hex")}`,
      analytics: false,
      ephemeralCache: false,
    });
    const verdicts = [];
    for (let i = 0; i < 5; i++) verdicts.push(await limiter.limit("key-a"));
    expect(verdicts.map((v) => v.success)).toEqual([true, true, true, false, false]);
    expect(verdicts.every((v) => v.reason === undefined)).toBe(true);
    expect((await limiter.limit("key-b")).success).toBe(true);
    // After the first call taught the bridge the script, calls are one EVALSHA each, not EVALSHA + EVAL.
    const before = (await direct.info("commandstats")).match(/cmdstat_eval:calls=(\d+)/)?.[1] ?? "0";
    await limiter.limit("key-c");
    const after = (await direct.info("commandstats")).match(/cmdstat_eval:calls=(\d+)/)?.[1] ?? "0";
    expect(after).toBe(before);
  });

  it("round-trips unicode and binary-ish strings byte for byte", async () => {
    const values = ["héllo wörld ✓ 🚀", "\u0000\u0001\u007f\u00ff end", "OK", "T0s=", " padded ", "a\r\nb", ""];
    for (const [i, v] of values.entries()) {
      expect(await client.set(`s:${i}`, v)).toBe("OK");
      expect(await client.get(`s:${i}`)).toBe(v);
      // Stored as the UTF-8 bytes, not some bridge-private encoding.
      expect((await direct.getBuffer(`s:${i}`))?.equals(Buffer.from(v, "utf8"))).toBe(true);
    }
    expect(await client.get("s:missing")).toBeNull();
  });

  it("returns the raw bytes of a non-UTF-8 value in base64 mode", async () => {
    const bytes = Buffer.from([0x00, 0xff, 0xfe, 0x80, 0x4f, 0x4b, 0xc3]);
    await direct.set("bin", bytes);
    const encoded = await rawPost("/", JSON.stringify(["GET", "bin"]), { "upstash-encoding": "base64" });
    expect(encoded).toEqual({ status: 200, json: { result: bytes.toString("base64") } });
    const plain = await rawPost("/", JSON.stringify(["GET", "bin"]));
    expect(plain.json).toEqual({ result: bytes.toString("utf8") });
  });

  it("serves hashes, sorted sets and counters in the shapes the client expects", async () => {
    expect(await client.hset("h", { a: "1", b: "x y", c: "✓" })).toBe(3);
    expect(await client.hgetall("h")).toEqual({ a: 1, b: "x y", c: "✓" });
    expect(await client.zadd("z", { score: 1.5, member: "a" }, { score: 2, member: "b" })).toBe(2);
    expect(await client.zrange("z", 0, -1, { withScores: true })).toEqual(["a", 1.5, "b", 2]);
    expect(await client.zrem("z", "a")).toBe(1);
    expect(await client.zrange("z", 0, -1)).toEqual(["b"]);
    expect(await client.incr("n")).toBe(1);
    expect(await client.incrby("n", 41)).toBe(42);
  });

  it("encodes nested results in base64 at every depth, and not without the header", async () => {
    await client.hset("nest:h", { f: "v" });
    await client.zadd("nest:z", { score: 3, member: "m" });
    const b64 = (s: string) => Buffer.from(s).toString("base64");
    const withHeader = { "upstash-encoding": "base64" };
    expect((await rawPost("/", '["HGETALL","nest:h"]', withHeader)).json).toEqual({ result: [b64("f"), b64("v")] });
    expect((await rawPost("/", '["ZRANGE","nest:z",0,-1,"WITHSCORES"]', withHeader)).json).toEqual({
      result: [b64("m"), b64("3")],
    });
    const script = "return {KEYS[1], ARGV[1], {7, 'nested ✓', {'deep', 'OK'}}, redis.status_reply('OK')}";
    const evalBody = JSON.stringify(["EVAL", script, 1, "k", "v"]);
    expect((await rawPost("/", evalBody, withHeader)).json).toEqual({
      result: [b64("k"), b64("v"), [7, b64("nested ✓"), [b64("deep"), b64("OK")]], b64("OK")],
    });
    expect((await rawPost("/", evalBody)).json).toEqual({ result: ["k", "v", [7, "nested ✓", ["deep", "OK"]], "OK"] });
    // And the client decodes all of it.
    expect(await client.eval(script, ["k"], ["v"])).toEqual(["k", "v", [7, "nested ✓", ["deep", "OK"]], "OK"]);
  });

  it("serves explicit pipelines and the client's auto-pipelining through /pipeline", async () => {
    let before = bridge.stats();
    const results = await client.pipeline().set("p:a", "1").incr("p:a").get("p:a").hget("p:none", "f").exec();
    expect(results).toEqual(["OK", 2, 2, null]);
    expect(bridge.stats().pipeline - before.pipeline).toBe(1);

    before = bridge.stats();
    const auto = await Promise.all([client.set("p:b", "x"), client.get("p:a"), client.incr("p:c"), client.get("p:b")]);
    expect(auto).toEqual(["OK", 2, 1, "x"]);
    const after = bridge.stats();
    // Reads and writes go in (at most) two batches, never one request per command.
    expect(after.pipeline - before.pipeline).toBeGreaterThanOrEqual(1);
    expect(after.pipeline - before.pipeline).toBeLessThanOrEqual(2);
    expect(after.command - before.command).toBe(0);

    const mixed = await rawPost("/pipeline", '[["SET","p:d","1"],["NOSUCHCMD"],["INCR","p:d"]]');
    expect(mixed.status).toBe(200);
    expect(mixed.json).toEqual([{ result: "OK" }, { error: expect.stringMatching(/unknown command/) }, { result: 2 }]);
  });

  it("runs /multi-exec as one transaction: a queueing error discards all of it", async () => {
    expect(await client.multi().set("tx:a", "1").incr("tx:a").get("tx:a").exec()).toEqual(["OK", 2, 2]);
    const discarded = await rawPost("/multi-exec", '[["SET","tx:b","1"],["NOSUCHCMD"]]');
    expect(discarded.status).toBe(400);
    expect(discarded.json).toEqual({ error: expect.stringMatching(/^EXECABORT .*unknown command/) });
    expect(await direct.exists("tx:b")).toBe(0);
    // A runtime error inside the transaction is that command's result; the others still ran.
    const runtime = await rawPost("/multi-exec", '[["SET","tx:c","x"],["INCR","tx:c"],["SET","tx:d","1"]]');
    expect(runtime.json).toEqual([
      { result: "OK" },
      { error: expect.stringMatching(/not an integer/) },
      { result: "OK" },
    ]);
  });

  it("keeps a transaction isolated while a large command arrives over many socket reads", async () => {
    // A ~900 KB argument makes Redis read the request in several chunks and serve other clients
    // in between. Inside MULTI nothing runs before EXEC, so a concurrent reader (a separate
    // redis-cli process) never sees a ≠ b; the same commands through /pipeline are the control
    // showing that the reader can see a torn state.
    const cmds = JSON.stringify([
      ["INCR", "iso:a"],
      ["SET", "iso:pad", "p".repeat(900_000)],
      ["INCR", "iso:b"],
    ]);
    /** Sends `path` requests while redis-cli reads in a loop; stops early once a torn read is seen. */
    const torn = async (path: string, maxRequests: number, stopWhenTorn: boolean) => {
      await direct.del("iso:a", "iso:b");
      const reader = spawn("redis-cli", ["-p", String(redis.port), "-r", "-1", "MGET", "iso:a", "iso:b"], {
        stdio: ["ignore", "pipe", "ignore"],
      });
      // redis-cli prints each MGET as two lines; count pairs as they stream in.
      let rest = "";
      let odd: string | undefined;
      let seen = 0;
      let reads = 0;
      reader.stdout.setEncoding("utf8").on("data", (d: string) => {
        const lines = (rest + d).split("\n");
        rest = lines.pop() ?? "";
        for (const line of lines) {
          if (odd === undefined) odd = line;
          else {
            reads++;
            if (odd !== line) seen++;
            odd = undefined;
          }
        }
      });
      const exited = new Promise((r) => reader.once("exit", r));
      await new Promise((r) => setTimeout(r, 50));
      let requests = 0;
      while (requests < maxRequests && !(stopWhenTorn && seen > 0)) {
        for (let i = 0; i < 10; i++, requests++) expect((await rawPost(path, cmds)).status).toBe(200);
      }
      reader.kill("SIGKILL");
      await exited;
      return { seen, reads, requests };
    };
    const viaPipeline = await torn("/pipeline", 400, true);
    const viaMulti = await torn("/multi-exec", Math.min(Math.max(100, viaPipeline.requests), 300), false);
    console.log(
      `isolation: torn reads via /pipeline ${viaPipeline.seen}/${viaPipeline.reads} in ${viaPipeline.requests} requests, ` +
        `via /multi-exec ${viaMulti.seen}/${viaMulti.reads} in ${viaMulti.requests} requests`,
    );
    expect(viaPipeline.seen).toBeGreaterThan(0);
    expect(viaMulti.reads).toBeGreaterThan(100);
    expect(viaMulti.seen).toBe(0);
  });

  it("runs scripts: EVALSHA, and the client's NOSCRIPT → EVAL fallback after SCRIPT FLUSH", async () => {
    const src = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
    const script = client.createScript<number>(src);
    expect(await script.exec(["sc:n"], ["5"])).toBe(5); // unknown sha → NOSCRIPT → EVAL
    expect(await script.evalsha(["sc:n"], ["5"])).toBe(10); // cached by that EVAL
    expect(await client.scriptLoad(src)).toBe(script.sha1);
    expect(await client.scriptFlush()).toBe("OK");
    await expect(script.evalsha(["sc:n"], ["1"])).rejects.toThrow(/NOSCRIPT/);
    expect(await script.exec(["sc:n"], ["5"])).toBe(15);
  });

  it("maps Redis errors to errors the client throws with Redis's message", async () => {
    await client.set("wt", "string");
    await expect(client.hget("wt", "f")).rejects.toThrow(/WRONGTYPE Operation against a key holding the wrong kind/);
    await expect(client.zrange("wt", 0, -1)).rejects.toThrow(/WRONGTYPE/); // zrange skips auto-pipelining: POST /
    const raw = await rawPost("/", '["HGET","wt","f"]');
    expect(raw).toEqual({ status: 400, json: { error: expect.stringMatching(/^WRONGTYPE/) } });
  });

  it("refuses a wrong or missing token with 401 in Upstash's shape", async () => {
    const wrong = createRedisClient({ url: bridge.url, token: `${token}x` });
    await expect(wrong.get("s:0")).rejects.toThrow(/WRONGPASS invalid or missing auth token/);
    const missing = await fetch(`${bridge.url}/`, { method: "POST", body: '["PING"]' });
    expect(missing.status).toBe(401);
    expect(await missing.json()).toEqual({ error: "WRONGPASS invalid or missing auth token" });
    expect((await rawPost("/", '["PING"]', { authorization: `Bearer ${token.slice(1)}` })).status).toBe(401);
  });

  it("answers bad JSON, oversized bodies and blocking commands with a clear 400", async () => {
    const bad = await rawPost("/", '["SET","k"');
    expect(bad.status).toBe(400);
    expect(bad.json).toEqual({ error: expect.stringMatching(/not valid JSON/) });
    expect((await rawPost("/", '{"cmd":"PING"}')).json).toEqual({
      error: expect.stringMatching(/non-empty JSON array/),
    });
    const big = await rawPost("/", JSON.stringify(["SET", "big", "x".repeat(2 * 1024 * 1024)]));
    expect(big.status).toBe(400);
    expect(big.json).toEqual({ error: expect.stringMatching(/exceeds the bridge's limit/) });
    const blocking = await rawPost("/", '["BLPOP","q",0]');
    // Only a bounded wait is served (a sleeping host's, on a connection of its own); 0 = forever.
    expect(blocking).toEqual({ status: 400, json: { error: expect.stringMatching(/BLPOP.*timeout in \(0, 60\]/) } });
    await expect(client.eval("return 1", [], [])).resolves.toBe(1); // the connection is still usable
  });

  it("serves the path form: GET /get/k and POST /set/k with the value as the body", async () => {
    const get = await fetch(`${bridge.url}/set/path%2Fk/v1?EX=100`, { headers: { authorization: `Bearer ${token}` } });
    expect(await get.json()).toEqual({ result: "OK" });
    expect(await direct.ttl("path/k")).toBeGreaterThan(90);
    const post = await fetch(`${bridge.url}/set/path2?_token=${token}`, { method: "POST", body: '{"json": true}' });
    expect(await post.json()).toEqual({ result: "OK" });
    expect(await direct.get("path2")).toBe('{"json": true}');
  });

  it("prints round-trip medians: bridge vs direct ioredis", async () => {
    const time = async (fn: () => Promise<unknown>) => {
      for (let i = 0; i < 20; i++) await fn();
      const samples: number[] = [];
      for (let i = 0; i < 100; i++) {
        const t = performance.now();
        await fn();
        samples.push(performance.now() - t);
      }
      return median(samples);
    };
    const viaBridgeGet = await time(() => client.get("s:0"));
    const viaBridgePing = await time(() => client.ping());
    const directGet = await time(() => direct.get("s:0"));
    console.log(
      `round trip median (100×): bridge get ${viaBridgeGet.toFixed(3)} ms, bridge ping ${viaBridgePing.toFixed(3)} ms, direct ioredis get ${directGet.toFixed(3)} ms`,
    );
    expect(viaBridgeGet).toBeGreaterThan(0);
  });

  // Last: stops and restarts Redis.
  it("fails fast while Redis is down and recovers when it is back on the same port", async () => {
    expect((await fetch(`${bridge.url}/healthz`)).status).toBe(200);
    const port = redis.port;
    direct.disconnect();
    await redis.stop();

    const t0 = performance.now();
    await expect(client.get("s:0")).rejects.toThrow(/unreachable/);
    const failMs = performance.now() - t0;
    const t1 = performance.now();
    await expect(client.multi().incr("x").exec()).rejects.toThrow(/unreachable/);
    const failMultiMs = performance.now() - t1;
    expect((await fetch(`${bridge.url}/healthz`)).status).toBe(503);
    expect(failMs).toBeLessThan(1000);
    expect(failMultiMs).toBeLessThan(1000);

    redis = await startRedis({ port });
    const t2 = performance.now();
    let recovered = false;
    while (!recovered && performance.now() - t2 < 5000) {
      recovered = await client.ping().then(
        (r) => r === "PONG",
        () => false,
      );
      if (!recovered) await new Promise((r) => setTimeout(r, 20));
    }
    const recoverMs = performance.now() - t2;
    console.log(
      `redis down: client rejected in ${failMs.toFixed(1)} ms (get), ${failMultiMs.toFixed(1)} ms (multi); recovered ${recoverMs.toFixed(0)} ms after restart`,
    );
    expect(recovered).toBe(true);
    expect(await client.set("after", "restart")).toBe("OK");
    expect(await client.get("after")).toBe("restart");
    expect(logs.some((l) => l.includes("redis unreachable"))).toBe(true);
  });
});
