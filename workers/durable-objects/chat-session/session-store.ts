/**
 * The session's durable state in the object's key-value storage: who it is, the conversation's
 * jobs with the last offset relayed from each, the running job, the messages waiting behind it,
 * and which client_message_id became which job. The parts read and write it only through here,
 * so the keys and how much of each is kept live in one place.
 */

export interface Identity {
  tenantId: string;
  conversationId: string;
}

export interface RelayedJob {
  /** Highest offset this session has seen from the job's log. */
  relayed: number;
  finished: boolean;
}

export interface SentMessage {
  job: string;
  hash: string;
}

export interface QueuedMessage {
  content: string;
  client_message_id: string;
  /** The agent reference the job will be submitted with (resolved to a version only then). */
  agent?: string;
  /** The message's traceparent, kept with its job (validated at submit). */
  traceparent?: string;
}

/** client_message_id → its job and the hash of its content (a bare job id: stored before hashes were kept). */
export type SentMessages = Record<string, string | SentMessage>;

/** Finished jobs remembered for resume without a Postgres lookup. */
const FINISHED_JOBS_KEPT = 50;
/** client_message_id → job remembered for answering a repeat without Postgres (Postgres dedupes beyond). */
const SENT_MESSAGES_KEPT = 200;

export class SessionStore {
  constructor(private readonly storage: DurableObjectStorage) {}

  identity(): Promise<Identity | undefined> {
    return this.storage.get<Identity>("identity");
  }

  saveIdentity(identity: Identity): Promise<void> {
    return this.storage.put("identity", identity);
  }

  async jobs(): Promise<Record<string, RelayedJob>> {
    return (await this.storage.get<Record<string, RelayedJob>>("jobs")) ?? {};
  }

  async saveJobs(jobs: Record<string, RelayedJob>): Promise<void> {
    const finished = Object.keys(jobs).filter((id) => jobs[id]?.finished);
    for (const id of finished.slice(0, Math.max(0, finished.length - FINISHED_JOBS_KEPT))) delete jobs[id];
    await this.storage.put("jobs", jobs);
  }

  /** The conversation's running job: the one a busy policy applies to. */
  async activeJob(): Promise<string | null> {
    return (await this.storage.get<string>("active")) ?? null;
  }

  setActiveJob(jobId: string): Promise<void> {
    return this.storage.put("active", jobId);
  }

  async clearActiveJob(): Promise<void> {
    await this.storage.delete("active");
  }

  async queue(): Promise<QueuedMessage[]> {
    return (await this.storage.get<QueuedMessage[]>("queue")) ?? [];
  }

  saveQueue(queue: QueuedMessage[]): Promise<void> {
    return this.storage.put("queue", queue);
  }

  async sentMessages(): Promise<SentMessages> {
    return (await this.storage.get<SentMessages>("messages")) ?? {};
  }

  async saveSentMessages(sent: SentMessages): Promise<void> {
    const ids = Object.keys(sent);
    for (const old of ids.slice(0, Math.max(0, ids.length - SENT_MESSAGES_KEPT))) delete sent[old];
    await this.storage.put("messages", sent);
  }
}
