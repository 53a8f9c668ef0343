// The side bar: the place's conversations (searched by title, grouped by date), the rooms,
// and on a phone the side bar itself, which slides over the conversation and closes by its
// button, the backdrop, a swipe to the left or Esc.

import { $, api, input, state } from "./state.js";
import { dateGroup, visible, when } from "./text.js";
import { follow, open, problem } from "./conversation.js";

// --- on a phone ---------------------------------------------------------------------------------

export function openSidebar() {
  document.body.classList.add("menu-open");
  $("menu").setAttribute("aria-expanded", "true");
  $("backdrop").hidden = false;
}

export function closeSidebar() {
  if (!document.body.classList.contains("menu-open")) return false;
  document.body.classList.remove("menu-open");
  $("menu").setAttribute("aria-expanded", "false");
  $("backdrop").hidden = true;
  return true;
}

$("menu").addEventListener("click", () => {
  if (document.body.classList.contains("menu-open")) closeSidebar();
  else {
    openSidebar();
    $("new").focus();
  }
});
$("close-menu").addEventListener("click", () => {
  closeSidebar();
  $("menu").focus();
});
$("backdrop").addEventListener("click", closeSidebar);
let swipe = null;
$("sidebar").addEventListener("touchstart", (event) => {
  const touch = event.touches[0];
  swipe = { x: touch.clientX, y: touch.clientY };
}, { passive: true });
$("sidebar").addEventListener("touchend", (event) => {
  const touch = event.changedTouches[0];
  if (swipe && swipe.x - touch.clientX > 60 && Math.abs(touch.clientY - swipe.y) < 60) closeSidebar();
  swipe = null;
}, { passive: true });

// --- conversations --------------------------------------------------------------------------------

// Marks another conversation of this place as having news; a new one joins the list first.
export async function markUnread(session) {
  if (state.unread.has(session)) return;
  state.unread.add(session);
  const find = () => $("sessions").querySelector(`[data-id="${CSS.escape(session)}"]`);
  if (!find()) await refreshSessions();
  find()?.classList.add("unread");
}

// The side bar's conversations anew; one refresh at a time (a second asks once more after it).
let refreshing = null;
let again = false;
export async function refreshSessions() {
  if (refreshing) {
    again = true;
    return refreshing;
  }
  refreshing = (async () => {
    do {
      again = false;
      await drawSessions();
    } while (again);
  })().finally(() => {
    refreshing = null;
  });
  return refreshing;
}

let listed = [];

async function drawSessions() {
  try {
    listed = (await api("/api/sessions")).sessions;
  } catch (error) {
    problem(error.message);
    return;
  }
  drawList();
}

function sessionButton(session) {
  const b = document.createElement("button");
  b.type = "button";
  b.dataset.id = session.id;
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = visible(session.title || "Untitled conversation");
  const meta = document.createElement("span");
  meta.className = "meta";
  const status = session.status === "active" ? "" : `${session.status} · `;
  meta.textContent = `${status}${when(session.last_activity || session.created)}`;
  b.append(name, meta);
  if (state.unread.has(session.id)) b.classList.add("unread");
  if (session.id === state.session) {
    b.setAttribute("aria-current", "page");
    $("title").textContent = visible(session.title || "Conversation");
  }
  b.addEventListener("click", async () => {
    if (session.status === "archived" || session.status === "idle") {
      await api(`/api/sessions/${encodeURIComponent(session.id)}/resume`, { method: "POST" }).catch((e) => problem(e.message));
      refreshSessions();
    }
    open(session.id);
    closeSidebar();
  });
  return b;
}

// The list as searched: titles containing every word typed, in date groups, newest first.
function drawList() {
  const words = $("search").value.toLowerCase().split(/\s+/).filter(Boolean);
  const matches = (session) => words.every((word) => (session.title || "untitled conversation").toLowerCase().includes(word));
  const here = listed
    .filter((session) => session.room === state.room && matches(session))
    .sort((a, b) => String(b.last_activity || b.created).localeCompare(String(a.last_activity || a.created)));
  const groups = new Map();
  for (const session of here.filter((session) => session.status !== "archived")) {
    const group = dateGroup(session.last_activity || session.created);
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(session);
  }
  const sections = [];
  for (const [group, sessions] of groups) {
    const heading = document.createElement("h3");
    heading.className = "group";
    heading.textContent = group;
    const list = document.createElement("ul");
    list.className = "list";
    list.setAttribute("aria-label", group);
    for (const session of sessions) {
      const li = document.createElement("li");
      li.append(sessionButton(session));
      list.append(li);
    }
    sections.push(heading, list);
  }
  $("sessions").replaceChildren(...sections);
  const archived = here.filter((session) => session.status === "archived");
  $("archived").replaceChildren(
    ...archived.map((session) => {
      const li = document.createElement("li");
      li.append(sessionButton(session));
      return li;
    }),
  );
  $("archived-count").textContent = `Archived (${archived.length})`;
  $("archived-box").hidden = archived.length === 0;
  $("no-match").hidden = !(words.length && here.length === 0);
}

