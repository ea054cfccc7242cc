/**
 * A progress line on stderr: redrawn in place on a TTY (at most ~8 times a second), one line
 * per step start/end otherwise, silent when disabled (tests).
 */
export class Progress {
  private last = 0;
  private label = "";
  private total = 0;
  private done = 0;
  private ok = 0;
  private streaming = 0;
  private started = 0;
  private readonly tty: boolean;

  constructor(private readonly enabled: boolean) {
    this.tty = enabled && !!process.stderr.isTTY;
  }

  begin(label: string, total: number): void {
    this.label = label;
    this.total = total;
    this.done = 0;
    this.ok = 0;
    this.streaming = 0;
    this.started = Date.now();
    if (!this.enabled) return;
    if (this.tty) this.draw(true);
    else process.stderr.write(`${label}: ${total} runs…\n`);
  }

  streamOpened(): void {
    this.streaming++;
    this.draw();
  }

  finished(ok: boolean): void {
    this.done++;
    this.streaming = Math.max(0, this.streaming - 1);
    if (ok) this.ok++;
    this.draw();
  }

  end(summary: string): void {
    if (!this.enabled) return;
    if (this.tty) process.stderr.write("\r\x1b[2K");
    process.stderr.write(`${this.label}: ${summary}\n`);
  }

  note(line: string): void {
    if (!this.enabled) return;
    if (this.tty) process.stderr.write("\r\x1b[2K");
    process.stderr.write(`${line}\n`);
  }

  private draw(force = false): void {
    if (!this.tty) return;
    const now = Date.now();
    if (!force && now - this.last < 120 && this.done < this.total) return;
    this.last = now;
    const width = 30;
    const filled = this.total ? Math.round((this.done / this.total) * width) : 0;
    const bar = `${"█".repeat(filled)}${"░".repeat(width - filled)}`;
    const secs = ((now - this.started) / 1000).toFixed(1);
    const fail = this.done - this.ok;
    process.stderr.write(
      `\r\x1b[2K${this.label} ${bar} ${this.done}/${this.total} ok ${this.ok} fail ${fail} streaming ${this.streaming} ${secs}s`,
    );
  }
}
