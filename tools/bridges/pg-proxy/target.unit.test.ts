import { describe, expect, it } from "vitest";
import { connectionStringChecker, parseTarget } from "./target";

const target = parseTarget("postgres://app:secret@127.0.0.1:5432/ear");

describe("connectionStringChecker", () => {
  it("accepts the configured database again and again, and still refuses a wrong password after", () => {
    const check = connectionStringChecker(target);
    for (let i = 0; i < 3; i++) expect(check("postgres://app:secret@localhost:5432/ear")).toBeNull();
    const refused = check("postgres://app:guess@localhost:5432/ear");
    expect(refused).toMatchObject({ sqlstate: "28P01" });
    // A refusal is not remembered as an acceptance, nor is an acceptance widened to its neighbours.
    expect(check("postgres://app:guess@localhost:5432/ear")).toMatchObject({ sqlstate: "28P01" });
    expect(check("postgres://app:secret@localhost:5432/other")?.message).toContain("serves only");
    expect(check(undefined)?.message).toContain("missing");
  });

  it("stays bounded when a client varies the header", () => {
    const check = connectionStringChecker(target, 4);
    // Every variant names the same database with the right login (query parameters differ).
    for (let i = 0; i < 50; i++)
      expect(check(`postgres://app:secret@127.0.0.1:5432/ear?application_name=a${i}`)).toBeNull();
    expect(check("postgres://app:nope@127.0.0.1:5432/ear")).toMatchObject({ sqlstate: "28P01" });
  });
});
