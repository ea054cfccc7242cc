/** The rejection of `p`, for asserting on an error's fields; fails when `p` resolves instead. */
export async function caught(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error("expected a rejection");
}
