/**
 * The object's `meta` table (key → value), owned here: the job id this object serves
 * (`job_id`, remembered from the first ingest, SSE subscription or chat `watch`: the object is
 * named by it but cannot read its own name) and the retention's due time (`expires_at`,
 * retention.ts). Both keys keep the names and text encoding existing objects stored.
 */
export class ObjectMeta {
  /** undefined until read; null when no job id was stored yet. */
  private cachedJobId: string | null | undefined;

  constructor(private readonly storage: DurableObjectStorage) {
    storage.sql.exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
  }

  /** The job this object serves, or null when it was never told. */
  jobId(): string | null {
    if (this.cachedJobId === undefined) {
      this.cachedJobId =
        this.storage.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'job_id'").toArray()[0]?.value ??
        null;
    }
    return this.cachedJobId;
  }

  /** The job id if this instance already read or wrote it; never reads storage (it may be deleted). */
  get knownJobId(): string | null {
    return this.cachedJobId ?? null;
  }

  /** Store the job id the first time it is told; later calls change nothing. */
  rememberJobId(jobId: string): void {
    if (this.jobId() !== null) return;
    this.storage.sql.exec("INSERT OR IGNORE INTO meta (key, value) VALUES ('job_id', ?)", jobId);
    this.cachedJobId = jobId;
  }

  /**
   * The retention's due time, or null when none was stored. Read every time, not cached: a
   * stored due time is the one that counts (tests move it to make retention due).
   */
  expiresAt(): number | null {
    const stored = this.storage.sql
      .exec<{ value: string }>("SELECT value FROM meta WHERE key = 'expires_at'")
      .toArray()[0]?.value;
    return stored === undefined ? null : Number(stored);
  }

  setExpiresAt(due: number): void {
    this.storage.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('expires_at', ?)", String(due));
  }
}
