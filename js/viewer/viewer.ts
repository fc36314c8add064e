// The viewer page: a .zarrdb from a URL or a dropped file; its hierarchy, each node's
// metadata, and a 2-D slice of an array drawn with a colour map, sliders for the other axes.
import * as zarr from "zarrita";
import { ZarrDBStore } from "../src/index.js";

type Store = ZarrDBStore;
interface ViewerState {
  state: "idle" | "loading" | "ready" | "error";
  error?: string;
  nodes?: string[];
  slice?: { path: string; shape: number[]; index: number[]; min: number; max: number; values: number[] };
  requests?: number;
}
const status: ViewerState = { state: "idle" };
(globalThis as unknown as { zarrdbViewer: ViewerState }).zarrdbViewer = status;

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
let store: Store | null = null;
let colormap = "viridis";

// Colour stops of viridis (matplotlib's, sampled): interpolated linearly between them.
const MAPS: Record<string, number[][]> = {
  viridis: [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]],
  gray: [[0, 0, 0], [255, 255, 255]],
  magma: [[0, 0, 4], [81, 18, 124], [183, 55, 121], [252, 137, 97], [252, 253, 191]],
};

export function colour(t: number, name: string): number[] {
  const stops = MAPS[name] ?? MAPS.gray;
  const x = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  return stops[i].map((c, k) => Math.round(c + (stops[i + 1][k] - c) * f));
}

function setStatus(text: string): void {
  $("status").textContent = text;
}

function fail(error: unknown): void {
  const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  $("error").textContent = message;
  status.state = "error";
  status.error = message;
}

async function open(what: string | Blob): Promise<void> {
  status.state = "loading";
  $("error").textContent = "";
  $("tree").textContent = "";
  try {
    store = await ZarrDBStore.open(what);
    const nodes = await findNodes(store);
    status.nodes = nodes;
    setStatus(`${typeof what === "string" ? what : (what as File).name ?? "file"}: ${nodes.length} nodes` +
      (store.warnings.length ? ` (${store.warnings.join("; ")})` : ""));
    await drawTree(nodes);
    status.state = "ready";
    const wanted = new URLSearchParams(location.search).get("array");
    if (wanted !== null) await select(wanted);
  } catch (error) {
    fail(error);
  }
}

/** Every node's path, by listing folders: an array's folder is not listed, so its chunk keys
 * are never read, however many there are. */
async function findNodes(from: Store): Promise<string[]> {
  const nodes: string[] = [];
  const visit = async (prefix: string): Promise<void> => {
    const { keys, prefixes } = await from.listDir(prefix);
    const path = prefix.replace(/\/$/, "");
    if (keys.includes(`${prefix}zarr.json`)) {
      nodes.push(path);
      const bytes = await from.get(`/${prefix}zarr.json`);
      const meta = bytes ? JSON.parse(new TextDecoder().decode(bytes)) : {};
      if (meta.node_type === "array") return;
    }
    for (const folder of prefixes) await visit(folder);
  };
  await visit("");
  return nodes;
}

async function metadataOf(path: string): Promise<Record<string, unknown>> {
  const bytes = await store!.get(path ? `/${path}/zarr.json` : "/zarr.json");
  return bytes ? JSON.parse(new TextDecoder().decode(bytes)) : {};
}

async function drawTree(nodes: string[]): Promise<void> {
  const root = document.createElement("ul");
  const lists = new Map<string, HTMLElement>([["", root]]);
  for (const path of nodes.slice().sort()) {
    const meta = await metadataOf(path);
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.textContent = path ? path.split("/").pop()! : "/";
    button.className = String(meta.node_type ?? "");
    button.dataset.path = path;
    button.title = path || "/";
    button.onclick = () => select(path).catch(fail);
    item.append(button);
    const parent = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
    (path === "" ? root : lists.get(parent) ?? root).append(item);
    const children = document.createElement("ul");
    item.append(children);
    lists.set(path, children);
  }
  $("tree").append(root);
}

