/** The SQLiteStore 1.0 rules for a file's schema and metadata, as zarrdb's Python side applies
 * them (src/zarrdb/_format.py): the same files are refused, for the same reasons. */

import {
  FormatError, IncompatibleFlagError, NotAZarrDBError, UnsafeSchemaError, UnsupportedVersionError,
} from "./errors.js";

export const APPLICATION_ID = 0x10b50760;
export const METADATA_TABLE = "zarr_sqlitestore_metadata";
export const DATA_TABLE = "zarr";
const SPEC_TABLES = [METADATA_TABLE, DATA_TABLE];
const REQUIRED_METADATA = ["sqlitestore_version", "compatible_flags", "incompatible_flags"];
const KNOWN_INCOMPATIBLE_FLAGS = new Set<string>();
const ENCODINGS: Record<number, string> = { 1: "UTF-8", 2: "UTF-16le", 3: "UTF-16be" };

export interface SchemaRow {
  type: string;
  name: string;
  table: string;
  root: number;
  sql: string;
}

/** Where the reader finds things in a file it accepted. */
export interface Layout {
  dataRoot: number;
  keyIndexRoot: number;
  keyColumn: number;
  valueColumn: number;
  metadataRoot: number;
  warnings: string[];
}

const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

function unquote(name: string): string {
  const match = /^(["`[])(.*)["`\]]$/s.exec(name);
  return match ? match[2] : name;
}

/** The comma-separated definitions inside a CREATE statement's outer parentheses. */
export function definitions(sql: string): { items: string[]; tail: string } {
  const open = sql.indexOf("(");
  if (open < 0) return { items: [], tail: "" };
  const items: string[] = [];
  let depth = 0;
  let start = open + 1;
  let quote = "";
  for (let i = open; i < sql.length; i++) {
    const c = sql[i];
    if (quote) {
      if (c === quote) quote = "";
      continue;
    }
    if (c === "'" || c === '"' || c === "`") quote = c;
    else if (c === "[") quote = "]";
    else if (c === "(") depth++;
    else if (c === ")") {
      depth--;
      if (depth === 0) {
        items.push(sql.slice(start, i).trim());
        return { items, tail: sql.slice(i + 1) };
      }
    } else if (c === "," && depth === 1) {
      items.push(sql.slice(start, i).trim());
      start = i + 1;
    }
  }
  return { items, tail: "" };
}

const CONSTRAINT_WORDS = new Set(["constraint", "primary", "unique", "check", "foreign"]);

function firstToken(text: string): string {
  const match = /^("(?:[^"]|"")*"|`[^`]*`|\[[^\]]*\]|\S+)/.exec(text);
  return match ? unquote(match[1]) : "";
}

