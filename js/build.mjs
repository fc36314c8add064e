// Builds the ES module (dist/index.js), its type declarations, and the viewer page
// (dist/viewer/: index.html and one bundle with zarrita), copied to ../docs/viewer/ for the site.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { copyFileSync, cpSync, existsSync, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const common = { bundle: true, format: "esm", target: "es2022", sourcemap: true, logLevel: "warning" };
await build({ ...common, entryPoints: [`${here}src/index.ts`], platform: "neutral", outfile: `${here}dist/index.js` });
await build({ ...common, entryPoints: [`${here}viewer/viewer.ts`], platform: "browser", minify: true, sourcemap: false, outfile: `${here}dist/viewer/viewer.js` });
copyFileSync(`${here}viewer/index.html`, `${here}dist/viewer/index.html`);
// esbuild strips types without checking them: tsc checks the package and the page.
const tsc = `${here}node_modules/typescript/bin/tsc`;
execFileSync(process.execPath, [tsc, "-p", `${here}tsconfig.json`], { stdio: "inherit" });
execFileSync(process.execPath, [tsc, "-p", `${here}tsconfig.viewer.json`], { stdio: "inherit" });
const docs = `${here}../docs`;
if (existsSync(docs)) {
  mkdirSync(`${docs}/viewer`, { recursive: true });
  cpSync(`${here}dist/viewer`, `${docs}/viewer`, { recursive: true });
}
