// DOM helpers shared by every page module.

export const $ = (sel) => document.querySelector(sel);

// el("div", { class, onclick, ...attributes }, ...children): null/undefined/false
// attributes and null/undefined children are left out.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") { if (v !== null && v !== undefined) node.className = v; }
    else if (k.startsWith("on")) { if (v) node.addEventListener(k.slice(2), v); }
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

// replaceChildren, minus the null/undefined/false of optional parts (the DOM would print "null").
export function fill(node, ...kids) {
  node.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
}
