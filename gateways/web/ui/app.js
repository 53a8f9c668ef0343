// baaaht's web UI: conversations and rooms on the side, the open conversation in the middle.
// Events come over Server-Sent Events (the browser's EventSource sends Last-Event-ID when it
// reconnects, so a blip loses no words); everything else is the page's JSON API, each change
// carrying the session's CSRF token. No framework, no build step: the gateway serves these
// files as they are. This module wires the page together: its shortcuts, the conversation's
// menu, and the start.
//
// state.js     the page's elements, what is open, the API
// conversation.js  the open conversation, its events, branches, scrolling
// sidebar.js   conversations (search, date groups), rooms, the side bar on a phone
// composer.js  writing, files, sending, the first screen
// models.js    the model picker
// settings.js  the settings dialog
// push.js      notifications on the person's devices (the service worker is sw.js)
// text.js      visible bidirectional controls, sizes, dates, avatars
// markdown.js  finished answers as markdown, their code and artifacts

import { $, api, input, log, state } from "./state.js";
import "./push.js";
import { bubble, editLast, follow, open, problem, stopAll } from "./conversation.js";
import { closeSidebar, focusSearch, refreshRooms, refreshSessions } from "./sidebar.js";
import { grow, send } from "./composer.js";
import { showMe } from "./settings.js";

// --- the keyboard ---------------------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  } else if (event.key === "ArrowUp" && !input.value && !event.isComposing) {
    // (In an empty box the arrow has nowhere to go.)
    event.preventDefault();
    editLast();
  }
});
document.addEventListener("keydown", (event) => {
  if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "k") {
    event.preventDefault();
    focusSearch();
    return;
  }
  if (event.key !== "Escape" || event.defaultPrevented) return;
  // Esc closes what is open (a menu, the side bar on a phone), else stops the answer.
  if ($("settings").open) return;
  if ($("more").open) {
    $("more").open = false;
    $("more").querySelector("summary").focus();
  } else if (closeSidebar()) {
    $("menu").focus();
  } else if (state.running.size) {
    event.preventDefault();
    stopAll();
  }
});
$("stop").addEventListener("click", stopAll);

// --- the conversation's menu ------------------------------------------------------------------------

document.addEventListener("click", (event) => {
  if ($("more").open && !$("more").contains(event.target)) $("more").open = false;
});
$("more").addEventListener("click", (event) => {
  if (event.target.closest(".items button, .items a")) $("more").open = false;
});
$("new").addEventListener("click", async () => {
  closeSidebar();
  await open("");
  input.focus();
});
$("archive").addEventListener("click", async () => {
  try {
    await api(`/api/sessions/${encodeURIComponent(state.session)}/archive`, { method: "POST" });
    await refreshSessions();
    await open("");
  } catch (error) {
    problem(error.message);
  }
});
$("compact").addEventListener("click", async () => {
  try {
    await api(`/api/sessions/${encodeURIComponent(state.session)}/compact`, { method: "POST" });
    bubble("notice", "Earlier messages will be summarized.");
  } catch (error) {
    problem(error.message);
  }
});
$("tree-toggle").addEventListener("click", () => {
  const tree = $("tree");
  tree.hidden = !tree.hidden;
  $("tree-toggle").setAttribute("aria-expanded", String(!tree.hidden));
});
$("replying-cancel").addEventListener("click", () => {
  input.value = "";
  grow();
  open(state.session);
});
for (const [id, format] of [
  ["export-md", "md"],
  ["export-html", "html"],
]) {
  // The export is of the branch on screen, as it is now.
  $(id).addEventListener("click", () => {
    $(id).href = `/api/sessions/${encodeURIComponent(state.session)}/export?format=${format}&leaf=${encodeURIComponent(state.leaf)}`;
  });
}

// --- the start -------------------------------------------------------------------------------------

state.me = await api("/api/me");
showMe();
await refreshRooms();
follow();
await refreshSessions();
// Where the app was opened for: a notification's conversation, the installed app's shortcuts
// (a new conversation; the approvals waiting), else the newest conversation.
const asked = new URLSearchParams(window.location.search);
let opening = $("sessions").querySelector("button")?.dataset.id || "";
if (asked.has("session")) opening = asked.get("session");
if (asked.has("new")) opening = "";
if (asked.has("approvals")) {
  const waiting = await api("/api/approvals").then((answer) => answer.waiting).catch(() => []);
  if (waiting.length) opening = waiting[waiting.length - 1].session;
}
if (asked.size) history.replaceState(null, "", "/");
await open(opening);
if (asked.has("approvals") && !log.querySelector(".approval button")) bubble("notice", "Nothing waits for your answer.");
input.focus();
