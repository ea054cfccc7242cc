/** The `ear` command's entry (bin/ear.js of the SDK package): main.ts does the work. */
import { main } from "./main";

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(`ear: ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  },
);
