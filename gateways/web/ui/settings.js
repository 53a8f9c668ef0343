// Settings: the name others see and where scheduled results go are kept by the daemon; the
// theme by this browser, applied as it is chosen. Memory written from untrusted content waits
// here for the user to confirm or drop it; scheduled tasks are paused, resumed or cancelled.

import { $, api, announce, state } from "./state.js";
import { avatar, visible } from "./text.js";
import { savePush, showPush } from "./push.js";

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
  showTasks();
  showPush();
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

// A time the daemon gave (RFC 3339) as this browser says it; "" when there is none.
const when = (at) => (at ? new Date(at).toLocaleString([], { dateStyle: "medium", timeStyle: "short" }) : "");

// The user's scheduled tasks and their rooms': when each runs next, how it last went, and
// what can be done with it. An action's sentence is announced and the list read again.
async function showTasks() {
  const list = $("task-list");
  list.replaceChildren();
  let tasks;
  try {
    tasks = (await api("/api/tasks")).tasks;
  } catch (error) {
    list.append(Object.assign(document.createElement("li"), { textContent: error.message }));
    return;
  }
  if (!tasks.length) {
    list.append(Object.assign(document.createElement("li"), { className: "hint", textContent: "No scheduled tasks." }));
    return;
  }
  for (const task of tasks) {
    const item = document.createElement("li");
    item.className = "task";
    item.dataset.id = task.id;
    item.dataset.status = task.status;
    const facts = [task.owner === "you" ? "yours" : `room ${task.owner}`, task.schedule, task.status];
    if (task.status === "active" && task.next_run) facts.push(`next ${when(task.next_run)}`);
    if (task.last) facts.push(`last ${task.last.outcome || "running"}${task.last.ended ? ` ${when(task.last.ended)}` : ""}`);
    const buttons = document.createElement("div");
    buttons.className = "buttons";
    const actions = task.status === "paused" ? [["resume", "Resume"]] : task.status === "active" ? [["pause", "Pause"]] : [];
    if (task.kind === "scheduled") actions.push(["cancel", "Cancel"]);
    for (const [action, label] of actions) {
      const button = Object.assign(document.createElement("button"), { type: "button", textContent: label });
      if (action === "cancel") button.className = "danger";
      button.dataset.action = action;
      button.setAttribute("aria-label", `${label} ${visible(task.name)}`);
      button.addEventListener("click", async () => {
        try {
          const done = await api(`/api/tasks/${encodeURIComponent(task.id)}/${action}`, { method: "POST", body: {} });
          announce(done.message);
          $("settings-status").textContent = done.message;
          showTasks();
        } catch (error) {
          $("settings-status").textContent = error.message;
        }
      });
      buttons.append(button);
    }
    item.append(
      Object.assign(document.createElement("strong"), { textContent: visible(task.name) }),
      Object.assign(document.createElement("p"), { className: "hint", textContent: visible(facts.filter(Boolean).join(" · ")) }),
    );
    if (task.last?.error) {
      item.append(Object.assign(document.createElement("p"), { className: "hint", textContent: visible(task.last.error) }));
    }
    item.append(buttons);
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
    await savePush();
    showMe();
    $("settings-status").textContent = "Saved.";
    $("settings").close();
    announce("Settings saved.");
  } catch (error) {
    $("settings-status").textContent = error.message;
  }
});