function columns(sql: string): { names: string[]; defs: string[]; constraints: string[] } {
  const { items } = definitions(sql);
  const names: string[] = [];
  const defs: string[] = [];
  const constraints: string[] = [];
  for (const item of items) {
    const head = firstToken(item);
    if (CONSTRAINT_WORDS.has(head.toLowerCase()) && !/^["`[]/.test(item)) constraints.push(item);
    else {
      names.push(head);
      defs.push(item);
    }
  }
  return { names, defs, constraints };
}

function schemaCode(schema: SchemaRow[]): string[] {
  const found: string[] = [];
  for (const row of schema) {
    if (!SPEC_TABLES.some((t) => same(t, row.table))) continue;
    if (row.type === "trigger") found.push(`trigger '${row.name}' on table ${row.table}`);
    else if (row.type === "view") found.push(`'${row.name}' is a view, not a table`);
    else if (row.type === "table" && /^\s*create\s+virtual\s/i.test(row.sql)) {
      found.push(`'${row.name}' is a virtual table, not a table`);
    } else if (row.type === "table") {
      const { names, defs } = columns(row.sql);
      defs.forEach((def, i) => {
        if (/\bgenerated\s+always\b|\bas\s*\(/i.test(def)) found.push(`generated column '${names[i]}' in table ${row.name}`);
      });
    } else if (row.type === "index" && row.sql) {
      const { items, tail } = definitions(row.sql);
      if (items.some((item) => /[(]/.test(item) || /^'/.test(item))) {
        found.push(`index '${row.name}' on table ${row.table} computes an expression`);
      }
      if (/\bwhere\b/i.test(tail)) found.push(`index '${row.name}' on table ${row.table} has a WHERE clause`);
    }
  }
  return found;
}

const WITHOUT_ROWID = /\bwithout\s+rowid\b[^)]*$/i;

/** Checks the schema the way zarrdb does and says where the key index and the table are. */
export function checkSchema(schema: SchemaRow[], encoding: number, applicationId: number, name: string): Layout {
  const tables = new Map<string, SchemaRow>();
  for (const row of schema) if (row.type === "table") tables.set(row.name.toLowerCase(), row);
  const data = tables.get(DATA_TABLE);
  const metadata = tables.get(METADATA_TABLE);
  const code = schemaCode(schema);
  if (!data || !metadata) {
    if (data && tables.size === 1 && !code.length) {
      throw new NotAZarrDBError(
        `${name} was written by zarr-python 2's SQLiteStore (one table 'zarr', no SQLiteStore metadata): ` +
        `it is not a SQLiteStore 1.0 file. Convert it with \`zarrdb upgrade FILE\` or \`zarrdb copy FILE NEW.zarrdb\``);
    }
    if (code.length) throw unsafe(name, code);
    if (!tables.size) {
      throw new NotAZarrDBError(`${name} is empty: nothing has been written to it yet`);
    }
    throw new NotAZarrDBError(
      `${name} is an SQLite database of another application (tables: ${[...tables.values()].map((t) => t.name).sort().join(", ")}); ` +
      `a SQLiteStore file has the tables '${METADATA_TABLE}' and '${DATA_TABLE}'`);
  }
  if (code.length) throw unsafe(name, code);
  if (encoding !== 1) {
    throw new FormatError(`${name} stores its text as ${ENCODINGS[encoding] ?? `encoding ${encoding}`}; ` +
      "SQLiteStore files are read in UTF-8 only (the encoding SQLite gives a new file by default)");
  }
  if (WITHOUT_ROWID.test(data.sql)) {
    throw new FormatError(`${name}: table ${DATA_TABLE} is a WITHOUT ROWID table; zarrdb reads values through ` +
      "rowids (a SQLiteStore file made by zarrdb has them)");
  }
  const { names, defs, constraints } = columns(data.sql);
  const keyColumn = names.findIndex((n) => same(n, "k"));
  const valueColumn = names.findIndex((n) => same(n, "v"));
  if (keyColumn < 0 || valueColumn < 0) {
    throw new FormatError(`${name}: table ${DATA_TABLE} has the columns (${names.join(", ")}), not (k, v)`);
  }
  for (const match of data.sql.matchAll(/\bcollate\s+("[^"]*"|`[^`]*`|\[[^\]]*\]|\w+)/gi)) {
    const collation = unquote(match[1]);
    if (!same(collation, "binary")) {
      throw new FormatError(`${name}: keys of '${DATA_TABLE}' compare with collation ${collation}, not BINARY`);
    }
  }
  const keyIsUnique = /\bprimary\s+key\b|\bunique\b/i.test(defs[keyColumn].slice(1))
    || constraints.some((c) => /\b(primary\s+key|unique)\s*\(\s*["`[]?k["`\]]?\s*\)/i.test(c));
  const autoIndexes = schema.filter((row) => row.type === "index" && same(row.table, DATA_TABLE)
    && row.name.toLowerCase().startsWith(`sqlite_autoindex_${DATA_TABLE}_`));
  if (!keyIsUnique || autoIndexes.length !== 1) {
    throw new FormatError(`${name}: table ${DATA_TABLE} must have k as its one PRIMARY KEY (found ` +
      `${autoIndexes.length} automatic indexes)`);
  }
  const warnings: string[] = [];
  if (applicationId !== APPLICATION_ID) {
    warnings.push(`${name} has application id 0x${applicationId.toString(16).padStart(8, "0")}, not ` +
      `0x${APPLICATION_ID.toString(16)} (SQLiteStore); reading it anyway`);
  }
  return {
    dataRoot: data.root, keyIndexRoot: autoIndexes[0].root, keyColumn, valueColumn, metadataRoot: metadata.root, warnings,
  };
}

function unsafe(name: string, code: string[]): UnsafeSchemaError {
  return new UnsafeSchemaError(`${name} holds SQL that would run on its SQLiteStore tables: ${code.join("; ")}`);
}

/** Checks the metadata records: present, version 1.x, no unknown incompatible flag. */
export function checkMetadata(metadata: Map<string, string>, name: string): void {
  const missing = REQUIRED_METADATA.filter((k) => !metadata.has(k));
  if (missing.length) {
    throw new FormatError(`${name} lacks the required metadata record(s) ${missing.join(", ")} in ` +
      `${METADATA_TABLE}; it is not a valid SQLiteStore file`);
  }
  const version = metadata.get("sqlitestore_version")!;
  const match = /^(\d+)\.(\d+)$/.exec(version.trim());
  if (!match) throw new UnsupportedVersionError(`${name}: sqlitestore_version is '${version}', not MAJOR.MINOR`);
  if (Number(match[1]) !== 1) {
    throw new UnsupportedVersionError(`${name} is SQLiteStore version ${version}; this reader reads version 1.x only`);
  }
  const unknown = metadata.get("incompatible_flags")!.split(",").map((f) => f.trim())
    .filter((f) => f && !KNOWN_INCOMPATIBLE_FLAGS.has(f));
  if (unknown.length) {
    throw new IncompatibleFlagError(`${name} uses feature(s) this reader does not implement (incompatible ` +
      `flags: ${unknown.sort().join(", ")})`);
  }
}
