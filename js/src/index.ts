export { ZarrDBStore, type OpenOptions, type RangeQuery, type GetOptions } from "./store.js";
export { BlobSource, HttpSource, MemorySource, type Source, type HttpOptions } from "./sources.js";
export type { CacheOptions } from "./pages.js";
export * from "./errors.js";
