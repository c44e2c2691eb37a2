// The one sortable table: click (or Enter on) a header to sort, type to filter (every
// word must match), optional paging ("show more"), hover/click per row, and rows that
// expand into a detail row. Class names take the page's prefix (mp-table, mp-row, ...) so
// each page styles its own; the header cells are th.sortable with aria-sort everywhere.
import { el, fill } from "./dom.js";

// columns: [{ key, label, num, value(r), show(r), sortValue(r), nowrap, title(r), dataValue }]
//   value: what filtering shows and sorting uses (sortValue overrides the sort);
//   show: the cell's content (default: String(value)); dataValue: write value as data-v.
// Returns { node, setFilter(q, fromUser), filter(), redraw() }.
export function sortableTable({
  id, rows, columns, prefix, tableClass, sortKey, descending = true,
  text, filter = null, count = null, pageRows = 0, limit = 0, limitNote = null,
  rowClass, onHover, onClick, expand = null, empty = (q) => (q ? `Nothing matches "${q}".` : "No rows."), wrap = true,
}) {
  let key = sortKey ?? columns[0].key, desc = descending, q = (filter && filter.value) || "", shown = pageRows || Infinity;
  const texts = text ? rows.map((r) => text(r).toLowerCase()) : null;
  const open = new Set();
  const headRow = el("tr");
  const tbody = el("tbody");
  const table = el("table", { id, class: tableClass ?? `${prefix}-table` }, el("thead", {}, headRow), tbody);
  const counter = count ? el("span", { class: "muted", id: count.id }) : null;
  const more = pageRows ? el("div", { class: `${prefix}-more` }) : null;
  const note = limit && limitNote ? el("p", { class: "muted" }) : null;
  let input = null, timer = 0;
  if (filter) {
    input = el("input", { type: "search", id: filter.id, placeholder: filter.placeholder, "aria-label": filter.label, value: q || null });
    input.addEventListener("input", () => {
      clearTimeout(timer);
      if (filter.delay) timer = setTimeout(() => setFilter(input.value, true, true), filter.delay);
      else setFilter(input.value, true, true);
    });
  }

  // fromUser: the user typed it or clicked something that filters (the URL follows).
  function setFilter(value, fromUser = false, typed = false) {
    const next = (value || "").trim();
    if (input && !typed && input.value.trim() !== next) input.value = next;
    q = next;
    shown = pageRows || Infinity;
    if (fromUser && filter && filter.onChange) filter.onChange(q);
    draw();
  }

  function sortBy(c) {
    desc = c.key === key ? !desc : Boolean(c.num);
    key = c.key;
    draw();
  }

  function draw() {
    const words = q.toLowerCase().split(/\s+/).filter(Boolean);
    const col = columns.find((c) => c.key === key) || columns[0];
    const sortOf = col.sortValue || col.value;
    const matched = [];
    rows.forEach((r, i) => { if (!texts || words.every((w) => texts[i].includes(w))) matched.push(r); });
    matched.sort((a, b) => {
      const x = sortOf(a), y = sortOf(b);
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return desc ? -c : c;
    });
    const page = matched.slice(0, Math.min(shown, limit || Infinity));
    if (counter) counter.textContent = count.text(matched.length, rows.length, page.length);
    headRow.replaceChildren(...(expand ? [el("th", {})] : []), ...columns.map((c) => el("th", {
      class: `${c.num ? "num " : ""}sortable`, "data-key": c.key, "aria-sort": c.key === key ? (desc ? "descending" : "ascending") : "none",
      title: "sort", tabindex: "0", onclick: () => sortBy(c),
      onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(c); headRow.querySelector(`[data-key="${c.key}"]`)?.focus(); } },
    }, c.label, el("span", { class: "sort-mark" }, c.key === key ? (desc ? " ▾" : " ▴") : ""))));
    const span = columns.length + (expand ? 1 : 0);
    tbody.replaceChildren(...page.flatMap((r) => {
      const canOpen = expand && expand.has(r), isOpen = canOpen && open.has(r);
      const tr = el("tr", {
        class: [prefix ? `${prefix}-row` : "", rowClass ? rowClass(r) : "", onClick && prefix ? `${prefix}-click` : ""].filter(Boolean).join(" ") || null,
        onmouseenter: onHover ? () => onHover(r) : null, onmouseleave: onHover ? () => onHover(null) : null,
        onclick: expand ? () => { if (!canOpen) return; isOpen ? open.delete(r) : open.add(r); draw(); } : onClick ? () => onClick(r) : null,
        ...(expand && expand.attrs ? expand.attrs(r) : {}),
      }, expand ? el("td", { class: expand.toggleClass }, canOpen ? (isOpen ? "▾" : "▸") : "") : null,
      columns.map((c) => el("td", { class: c.num ? "num" : c.nowrap ? "nowrap" : c.cellClass || null, title: c.title ? c.title(r) : null,
        "data-v": c.dataValue ? String(c.value(r)) : undefined }, c.show ? c.show(r) : String(c.value(r) ?? ""))));
      return isOpen ? [tr, expand.row(r, span)] : [tr];
    }));
    if (!matched.length) tbody.append(el("tr", {}, el("td", { colspan: span, class: "muted" }, empty(q))));
    if (more) {
      const left = matched.length - page.length;
      fill(more, ...(left > 0 ? [
        el("span", { class: "muted" }, `${page.length.toLocaleString()} shown, ${left.toLocaleString()} more `),
        el("button", { type: "button", id: `${prefix}-more`, onclick: () => { shown += pageRows; draw(); } }, `show ${Math.min(left, pageRows)} more`),
        left > pageRows ? el("button", { type: "button", onclick: () => { shown = matched.length; draw(); } }, "show all") : null,
      ] : []));
    }
    if (note) { note.hidden = page.length >= matched.length; note.textContent = limitNote ? limitNote(matched.length - page.length) : ""; }
  }

  draw();
  const tools = input || counter ? el("div", { class: `${prefix}-table-tools` }, input, counter) : null;
  const body = wrap ? el("div", { class: `${prefix}-scroll` }, table) : table;
  return { node: el("div", { class: `${prefix}-table-wrap` }, tools, body, more, note), setFilter, filter: () => q, redraw: draw };
}