async function select(path: string): Promise<void> {
  document.querySelectorAll("#tree button").forEach((b) => b.classList.toggle("selected", (b as HTMLElement).dataset.path === path));
  const meta = await metadataOf(path);
  $("title").textContent = `${path || "/"} (${meta.node_type ?? "?"})`;
  $("meta").textContent = JSON.stringify(meta, null, 2);
  $("controls").textContent = "";
  if (meta.node_type !== "array") return;
  const array = await zarr.open(zarr.root(store!).resolve(path), { kind: "array" });
  const shape = array.shape;
  const index = shape.map((n, i) => (i < shape.length - 2 ? Math.floor(n / 2) : 0));
  const fromQuery = new URLSearchParams(location.search).get("index");
  if (fromQuery) fromQuery.split(",").forEach((v, i) => { if (i < shape.length - 2) index[i] = Number(v); });
  const select = document.createElement("select");
  select.id = "colormap";
  for (const name of Object.keys(MAPS)) select.append(new Option(name, name, false, name === colormap));
  select.onchange = () => { colormap = select.value; draw(array, path, index).catch(fail); };
  $("controls").append(select);
  shape.slice(0, -2).forEach((n, axis) => {
    const label = document.createElement("label");
    const slider = document.createElement("input");
    slider.type = "range";
    slider.min = "0";
    slider.max = String(n - 1);
    slider.value = String(index[axis]);
    slider.dataset.axis = String(axis);
    const text = document.createElement("span");
    text.textContent = ` axis ${axis}: ${index[axis]}`;
    slider.oninput = () => {
      index[axis] = Number(slider.value);
      text.textContent = ` axis ${axis}: ${index[axis]}`;
      draw(array, path, index).catch(fail);
    };
    label.append(slider, text);
    $("controls").append(label);
  });
  await draw(array, path, index);
}

let drawing = 0;

async function draw(array: zarr.Array<zarr.DataType, Store>, path: string, index: number[]): Promise<void> {
  const ticket = ++drawing;
  const shape = array.shape;
  const is1d = shape.length === 1;
  const dims = is1d ? [1, shape[0]] : shape.slice(-2);
  // Large planes are drawn with a stride, at most about 1024 samples per side.
  const steps = dims.map((n) => Math.max(1, Math.ceil(n / 1024)));
  const selection = is1d
    ? [zarr.slice(0, shape[0], steps[1])]
    : [...index.slice(0, -2), zarr.slice(0, dims[0], steps[0]), zarr.slice(0, dims[1], steps[1])];
  const result = await zarr.get(array, selection as Parameters<typeof zarr.get>[1]);
  if (ticket !== drawing) return;
  const data = result.data as ArrayLike<number | bigint | boolean>;
  const [h, w] = is1d ? [1, result.shape[0]] : result.shape;
  const values = Array.from(data as ArrayLike<unknown>, (v) => Number(v));
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) if (Number.isFinite(v)) { if (v < min) min = v; if (v > max) max = v; }
  const canvas = $("canvas") as HTMLCanvasElement;
  canvas.width = w;
  canvas.height = h;
  canvas.style.width = `${Math.max(256, Math.min(768, w * Math.max(1, Math.floor(512 / Math.max(w, h)))))}px`;
  const context = canvas.getContext("2d")!;
  const image = context.createImageData(w, h);
  const span = max > min ? max - min : 1;
  values.forEach((v, i) => {
    const [r, g, b] = Number.isFinite(v) ? colour((v - min) / span, colormap) : [255, 0, 255];
    image.data.set([r, g, b, 255], i * 4);
  });
  context.putImageData(image, 0, 0);
  $("range").textContent = `${h} x ${w} of ${JSON.stringify(shape)}, ${colormap}, values ${min} to ${max}`;
  status.slice = { path, shape: [h, w], index: [...index], min, max, values };
}

$("open").onclick = () => {
  const url = ($("url") as HTMLInputElement).value.trim();
  if (url) open(url);
};
($("file") as HTMLInputElement).onchange = (event) => {
  const file = (event.target as HTMLInputElement).files?.[0];
  if (file) open(file);
};
const drop = $("drop");
drop.ondragover = (event) => { event.preventDefault(); drop.classList.add("over"); };
drop.ondragleave = () => drop.classList.remove("over");
drop.ondrop = (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  const file = event.dataTransfer?.files[0];
  if (file) open(file);
};
const initial = new URLSearchParams(location.search).get("url");
if (initial) {
  ($("url") as HTMLInputElement).value = new URL(initial, location.href).href;
  open(new URL(initial, location.href).href);
}
