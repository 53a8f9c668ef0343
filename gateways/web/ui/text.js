// Text as the page shows it: bidirectional controls made visible, sizes, times, initials.

// Characters that reorder what follows them (embeddings, overrides, isolates, marks): in a
// link or a file name they can make "invoice\u202Efdp.exe" read as "invoiceexe.pdf".
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

// `text` with each bidirectional control written out as <U+XXXX> (as the CLI does).
export function visible(text) {
  return String(text).replace(BIDI, (c) => `<U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}>`);
}

// Makes the bidirectional controls in the text under `element` visible, in place.
export function revealBidi(element) {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (BIDI.test(node.data)) node.data = visible(node.data);
    BIDI.lastIndex = 0;
  }
}

// A file's size as the daemon writes it.
export function size(bytes) {
  if (bytes < 1e3) return `${bytes} bytes`;
  if (bytes < 1e6) return `${(bytes / 1e3).toFixed(1)} KB`;
  if (bytes < 1e9) return `${(bytes / 1e6).toFixed(1)} MB`;
  return `${(bytes / 1e9).toFixed(1)} GB`;
}

export function when(time) {
  if (!time) return "";
  const date = new Date(time);
  if (Number.isNaN(date.getTime())) return "";
  const today = new Date();
  return date.toDateString() === today.toDateString()
    ? date.toLocaleTimeString([], { timeStyle: "short" })
    : date.toLocaleDateString([], { dateStyle: "medium" });
}

// Which of Today, Yesterday, Last 7 days, Last 30 days, Older `time` falls in.
export function dateGroup(time, now = new Date()) {
  const date = new Date(time);
  if (Number.isNaN(date.getTime())) return "Older";
  const start = new Date(now.getFullYear(), now.getMonth(), now.getDate()).getTime();
  const day = 86400000;
  if (date.getTime() >= start) return "Today";
  if (date.getTime() >= start - day) return "Yesterday";
  if (date.getTime() >= start - 6 * day) return "Last 7 days";
  if (date.getTime() >= start - 29 * day) return "Last 30 days";
  return "Older";
}

// Up to two initials of a name.
export function initials(name) {
  const words = String(name || "?").trim().split(/\s+/).filter(Boolean);
  const letters = words.length > 1 ? [words[0], words[words.length - 1]] : words;
  return letters.map((word) => [...word][0].toUpperCase()).join("") || "?";
}

// An avatar: the initials on a colour of the name's own (dark enough for white text).
export function avatar(name) {
  const element = document.createElement("span");
  element.className = "avatar";
  element.setAttribute("aria-hidden", "true");
  element.textContent = initials(name);
  let hash = 0;
  for (const c of String(name)) hash = (hash * 31 + c.codePointAt(0)) >>> 0;
  element.style.setProperty("--hue", String(hash % 360));
  return element;
}
