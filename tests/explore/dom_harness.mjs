// Runs an explorer's ES module against a minimal fake DOM and a fake anywidget model, so the
// front end's logic (drawing, clicks, hovers, the slider) is tested without a browser.
// Usage: node dom_harness.mjs MODULE.js STATE.json SCRIPT.json -> prints a JSON report.
// SCRIPT is a list of actions: {"click": {"text": "..."}} clicks the first element whose own text
// matches, {"hover": N} enters the N-th circle, {"input": VALUE} moves the first range slider,
// {"select": [i, VALUE]} changes the i-th <select>.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

class Node {
  constructor(tag) {
    this.tag = tag;
    this.children = [];
    this.attrs = {};
    this.style = { cssText: "" };
    this.listeners = {};
    this._text = "";
    this.value = "";
    this.selected = false;
  }
  set textContent(v) { this._text = String(v); this.children = []; }
  get textContent() { return this._text + this.children.map((c) => (typeof c === "string" ? c : c.textContent)).join(""); }
  appendChild(c) { this.children.push(c); return c; }
  append(...cs) { for (const c of cs) this.children.push(c); }
  replaceChildren(...cs) { this.children = [...cs]; this._text = ""; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  addEventListener(k, f) { (this.listeners[k] ||= []).push(f); }
  fire(k) {
    if (this["on" + k]) this["on" + k]();
    for (const f of this.listeners[k] || []) f();
  }
  *walk() {
    yield this;
    for (const c of this.children) if (typeof c !== "string") yield* c.walk();
  }
}

globalThis.document = {
  createElement: (tag) => new Node(tag),
  createElementNS: (_ns, tag) => new Node(tag),
};

const [moduleFile, stateFile, scriptFile] = process.argv.slice(2);
const state = JSON.parse(readFileSync(stateFile, "utf8"));
const script = JSON.parse(readFileSync(scriptFile, "utf8"));
const handlers = {};
const sets = [];
const model = {
  get: (k) => state[k],
  set: (k, v) => {
    state[k] = v;
    sets.push([k, v]);
    for (const f of handlers["change:" + k] || []) f();
  },
  save_changes: () => {},
  on: (ev, f) => { (handlers[ev] ||= []).push(f); },
  off: (ev, f) => { handlers[ev] = (handlers[ev] || []).filter((g) => g !== f); },
};
const host = new Node("div");
const mod = await import(pathToFileURL(moduleFile).href);
const cleanup = mod.default.render({ model, el: host });
const find = (pred) => [...host.walk()].filter(pred);
for (const action of script) {
  if (action.click) {
    const hit = find((n) => n._text === action.click.text && (n.onclick || n.listeners.click));
    if (!hit.length) throw new Error(`nothing clickable with text ${JSON.stringify(action.click.text)}`);
    hit[0].fire("click");
  } else if (action.hover !== undefined) {
    find((n) => n.tag === "circle")[action.hover].fire("mouseenter");
  } else if (action.input !== undefined) {
    const slider = find((n) => n.tag === "input")[0];
    slider.value = String(action.input);
    slider.fire("input");
  } else if (action.select) {
    const [i, value] = action.select;
    const sel = find((n) => n.tag === "select")[i];
    sel.value = String(value);
    sel.fire("change");
  }
}
const report = {
  text: host.textContent,
  sets,
  state,
  circles: find((n) => n.tag === "circle").length,
  cells: find((n) => n.tag === "td").length,
  titles: find((n) => n.title).map((n) => n.title).slice(0, 5),
  cleanup: typeof cleanup === "function",
};
if (typeof cleanup === "function") cleanup();
report.handlers_left = Object.values(handlers).reduce((a, fs) => a + fs.length, 0);
process.stdout.write(JSON.stringify(report));
