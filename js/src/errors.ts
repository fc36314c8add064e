/** Why a file or a server cannot be read, one class per cause so callers can tell them apart. */

export class ZarrDBError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The bytes are not a SQLite database, or the database is damaged or hostile. */
export class FormatError extends ZarrDBError {}

/** A SQLite database, but not a SQLiteStore 1.0 file this reader can use. */
export class NotAZarrDBError extends ZarrDBError {}

/** The file's SQLiteStore version has a major number other than 1. */
export class UnsupportedVersionError extends ZarrDBError {}

/** The file uses a feature (an incompatible flag) this reader does not implement. */
export class IncompatibleFlagError extends ZarrDBError {}

/** The file holds SQL that SQLite would run on the SQLiteStore tables (triggers, views, ...). */
export class UnsafeSchemaError extends ZarrDBError {}

/** The server or the source failed: network errors, timeouts, unexpected statuses. */
export class SourceError extends ZarrDBError {}

/** The server answered a range request with the whole object (status 200). */
export class RangeNotSupportedError extends SourceError {}

/** The object changed after it was opened (a 412, another ETag, size or Last-Modified). */
export class ObjectChangedError extends SourceError {}
