/**
 * The JobEvents side of chat fan-out: the ChatSession objects that watch this job, by name, kept
 * in the job's SQLite so they survive eviction of either object. Every append is pushed to each
 * watcher over RPC (`ChatSessionObject.relay`), one push at a time per watcher so pushes arrive in
 * order. A push that fails is only logged: the session keeps its own last relayed offset per job
 * and pulls whatever it missed (`JobEventsObject.page`) on the next push or its watchdog alarm.
 */
import type { Env } from "../../env";
import { log } from "../../log";
import type { LoggedEvent } from "./event-log";

/** More watchers than this on one job is a bug upstream (one conversation owns a job). */
const MAX_WATCHERS = 16;

export class ChatRelay {
  private readonly watchers: Set<string>;
  private readonly chains = new Map<string, Promise<void>>();

  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly env: Env,
  ) {
    storage.sql.exec("CREATE TABLE IF NOT EXISTS chat_watchers (name TEXT PRIMARY KEY)");
    this.watchers = new Set(
      storage.sql
        .exec<{ name: string }>("SELECT name FROM chat_watchers")
        .toArray()
        .map((r) => r.name),
    );
  }

  get size(): number {
    return this.watchers.size;
  }

  add(name: string): void {
    if (this.watchers.has(name)) return;
    if (this.watchers.size >= MAX_WATCHERS) throw new Error(`job already has ${MAX_WATCHERS} chat watchers`);
    this.storage.sql.exec("INSERT OR IGNORE INTO chat_watchers (name) VALUES (?)", name);
    this.watchers.add(name);
  }

  push(jobId: string, events: LoggedEvent[]): void {
    for (const name of this.watchers) {
      const previous = this.chains.get(name) ?? Promise.resolve();
      const next = previous
        .then(async () => {
          const stub = this.env.CHAT_SESSIONS.get(this.env.CHAT_SESSIONS.idFromName(name));
          await stub.relay(jobId, events);
        })
        .catch((err: unknown) => {
          log.warn("chat relay push failed; the session will pull", { jobId, error: err });
        });
      this.chains.set(name, next);
      void next.finally(() => {
        if (this.chains.get(name) === next) this.chains.delete(name);
      });
    }
  }
}
