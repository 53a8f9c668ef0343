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

// What the assistant remembers (confirmed, in use): each can be forgotten here.
async function showMemories() {
  const list = $("memory-list");
  list.replaceChildren();
  let kept;
  try {
    kept = (await api("/api/memory")).entries;
  } catch (error) {
    list.append(Object.assign(document.createElement("li"), { textContent: error.message }));
    return;
  }
  if (!kept.length) {
    list.append(Object.assign(document.createElement("li"), { className: "hint", textContent: "Nothing yet." }));
    return;
  }
  for (const entry of kept) {
    const item = document.createElement("li");
    item.className = "memory-entry";
    item.dataset.key = entry.key;
    const title = Object.assign(document.createElement("strong"), { textContent: visible(entry.key) });
    const text = Object.assign(document.createElement("p"), { textContent: entry.content });
    const forget = Object.assign(document.createElement("button"), { type: "button", textContent: "Forget", className: "danger" });
    forget.setAttribute("aria-label", `Forget ${visible(entry.key)}`);
    forget.addEventListener("click", async () => {
      try {
        const done = await api(`/api/memory/${encodeURIComponent(entry.key)}/forget`, { method: "POST", body: {} });
        item.replaceChildren(Object.assign(document.createElement("p"), { className: "hint", textContent: done.message }));
        announce(done.message);
      } catch (error) {
        announce(error.message);
      }
    });
    item.append(title, text, forget);
    list.append(item);
  }
}

// Memory entries from turns that read untrusted content: each confirmed or dropped here.
async function showMemoryReview() {
  const list = $("memory-waiting");
  list.replaceChildren();
  let waiting;
  try {
    waiting = (await api("/api/memory/review")).entries;
  } catch (error) {
    list.append(Object.assign(document.createElement("li"), { textContent: error.message }));
    return;
  }
  if (!waiting.length) {
    list.append(Object.assign(document.createElement("li"), { className: "hint", textContent: "Nothing waits for review." }));
    return;
  }
  for (const entry of waiting) {
    const item = document.createElement("li");
    item.className = "memory-entry";
    item.dataset.key = entry.key;
    const title = Object.assign(document.createElement("strong"), { textContent: visible(entry.key) });
    const from = Object.assign(document.createElement("p"), {
      className: "hint",
      textContent: visible(`From: ${entry.came_from || "content from outside"}`),
    });
    const text = Object.assign(document.createElement("p"), { textContent: entry.content });
    const buttons = document.createElement("div");
    buttons.className = "buttons";
    for (const [decision, label] of [["confirm", "Confirm"], ["drop", "Drop"]]) {
      const button = Object.assign(document.createElement("button"), { type: "button", textContent: label });
      button.dataset.decision = decision;
      button.addEventListener("click", async () => {
        try {
          const done = await api(`/api/memory/review/${encodeURIComponent(entry.key)}`, { method: "POST", body: { decision } });
          item.replaceChildren(Object.assign(document.createElement("p"), { className: "hint", textContent: done.message }));
          announce(done.message);
        } catch (error) {
          $("settings-status").textContent = error.message;
        }
      });
      buttons.append(button);
    }
    item.append(title, from, text, buttons);
    list.append(item);
  }
}

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
