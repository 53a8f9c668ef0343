// Settings: the name others see and where scheduled results go are kept by the daemon; the
// theme by this browser, applied as it is chosen. Memory written from untrusted content waits
// here for the user to confirm or drop it.

import { $, api, announce, state } from "./state.js";
import { avatar, visible } from "./text.js";

export function showMe() {
  const name = state.me.name || state.me.email || "you";
  $("who").textContent = visible(name);
  $("me-avatar").replaceWith(Object.assign(avatar(name), { id: "me-avatar" }));
}

$("settings-open").addEventListener("click", () => {
  $("display-name").value = state.me.name || "";
  const channel = $("preferred-channel");
  if (![...channel.options].some((option) => option.value === state.me.preferred_channel)) {
    channel.append(new Option(state.me.preferred_channel, state.me.preferred_channel));
  }
  channel.value = state.me.preferred_channel || "";
  $("theme").value = localStorage.getItem("theme") || "system";
  $("settings-status").textContent = "";
  $("settings").showModal();
  showMemoryReview();
  showMemories();
});

// A list of memory entries read from `url`: each its key, then what `parts` makes of it (its
// buttons given `settle`, which posts an answer and puts the daemon's sentence in its place).
async function memoryList(id, url, empty, parts) {
  const list = $(id);
  list.replaceChildren();
  let entries;
  try {
    entries = (await api(url)).entries;
  } catch (error) {
    list.append(Object.assign(document.createElement("li"), { textContent: error.message }));
    return;
  }
  if (!entries.length) {
    list.append(Object.assign(document.createElement("li"), { className: "hint", textContent: empty }));
    return;
  }
  for (const entry of entries) {
    const item = document.createElement("li");
    item.className = "memory-entry";
    item.dataset.key = entry.key;
    const settle = async (path, body) => {
      try {
        const done = await api(path, { method: "POST", body });
        item.replaceChildren(Object.assign(document.createElement("p"), { className: "hint", textContent: done.message }));
        announce(done.message);
      } catch (error) {
        $("settings-status").textContent = error.message;
      }
    };
    item.append(Object.assign(document.createElement("strong"), { textContent: visible(entry.key) }), ...parts(entry, settle));
    list.append(item);
  }
}

const text = (entry) => Object.assign(document.createElement("p"), { textContent: entry.content });

// What the assistant remembers (confirmed, in use): each can be forgotten here.
const showMemories = () =>
  memoryList("memory-list", "/api/memory", "Nothing yet.", (entry, settle) => {
    const forget = Object.assign(document.createElement("button"), { type: "button", textContent: "Forget", className: "danger" });
    forget.setAttribute("aria-label", `Forget ${visible(entry.key)}`);
    forget.addEventListener("click", () => settle(`/api/memory/${encodeURIComponent(entry.key)}/forget`, {}));
    return [text(entry), forget];
  });

// Memory entries from turns that read untrusted content: each confirmed or dropped here.
const showMemoryReview = () =>
  memoryList("memory-waiting", "/api/memory/review", "Nothing waits for review.", (entry, settle) => {
    const from = Object.assign(document.createElement("p"), {
      className: "hint",
      textContent: visible(`From: ${entry.came_from || "content from outside"}`),
    });
    const buttons = document.createElement("div");
    buttons.className = "buttons";
    for (const [decision, label] of [["confirm", "Confirm"], ["drop", "Drop"]]) {
      const button = Object.assign(document.createElement("button"), { type: "button", textContent: label });
      button.dataset.decision = decision;
      button.addEventListener("click", () => settle(`/api/memory/review/${encodeURIComponent(entry.key)}`, { decision }));
      buttons.append(button);
    }
    return [from, text(entry), buttons];
  });

$("settings-close").addEventListener("click", () => $("settings").close());
$("theme").addEventListener("change", () => {
  localStorage.setItem("theme", $("theme").value);
  window.applyTheme();
});
$("settings-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  // Only what changed: a profile's own way of writing its channel stays as it is.
  const body = {};
  const name = $("display-name").value.trim();
  if (name !== (state.me.name || "")) body.name = name;
  const channel = $("preferred-channel").value;
  if (channel !== (state.me.preferred_channel || "")) body.preferred_channel = channel;
  try {
    Object.assign(state.me, await api("/api/settings", { method: "POST", body }));
    showMe();
    $("settings-status").textContent = "Saved.";
    $("settings").close();
    announce("Settings saved.");
  } catch (error) {
    $("settings-status").textContent = error.message;
  }
});
