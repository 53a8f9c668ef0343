// Markdown for finished answers: marked turns it into HTML, DOMPurify keeps only what is safe
// to show (no scripts, forms, frames or styles), highlight.js colours code, and each code block
// gets a copy button. Links open in a new tab without telling the other site where from, and
// show any bidirectional control in their text.

import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";
import hljs from "./vendor/highlight.min.js";
import { revealBidi } from "./text.js";

// No ids, names, data attributes or classes either (but a code block's language): an answer
// must not stand in for the page's own elements (DOM clobbering) or dress up as someone
// else's message.
const forbidden = {
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  FORBID_ATTR: ["style", "id", "name"],
  ALLOW_DATA_ATTR: false,
  SANITIZE_NAMED_PROPS: true,
};

// Classes only as marked writes them on code (`language-rust`), for highlighting.
DOMPurify.addHook("uponSanitizeAttribute", (node, data) => {
  if (data.attrName === "class") {
    data.keepAttr = node.nodeName === "CODE" && /^language-[\w+-]+$/.test(data.attrValue);
  }
});

// HTML and SVG in an answer are drawn in a sandboxed frame, loaded from the answer's artifact
// address (`base` + its number), where the site serves them with a policy of their own and no
// origin of the site (artifacts.rs counts them the same way: the whole answer when it is a
// document, else each html or svg code block in order).
const artifactLanguage = /^language-(html|svg)$/i;

export function documentKind(text) {
  const start = text.trimStart().slice(0, 15).toLowerCase();
  if (start.startsWith("<!doctype html") || start.startsWith("<html")) return "html";
  if (start.startsWith("<svg") || (start.startsWith("<?xml") && text.includes("<svg"))) return "svg";
  return "";
}

// The frame above the code, which is folded away behind a button.
function showArtifact(pre, src, kind) {
  const frame = document.createElement("iframe");
  frame.className = "artifact";
  frame.setAttribute("sandbox", "allow-scripts");
  frame.referrerPolicy = "no-referrer";
  frame.title = kind === "svg" ? "The picture in this answer" : "The page in this answer";
  frame.src = src;
  const toggle = document.createElement("button");
  toggle.type = "button";
  toggle.className = "source";
  toggle.textContent = "Show the source";
  toggle.setAttribute("aria-expanded", "false");
  toggle.addEventListener("click", () => {
    pre.hidden = !pre.hidden;
    toggle.setAttribute("aria-expanded", String(!pre.hidden));
    toggle.textContent = pre.hidden ? "Show the source" : "Hide the source";
  });
  pre.hidden = true;
  pre.before(frame, toggle);
}

// `text` rendered into `element`; `base` is where its artifacts are (empty: drawn as code only).
export function render(element, text, base = "") {
  const kind = documentKind(text);
  if (kind) {
    const fence = "`".repeat(Math.max(3, ...(text.match(/`+/g) || []).map((run) => run.length + 1)));
    text = `${fence}${kind}\n${text}\n${fence}`;
  }
  element.innerHTML = DOMPurify.sanitize(marked.parse(text, { gfm: true }), forbidden);
  // A link's text cannot be turned around by bidirectional controls (they are shown as
  // <U+202E> and the like), and it opens in a new tab.
  for (const link of element.querySelectorAll("a")) {
    revealBidi(link);
    if (!link.hasAttribute("href")) continue;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    if (link.textContent !== link.href && !link.title) link.title = link.href;
  }
  let artifacts = 0;
  for (const code of element.querySelectorAll("pre > code")) {
    const language = code.className.match(artifactLanguage);
    hljs.highlightElement(code);
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", "Copy this code");
    copy.addEventListener("click", async () => {
      await navigator.clipboard.writeText(code.textContent);
      copy.textContent = "Copied";
      setTimeout(() => (copy.textContent = "Copy"), 1500);
    });
    code.parentElement.classList.add("code");
    code.parentElement.prepend(copy);
    if (language && base) showArtifact(code.parentElement, base + artifacts++, language[1].toLowerCase());
  }
}
