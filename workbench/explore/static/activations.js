// Activations explorer: a 2-D PCA map of token activations per layer, a layer slider, hover for
// the token in context, colour by position, frequency, text or labels. Plain DOM + SVG.

const OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000"];
const VIRIDIS = [[68, 1, 84], [33, 145, 140], [253, 231, 37]];
const SVGNS = "http://www.w3.org/2000/svg";

function continuous(t) {
  t = Math.min(Math.max(t, 0), 1) * 2;
  const [a, b] = t <= 1 ? [VIRIDIS[0], VIRIDIS[1]] : [VIRIDIS[1], VIRIDIS[2]];
  const f = t <= 1 ? t : t - 1;
  return `rgb(${a.map((x, i) => Math.round(x + (b[i] - x) * f)).join(",")})`;
}

function colours(c) {
  if (c.kind === "categorical") {
    const cats = [...new Set(c.values)];
    const pal = new Map(cats.map((v, i) => [v, OKABE_ITO[i % OKABE_ITO.length]]));
    return [c.values.map((v) => pal.get(v)), [...pal.entries()].slice(0, 12)];
  }
  let lo = Infinity, hi = -Infinity;
  for (const v of c.values) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  const span = hi - lo || 1;
  return [c.values.map((v) => continuous((v - lo) / span)), [[lo.toPrecision(3), continuous(0)], [hi.toPrecision(3), continuous(1)]]];
}

function el(tag, style, text) {
  const node = document.createElement(tag);
  if (style) node.style.cssText = style;
  if (text !== undefined) node.textContent = text;
  return node;
}

function render({ model, el: host }) {
  const root = el("div", "font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px");
  host.appendChild(root);
  const W = 520, H = 380, PAD = 14;

  function draw() {
    const d = model.get("data");
    if (!d.points) return;
    const li = Math.min(Math.max(model.get("layer"), 0), d.layers.length - 1);
    const colorBy = d.colors[model.get("color_by")] ? model.get("color_by") : d.default_color;
    root.replaceChildren();

    const bar = el("div", "margin:4px 0");
    const slider = el("input");
    slider.type = "range"; slider.min = "0"; slider.max = String(d.layers.length - 1); slider.value = String(li);
    slider.oninput = () => { model.set("layer", Number(slider.value)); model.save_changes(); };
    const colSel = el("select");
    for (const name of Object.keys(d.colors)) {
      const o = el("option", "", name); o.value = name; o.selected = name === colorBy; colSel.appendChild(o);
    }
    colSel.onchange = () => { model.set("color_by", colSel.value); model.save_changes(); };
    const share = d.variance[li];
    bar.append(`${d.kind} layer ${d.layers[li]} `, slider, "  colour ", colSel,
      `  PC1 ${(100 * share[0]).toFixed(0)}%, PC2 ${(100 * share[1]).toFixed(0)}%`);
    root.appendChild(bar);

    const pts = d.points[li];
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const [x, y] of pts) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
    const sx = (W - 2 * PAD) / (x1 - x0 || 1), sy = (H - 2 * PAD) / (y1 - y0 || 1);
    const svg = document.createElementNS(SVGNS, "svg");
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    svg.style.cssText = "border:1px solid rgba(128,128,128,0.3);background:#fff";
    const [cols, legend] = colours(d.colors[colorBy]);
    const tip = el("div", "min-height:1.4em;margin:2px 0;white-space:pre", "hover a point for its token in context");
    pts.forEach(([x, y], i) => {
      const c = document.createElementNS(SVGNS, "circle");
      c.setAttribute("cx", (PAD + (x - x0) * sx).toFixed(1));
      c.setAttribute("cy", (H - PAD - (y - y0) * sy).toFixed(1));
      c.setAttribute("r", "3.2");
      c.setAttribute("fill", cols[i]);
      c.setAttribute("fill-opacity", "0.75");
      c.addEventListener("mouseenter", () => {
        tip.textContent = `${d.context[i]}    (row ${d.rows[i]}, ${colorBy} ${d.colors[colorBy].values[i]})`;
        c.setAttribute("r", "6");
        model.set("hovered", i); model.save_changes();
      });
      c.addEventListener("mouseleave", () => { c.setAttribute("r", "3.2"); });
      svg.appendChild(c);
    });
    root.appendChild(svg);
    root.appendChild(tip);
    const keys = el("div", "margin:2px 0");
    for (const [label, c] of legend) {
      const sw = el("span", `display:inline-block;width:9px;height:9px;margin:0 3px 0 8px;background:${c}`);
      keys.append(sw, String(label));
    }
    root.appendChild(keys);
    if (d.note) root.appendChild(el("div", "color:#6b7280", d.note));
  }

  for (const name of ["data", "layer", "color_by"]) model.on(`change:${name}`, draw);
  draw();
  return () => { for (const name of ["data", "layer", "color_by"]) model.off(`change:${name}`, draw); };
}

export default { render };