// What was said in the place's conversations that matches, best first (the daemon's search
// index), below the titles that match; asked once typing pauses.
let saidTimer = null;
let saidAsked = 0;
async function drawSaid() {
  const words = $("search").value.trim();
  const asked = ++saidAsked;
  if (words.length < 3) {
    $("said-box").hidden = true;
    $("said").replaceChildren();
    return;
  }
  const room = state.room ? `&room=${encodeURIComponent(state.room)}` : "";
  let found;
  try {
    found = await api(`/api/search?q=${encodeURIComponent(words)}${room}`);
  } catch (e) {
    problem(e.message);
    return;
  }
  if (asked !== saidAsked) return;
  const items = found.hits.map((hit) => {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = visible(hit.text.replace(/\s+/g, " ").slice(0, 140));
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.textContent = `${visible(hit.title || "Conversation")} · ${hit.role === "user" ? "said" : "answered"} ${when(hit.at)}`;
    b.append(name, meta);
    b.addEventListener("click", () => {
      open(hit.session);
      closeSidebar();
    });
    li.append(b);
    return li;
  });
  $("said").replaceChildren(...items);
  $("said-box").hidden = items.length === 0;
}

$("search").addEventListener("input", () => {
  drawList();
  clearTimeout(saidTimer);
  saidTimer = setTimeout(drawSaid, 250);
});
$("search").addEventListener("keydown", (event) => {
  if (event.key === "Enter") {
    event.preventDefault();
    $("sessions").querySelector("button")?.click();
  } else if (event.key === "Escape" && $("search").value) {
    event.stopPropagation();
    $("search").value = "";
    drawList();
    drawSaid();
  }
});

// Ctrl+K (⌘K on a Mac): to the search, with the side bar open on a phone.
export function focusSearch() {
  openSidebar();
  $("search").focus();
  $("search").select();
}

// --- rooms -------------------------------------------------------------------------------------------

export async function refreshRooms() {
  try {
    const answer = await api("/api/rooms");
    state.rooms = answer.rooms;
    // Making rooms is for admins: the form is not on anyone else's page.
    $("new-room-box").hidden = !answer.admin;
  } catch (error) {
    problem(error.message);
    return;
  }
  const list = $("rooms");
  list.replaceChildren();
  const own = document.createElement("li");
  const mine = document.createElement("button");
  mine.type = "button";
  mine.textContent = "Your conversations";
  if (!state.room) mine.setAttribute("aria-current", "page");
  mine.addEventListener("click", () => enter(""));
  own.append(mine);
  list.append(own);
  for (const room of state.rooms.filter((room) => room.member)) {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.room = room.id;
    b.textContent = visible(room.active ? room.name || room.id : `${room.name || room.id} (read-only)`);
    if (room.id === state.room) b.setAttribute("aria-current", "page");
    b.addEventListener("click", () => enter(room.id));
    li.append(b);
    list.append(li);
  }
}

export async function enter(room) {
  state.room = room;
  state.session = "";
  const info = state.rooms.find((r) => r.id === room);
  const readOnly = Boolean(info && !info.active);
  for (const id of ["input", "send", "attach"]) $(id).disabled = readOnly;
  input.placeholder = readOnly ? `This room is closed${info.why ? `: ${info.why}` : ""}. You can read it.` : "Write a message";
  await refreshRooms();
  follow();
  await refreshSessions();
  const first = $("sessions").querySelector("button");
  await open(first ? first.dataset.id : "");
  closeSidebar();
}

$("new-room").addEventListener("submit", async (event) => {
  event.preventDefault();
  const members = $("room-members").value.split(/[\s,]+/).filter(Boolean);
  try {
    const body = { id: $("room-id").value, name: $("room-name").value, members };
    const room = await api("/api/rooms", { method: "POST", body });
    event.target.reset();
    $("new-room-box").open = false;
    await refreshRooms();
    await enter(room.id);
  } catch (error) {
    problem(error.message);
  }
});
