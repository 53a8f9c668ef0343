// Markdown for finished answers: marked turns it into HTML, DOMPurify keeps only what is safe
// to show (no scripts, forms, frames or styles), highlight.js colours code, and each code block
// gets a copy button. Links open in a new tab without telling the other site where from.

import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";
import hljs from "./vendor/highlight.min.js";

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
