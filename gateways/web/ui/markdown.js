// Markdown for finished answers: marked turns it into HTML, DOMPurify keeps only what is safe
// to show (no scripts, forms, frames or styles), highlight.js colours code, and each code block
// gets a copy button. Links open in a new tab without telling the other site where from.

import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";
import hljs from "./vendor/highlight.min.js";

// No ids, names or classes either: an answer must not stand in for the page's own elements
// (DOM clobbering) or dress up as someone else's message.
const forbidden = {
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  FORBID_ATTR: ["style", "id", "name", "class"],
  SANITIZE_NAMED_PROPS: true,
};

export function render(element, text) {
  element.innerHTML = DOMPurify.sanitize(marked.parse(text, { gfm: true }), forbidden);
  for (const link of element.querySelectorAll("a[href]")) {
    link.target = "_blank";
    link.rel = "noopener noreferrer";
  }
  for (const code of element.querySelectorAll("pre > code")) {
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
  }
}
