// Lens explorer: tokens across, layers down, lens switcher, click a cell for its top-k.
// No network, no dependencies: plain DOM. Every token is set with textContent (never innerHTML).

function show(tok) {
  let s = String(tok).replace(/\n/g, "\u23ce").replace(/\t/g, "\u21e5");
  const stripped = s.replace(/^ +/, "");
  s = "\u2423".repeat(s.length - stripped.length) + stripped;
  return s.length ? s : "\u2205";
}

function heat(p) {
  const t = Math.sqrt(Math.min(Math.max(p, 0), 1));
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return [`rgb(${mix(255, 8)},${mix(255, 69)},${mix(255, 148)})`, t > 0.55 ? "#fff" : "#111"];
}

function el(tag, style, text) {
  const node = document.createElement(tag);
  if (style) node.style.cssText = style;
  if (text !== undefined) node.textContent = text;
  return node;
}

const CELL = "padding:2px 6px;border:1px solid rgba(128,128,128,0.25);cursor:pointer;white-space:pre";

function render({ model, el: host }) {
  const root = el("div", "font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;overflow-x:auto");
  host.appendChild(root);

  function draw() {
    const data = model.get("data");
    const names = Object.keys(data.lenses || {});
    if (!names.length) return;
    const lensName = names.includes(model.get("lens")) ? model.get("lens") : names[0];
    const textIdx = Math.min(model.get("text"), data.texts.length - 1);
    const sel = model.get("selected") || {};
    const L = data.lenses[lensName];
    root.replaceChildren();

    const bar = el("div", "margin:4px 0");
    const lensSel = el("select");
    for (const name of names) {
      const o = el("option", "", name);
      o.value = name;
      o.selected = name === lensName;
      lensSel.appendChild(o);
    }
    lensSel.onchange = () => { model.set("lens", lensSel.value); model.save_changes(); };
    const textSel = el("select");
    data.texts.forEach((span, i) => {
      const preview = data.tokens.slice(span[0], Math.min(span[1], span[0] + 6)).join("");
      const o = el("option", "", `text ${i}: ${preview}`);
      o.value = String(i);
      o.selected = i === textIdx;
      textSel.appendChild(o);
    });
    textSel.onchange = () => {
      model.set("text", Number(textSel.value));
      model.set("selected", {});
      model.save_changes();
    };
    bar.append("lens ", lensSel, "  ", textSel);
    root.appendChild(bar);

    const [start, stop] = data.texts[textIdx];
    const table = el("table", "border-collapse:collapse");
    const head = el("tr");
    head.appendChild(el("th", CELL, "layer"));
    for (let r = start; r < stop; r++) head.appendChild(el("th", CELL + ";background:rgba(128,128,128,0.12)", show(data.tokens[r])));
    head.appendChild(el("th", CELL, "KL"));
    table.appendChild(head);
    L.layers.forEach((layer, li) => {
      const tr = el("tr");
      tr.appendChild(el("td", CELL, String(layer)));
      for (let r = start; r < stop; r++) {
        const p = L.top_probs[li][r][0];
        const [bg, fg] = heat(p);
        const td = el("td", `${CELL};background:${bg};color:${fg}`, show(L.top_tokens[li][r][0]));
        td.title = L.top_tokens[li][r].map((t, j) => `${JSON.stringify(t)} ${L.top_probs[li][r][j].toFixed(3)}`).join("\n");
        if (sel.lens === lensName && sel.layer === li && sel.row === r) td.style.outline = "2px solid #E69F00";
        td.onclick = () => { model.set("selected", { lens: lensName, layer: li, row: r }); model.save_changes(); };
        tr.appendChild(td);
      }
      tr.appendChild(el("td", CELL, L.kl_by_layer[li].toFixed(3)));
      table.appendChild(tr);
    });
    root.appendChild(table);

    if (sel.lens === lensName && sel.row !== undefined && sel.row >= start && sel.row < stop) {
      const panel = el("div", "margin:6px 0;padding:4px;border:1px solid rgba(128,128,128,0.4)");
      panel.appendChild(el("div", "font-weight:600",
        `${lensName} lens, layer ${L.layers[sel.layer]}, after ${JSON.stringify(data.tokens[sel.row])} ` +
        `(position ${sel.row - start}), KL ${L.kl[sel.layer][sel.row].toFixed(3)}`));
      L.top_tokens[sel.layer][sel.row].forEach((t, j) => {
        const p = L.top_probs[sel.layer][sel.row][j];
        const line = el("div", "white-space:pre");
        const barEl = el("span", `display:inline-block;height:9px;width:${Math.round(120 * p)}px;background:#0072B2;margin-right:6px`);
        line.append(barEl, `${p.toFixed(3)}  ${show(t)}`);
        panel.appendChild(line);
      });
      root.appendChild(panel);
    } else {
      root.appendChild(el("div", "color:#6b7280;margin:4px 0", "click a cell for its top tokens"));
    }
    if (data.note) root.appendChild(el("div", "color:#6b7280", data.note));
  }

  for (const name of ["data", "lens", "text", "selected"]) model.on(`change:${name}`, draw);
  draw();
  return () => { for (const name of ["data", "lens", "text", "selected"]) model.off(`change:${name}`, draw); };
}

export default { render };
