// Patching explorer: sites down, positions across; click a cell for the metric and its tokens.
// No network, no dependencies: plain DOM, tokens set with textContent.

function show(tok) {
  let s = String(tok).replace(/\n/g, "\u23ce").replace(/\t/g, "\u21e5");
  const stripped = s.replace(/^ +/, "");
  s = "\u2423".repeat(s.length - stripped.length) + stripped;
  return s.length ? s : "\u2205";
}

function diverging(v, limit) {
  if (v === null || !isFinite(v) || limit <= 0) return ["#f3f4f6", "#111"];
  const t = Math.min(Math.abs(v) / limit, 1);
  const to = v > 0 ? [8, 69, 148] : [165, 15, 21];
  const c = to.map((x) => Math.round(255 + (x - 255) * t));
  return [`rgb(${c.join(",")})`, t > 0.6 ? "#fff" : "#111"];
}

function el(tag, style, text) {
  const node = document.createElement(tag);
  if (style) node.style.cssText = style;
  if (text !== undefined) node.textContent = text;
  return node;
}

const CELL = "padding:2px 6px;border:1px solid rgba(128,128,128,0.25);white-space:pre;text-align:center";
const fmt = (v) => (v === null || v === undefined ? "-" : Number(v).toPrecision(4));

function render({ model, el: host }) {
  const root = el("div", "font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;overflow-x:auto");
  host.appendChild(root);

  function draw() {
    const d = model.get("data");
    if (!d.sites) return;
    const kind = model.get("kind");
    const sel = model.get("selected") || {};
    const values = kind === "metric" ? d.scores : d.recovered;
    let limit = 1;
    if (kind === "metric") {
      limit = 0;
      for (const row of d.scores) for (const v of row) if (v !== null) limit = Math.max(limit, Math.abs(v));
    }
    root.replaceChildren();
    const bar = el("div", "margin:4px 0");
    const kindSel = el("select");
    for (const k of ["recovered", "metric"]) {
      const o = el("option", "", k);
      o.value = k;
      o.selected = k === kind;
      kindSel.appendChild(o);
    }
    kindSel.onchange = () => { model.set("kind", kindSel.value); model.save_changes(); };
    bar.append("colour by ", kindSel, `   metric ${d.metric}: clean ${fmt(d.clean_metric)}, corrupt ${fmt(d.corrupt_metric)}`);
    root.appendChild(bar);
    root.appendChild(el("div", "font-weight:600;margin:2px 0", d.headline));

    const table = el("table", "border-collapse:collapse");
    const head = el("tr");
    head.appendChild(el("th", CELL, "site"));
    d.positions.forEach((p, j) => {
      const c = d.clean_tokens[j], k = d.corrupt_tokens[j];
      head.appendChild(el("th", CELL + ";background:rgba(128,128,128,0.12)", c === k ? `${p}\n${show(c)}` : `${p}\n${show(c)}\n${show(k)}`));
    });
    table.appendChild(head);
    d.sites.forEach((site, i) => {
      const tr = el("tr");
      tr.appendChild(el("td", CELL + ";text-align:left", site));
      d.positions.forEach((p, j) => {
        const v = values[i][j];
        const [bg, fg] = diverging(v, limit);
        const td = el("td", `${CELL};background:${bg};color:${fg};cursor:pointer`, v === null ? "-" : Number(v).toFixed(2));
        td.title = `${site} @ ${p}: metric ${fmt(d.scores[i][j])}, recovered ${fmt(d.recovered[i][j])}`;
        if (sel.site === i && sel.position === j) td.style.outline = "2px solid #E69F00";
        td.onclick = () => { model.set("selected", { site: i, position: j }); model.save_changes(); };
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    root.appendChild(table);

    if (sel.site !== undefined && sel.site < d.sites.length && sel.position < d.positions.length) {
      const i = sel.site, j = sel.position;
      const panel = el("div", "margin:6px 0;padding:4px;border:1px solid rgba(128,128,128,0.4);white-space:pre");
      panel.textContent =
        `${d.sites[i]} at position ${d.positions[j]}\n` +
        `clean token ${JSON.stringify(d.clean_tokens[j])}, corrupt token ${JSON.stringify(d.corrupt_tokens[j])}\n` +
        `metric after patching ${fmt(d.scores[i][j])} (clean ${fmt(d.clean_metric)}, corrupt ${fmt(d.corrupt_metric)})\n` +
        `difference from corrupt ${fmt(d.scores[i][j] - d.corrupt_metric)}, recovered ${fmt(d.recovered[i][j])}`;
      root.appendChild(panel);
    } else {
      root.appendChild(el("div", "color:#6b7280;margin:4px 0", "click a cell for its numbers and tokens"));
    }
  }

  for (const name of ["data", "kind", "selected"]) model.on(`change:${name}`, draw);
  draw();
  return () => { for (const name of ["data", "kind", "selected"]) model.off(`change:${name}`, draw); };
}

export default { render };
