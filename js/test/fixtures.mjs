// The fixture files, made once per version of make_fixtures.py by zarrdb's Python.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "..", "..");

export function python() {
  // A relative path is taken from the repository root, where .ci/run runs.
  const chosen = resolve(repo, process.env.ZARRDB_PYTHON || join(".venv", "py3.12", "bin", "python"));
  if (!existsSync(chosen)) {
    throw new Error(`no Python with zarrdb at ${chosen}: build it (PYTHON=3.12 scripts/dev.sh build test) or set ZARRDB_PYTHON`);
  }
  return chosen;
}

/** The directory of fixture files and Python's manifest of what it reads from them. */
export function fixtures() {
  const script = join(here, "make_fixtures.py");
  const interpreter = python();
  const stamp = createHash("sha256").update(readFileSync(script)).update(interpreter).digest("hex").slice(0, 16);
  const dir = join(tmpdir(), `zarrdb-js-fixtures-${stamp}`);
  if (!existsSync(join(dir, "manifest.json"))) {
    const work = mkdtempSync(join(tmpdir(), "zarrdb-js-making-"));
    execFileSync(interpreter, [script, work], { stdio: ["ignore", "inherit", "inherit"] });
    try {
      renameSync(work, dir);
    } catch {
      rmSync(work, { recursive: true, force: true }); // another test process made them first
    }
  }
  return { dir, manifest: JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8")) };
}
