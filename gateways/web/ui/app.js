// baaaht's web UI: conversations and rooms on the side, the open conversation in the middle.
// Events come over Server-Sent Events (the browser's EventSource sends Last-Event-ID when it
// reconnects, so a blip loses no words); everything else is the page's JSON API, each change
// carrying the session's CSRF token. No framework, no build step: the gateway serves these
// files as they are.

import { render } from "./markdown.js";

// The page's own elements, taken once at the start (nothing an answer shows can stand in).
const elements = new Map();
for (const element of document.querySelectorAll("[id]")) elements.set(element.id, element);
const $ = (id) => elements.get(id);
const csrf = $("composer").dataset.csrf;
const log = $("log");
const input = $("input");

const state = {
  me: null,
  room: "", // the room open, "" for the user's own conversations
  rooms: [],
  session: "", // the conversation open
  leaf: "", // the entry the next message answers, when a branch was chosen ("" = the newest)
  pending: [], // the page's own messages, shown before the daemon has them
  unread: new Set(), // conversations with news not yet seen
  generation: 0, // counts open() calls: a read that finished after a newer one is dropped
  creating: null, // a conversation being created for the page's first message or upload
  entries: [], // the open conversation's entries, every branch
  running: new Set(), // turns of the open conversation still running
  answers: new Map(), // turn → its answer's element
  attachments: [], // uploaded, waiting for the next message
  uploads: Promise.resolve(), // the uploads in progress: a message sent meanwhile waits for them
  events: null,
};

// --- the API -------------------------------------------------------------------------------

async function api(path, { method = "GET", body, raw, type } = {}) {
  const headers = {};
  if (method !== "GET") headers["x-csrf-token"] = csrf;
  if (body !== undefined) headers["content-type"] = "application/json";
  if (raw !== undefined) headers["content-type"] = type || "application/octet-stream";
  const answer = await fetch(path, {
    method,
    headers,
    body: raw !== undefined ? raw : body !== undefined ? JSON.stringify(body) : undefined,
  });
  if (answer.status === 401) {
    window.location.assign("/login");
    throw new Error("Sign in again.");
  }
  const json = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new Error(json.error || "That did not work; try again.");
  return json;
}

// Says `text` to screen readers (the conversation itself is not read out word by word).
function announce(text) {
  $("status").textContent = text;
}

function problem(text) {
  const element = bubble("error", text);
  element.setAttribute("role", "alert");
}

const roomQuery = () => (state.room ? `&room=${encodeURIComponent(state.room)}` : "");

// --- the conversation --------------------------------------------------------------------

function bubble(kind, text) {
  const element = document.createElement("article");
  element.className = `bubble ${kind}`;
  if (text !== undefined) {
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    element.append(body);
  }
  log.append(element);
  element.scrollIntoView({ block: "end" });
  return element;
}

function textOf(element) {
  let body = element.querySelector(":scope > .text");
  if (!body) {
    body = document.createElement("div");
    body.className = "text";
    element.append(body);
  }
  return body;
}

// The buttons under a finished message: copy, retry (answers), answer from here, fork.
function actions(element, entry, { retry } = {}) {
  element.dataset.entry = entry.id;
  const bar = document.createElement("div");
  bar.className = "actions";
  const button = (label, title, act) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.title = title;
    b.addEventListener("click", act);
    bar.append(b);
    return b;
  };
  button("Copy", "Copy this message", () => navigator.clipboard.writeText(entry.text || ""));
  if (retry) button("Retry", "Ask again (a new branch)", () => retryAnswer(entry));
  button("Reply here", "Answer from this message (a new branch)", () => branchAt(entry.id));
  button("Fork", "A new conversation from this message", () => forkAt(entry.id));
  element.append(bar);
}

// A user message's own words: without the daemon's note of each attached file (what the
// agents read: "[attached: PATH (TYPE, SIZE) in the session's workspace]").
function wordsOf(entry) {
  const notes = (entry.attachments || []).map((file) => `[attached: ${file.path} (`);
  return (entry.text || "")
    .split("\n")
    .filter((line) => !notes.some((note) => line.startsWith(note)))
    .join("\n")
    .trim();
}

// A file's size as the daemon writes it.
function size(bytes) {
  if (bytes < 1e3) return `${bytes} bytes`;
  if (bytes < 1e6) return `${(bytes / 1e3).toFixed(1)} KB`;
  if (bytes < 1e9) return `${(bytes / 1e6).toFixed(1)} MB`;
  return `${(bytes / 1e9).toFixed(1)} GB`;
}

function showUser(entry) {
  const element = bubble(entry.mine ? "user" : "user other");
  if (state.room) {
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = entry.name || "someone";
    element.append(who);
  }
  const files = entry.attachments || [];
  textOf(element).textContent = wordsOf(entry);
  if (files.length) {
    const list = document.createElement("ul");
    list.className = "files";
    list.setAttribute("aria-label", "Attached files");
    for (const file of files) {
      const item = document.createElement("li");
      item.textContent = `📎 ${file.filename} (${file.mime_type}, ${size(file.size_bytes)})`;
      list.append(item);
    }
    element.append(list);
  }
  actions(element, entry);
  return element;
}

// Where the HTML and SVG of answer `entry` in the open conversation are served.
const artifactsOf = (entry) =>
  state.session && entry
    ? `/api/sessions/${encodeURIComponent(state.session)}/entries/${encodeURIComponent(entry)}/artifacts/`
    : "";

function showAnswer(entry) {
  const element = bubble("assistant");
  render(textOf(element), entry.text, artifactsOf(entry.id));
  element.classList.add("done");
  actions(element, entry, { retry: true });
  return element;
}

function answerOf(turn) {
  let element = state.answers.get(turn);
  if (!element) {
    element = bubble("assistant");
    element.dataset.turn = turn;
    element.setAttribute("aria-busy", "true");
    state.answers.set(turn, element);
  }
  return element;
}

// Delegations and tool calls, one line each: who, what, running or finished, how long.
function progress(turn, key, text, stateName) {
  const element = answerOf(turn);
  let list = element.querySelector(":scope > .progress");
  if (!list) {
    list = document.createElement("ul");
    list.className = "progress";
    list.setAttribute("aria-label", "What the assistant is doing");
    element.prepend(list);
  }
  let line = [...list.children].find((item) => item.dataset.key === key);
  if (!line) {
    line = document.createElement("li");
    line.dataset.key = key;
    list.append(line);
  }
  line.className = stateName;
  line.textContent = text;
}

function running(turn, on) {
  if (on) state.running.add(turn);
  else state.running.delete(turn);
  $("stop").hidden = state.running.size === 0;
}

const ANSWERS = [
  ["once", "Allow once"],
  ["session", "For this conversation"],
  ["always", "Always"],
  ["deny", "Deny"],
];
const SETTLED = { once: "Allowed once", session: "Allowed for this conversation", always: "Allowed always (a rule)", deny: "Denied" };

// A connection waiting for someone to allow it: a card with the answers as buttons.
function approvalCard(event) {
  const card = bubble("approval");
  card.dataset.approval = event.id;
  card.setAttribute("role", "group");
  card.setAttribute("aria-label", "Approval request");
  const text = document.createElement("p");
  text.className = "text";
  const command = (event.asked_by || "").split("\n")[0];
  text.textContent = `The ${event.agent}'s tools want to reach ${event.host}:${event.port}` +
    (command ? ` for \u201c${command.length > 80 ? `${command.slice(0, 79)}\u2026` : command}\u201d` : "") + ".";
  const note = document.createElement("p");
  note.className = "meta";
  note.textContent = `Denied in ${event.expires_in} s without an answer.`;
  const buttons = document.createElement("div");
  buttons.className = "answers";
  for (const [decision, label] of ANSWERS) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = label;
    button.dataset.decision = decision;
    if (decision === "deny") button.className = "danger";
    button.addEventListener("click", async () => {
      for (const other of buttons.querySelectorAll("button")) other.disabled = true;
      try {
        await api(`/api/approvals/${encodeURIComponent(event.id)}`, { method: "POST", body: { decision } });
      } catch (error) {
        note.textContent = error.message;
        for (const other of buttons.querySelectorAll("button")) other.disabled = false;
      }
    });
    buttons.append(button);
  }
  card.append(text, note, buttons);
  announce(text.textContent);
}

function approvalSettled(event) {
  const card = log.querySelector(`[data-approval="${CSS.escape(event.id)}"]`);
  if (!card) return;
  card.querySelector(".answers")?.remove();
  const note = card.querySelector(".meta");
  const by = event.by === "nobody" ? "nobody answered in time" : `by ${event.by}`;
  note.textContent = `${SETTLED[event.decision] || event.decision}, ${by}.`;
  card.classList.add(event.decision === "deny" ? "denied" : "allowed");
}

function onEvent(event) {
  // Approval requests are for whoever is here, whichever conversation is open.
  if (event.type === "approval") return approvalCard(event);
  if (event.type === "settled") return approvalSettled(event);
  // Only the conversation open here is shown; another one is marked in the side bar.
  if (event.session && event.session !== state.session) {
    markUnread(event.session);
    return;
  }
  switch (event.type) {
    case "user": {
      // The page's own message, shown as it was sent, now has its place in the conversation.
      const mine = event.mine;
      const pending = mine ? state.pending.shift() : null;
      const shown = showUser({
        id: event.entry,
        text: event.text,
        name: event.name,
        mine: event.mine,
        attachments: event.attachments,
      });
      if (pending) pending.replaceWith(shown);
      if (!state.entries.length) refreshSessions();
      if (mine) {
        state.leaf = "";
        $("replying").hidden = true;
      }
      running(event.turn, true);
      break;
    }
    case "delta": {
      const element = answerOf(event.turn);
      // The live tail is plain text; the finished answer is rendered (no flicker).
      textOf(element).append(document.createTextNode(event.text));
      element.scrollIntoView({ block: "end" });
      break;
    }
    case "reply": {
      const element = answerOf(event.turn);
      element.removeAttribute("aria-busy");
      const entry = { id: event.entry, text: event.text };
      render(textOf(element), event.text, artifactsOf(event.entry));
      element.classList.add("done");
      actions(element, entry, { retry: true });
      running(event.turn, false);
      announce("The answer is complete.");
      reloadEntries();
      break;
    }
    case "delegation": {
      const task = (event.task || "").split("\n")[0].slice(0, 80);
      const verb = { started: "working on", finished: "finished", failed: "failed" }[event.state] || event.state;
      progress(event.turn, `d:${event.agent}:${task}`, `${event.agent} ${verb}: ${task}`, event.state);
      break;
    }
    case "tool": {
      const took = event.ms ? ` (${event.ms < 1000 ? `${event.ms} ms` : `${(event.ms / 1000).toFixed(1)} s`})` : "";
      progress(event.turn, `t:${event.agent}:${event.tool}`, `${event.agent} · ${event.tool}: ${event.state}${took}`, event.state);
      break;
    }
    case "error": {
      const element = answerOf(event.turn);
      element.removeAttribute("aria-busy");
      element.classList.add("failed");
      const note = document.createElement("p");
      note.className = "failure";
      note.setAttribute("role", "alert");
      note.textContent = event.text;
      element.append(note);
      running(event.turn, false);
      break;
    }
    case "tainted": {
      const paused = (event.withheld || []).join(", ");
      progress(event.turn, "taint", `Reading untrusted content: some tools are paused (${paused}). Source: ${event.source}`, "tainted");
      announce("Reading untrusted content: some tools are paused.");
      break;
    }
    case "message":
    case "notice":
      bubble("notice", event.text);
      break;
  }
}

function follow() {
  if (state.events) state.events.close();
  const events = new EventSource(`/api/events?${roomQuery().slice(1)}`);
  events.onmessage = (message) => onEvent(JSON.parse(message.data));
  events.onopen = () => {
    // Back on a new stream after it closed (it resumes from nothing, not from Last-Event-ID):
    // what was missed is read from the conversation itself.
    if (state.broken) open(state.session, state.leaf);
    state.retryIn = 1000;
    state.broken = false;
  };
  events.onerror = async () => {
    // Closed for good (signed out, expired): back to the sign-in when that is why; else
    // follow again, waiting longer each time.
    if (events.readyState !== EventSource.CLOSED) return;
    state.broken = true;
    try {
      const me = await fetch("/api/me");
      if (me.status === 401) {
        window.location.assign("/login");
        return;
      }
    } catch {
      // Offline: try again below.
    }
    const wait = state.retryIn || 1000;
    state.retryIn = Math.min(wait * 2, 30000);
    setTimeout(() => state.events === events && follow(), wait);
  };
  state.events = events;
}

// The branch from the root to `leaf` (or to the newest entry).
function branch(entries, leaf) {
  const byId = new Map(entries.map((entry) => [entry.id, entry]));
  let at = byId.get(leaf) || entries[entries.length - 1];
  const path = [];
  while (at && path.length <= entries.length) {
    path.push(at);
    at = byId.get(at.parent);
  }
  return path.reverse();
}

function show(entries) {
  log.replaceChildren();
  state.answers.clear();
  for (const entry of entries) {
    if (entry.kind === "message" && entry.role === "user") showUser(entry);
    else if (entry.kind === "message" && entry.role === "assistant") showAnswer(entry);
    else if (entry.kind === "delegation") {
      const element = bubble("notice", `${entry.agent}: ${(entry.task || "").split("\n")[0]}`);
      element.classList.add("delegation");
    } else if (entry.kind === "compaction") bubble("notice", "Earlier messages were summarized.");
    else if (entry.kind === "model") bubble("notice", `Model: ${entry.to}`);
  }
}

async function open(id, leaf = "") {
  const generation = ++state.generation;
  state.session = id;
  state.leaf = leaf;
  state.running.clear();
  running("", false);
  state.attachments = [];
  state.pending = [];
  drawAttachments();
  $("bar").hidden = !id;
  if (!id) {
    log.replaceChildren();
    $("title").textContent = state.room ? roomName(state.room) : "New conversation";
    return;
  }
  try {
    const read = await api(`/api/sessions/${encodeURIComponent(id)}`);
    if (generation !== state.generation) return; // something else was opened meanwhile
    state.entries = read.entries;
    $("title").textContent = read.session.title || "Conversation";
    $("model").value = read.session.model || "";
    const shown = branch(read.entries, leaf);
    show(shown);
    drawTree();
    // A turn still running (sent from here before a reload, or from another channel) can be
    // stopped here too.
    for (const turn of read.running || []) running(turn, true);
    state.unread.delete(id);
    for (const item of $("sessions").querySelectorAll("[aria-current]")) item.removeAttribute("aria-current");
    const item = $("sessions").querySelector(`[data-id="${CSS.escape(id)}"]`);
    item?.setAttribute("aria-current", "page");
    item?.classList.remove("unread");
  } catch (error) {
    problem(error.message);
  }
}

// --- branches and forks ------------------------------------------------------------------

// The newest entry under `id`: following the latest child to the end.
function newestUnder(id) {
  let at = id;
  for (;;) {
    const children = state.entries.filter((entry) => entry.parent === at);
    if (!children.length) return at;
    at = children[children.length - 1].id;
  }
}

function drawTree() {
  const tree = $("tree");
  const known = new Set(state.entries.map((entry) => entry.id));
  const children = new Map();
  for (const entry of state.entries) {
    const parent = known.has(entry.parent) ? entry.parent : "";
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(entry);
  }
  const current = new Set(branch(state.entries, state.leaf).map((entry) => entry.id));
  // Messages only; what sits between them (delegations, summaries) is passed through.
  const list = (parent) => {
    const items = [];
    for (const entry of children.get(parent) || []) {
      if (entry.kind !== "message") {
        items.push(...list(entry.id));
        continue;
      }
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      const who = entry.role !== "user" ? "Assistant" : entry.mine ? "You" : entry.name || "Someone";
      b.textContent = `${who}: ${(entry.text || "").slice(0, 60)}`;
      b.dataset.entry = entry.id;
      if (current.has(entry.id)) b.setAttribute("aria-current", "true");
      b.addEventListener("click", () => {
        $("replying").hidden = true;
        open(state.session, newestUnder(entry.id));
      });
      li.append(b);
      const below = list(entry.id);
      if (below.length) {
        const ul = document.createElement("ul");
        ul.append(...below);
        li.append(ul);
      }
      items.push(li);
    }
    return items;
  };
  const top = document.createElement("ul");
  top.append(...list(""));
  const leaves = state.entries.filter((entry) => !state.entries.some((other) => other.parent === entry.id)).length;
  $("tree-toggle").textContent = `Branches (${leaves})`;
  tree.replaceChildren(top);
}

// The open conversation's entries anew (after an answer), for the tree.
async function reloadEntries() {
  const session = state.session;
  if (!session) return;
  try {
    const entries = (await api(`/api/sessions/${encodeURIComponent(session)}`)).entries;
    if (session !== state.session) return; // another conversation was opened meanwhile
    state.entries = entries;
    drawTree();
  } catch {
    // The tree stays as it was; the next answer tries again.
  }
}

function branchAt(entry) {
  const found = state.entries.find((e) => e.id === entry);
  show(branch(state.entries, entry));
  state.leaf = entry;
  drawTree();
  $("replying").hidden = false;
  $("replying-text").textContent = `Answering: ${(found?.text || "").slice(0, 80)}`;
  input.focus();
}

async function forkAt(entry) {
  try {
    const forked = await api(`/api/sessions/${encodeURIComponent(state.session)}/fork`, { method: "POST", body: { entry } });
    await refreshSessions();
    await open(forked.id);
  } catch (error) {
    problem(error.message);
  }
}

async function retryAnswer(answer) {
  // The question the answer was for (the nearest message of the user's above it, past any
  // delegation or summary), asked again under the same parent: a new branch.
  const byId = new Map(state.entries.map((entry) => [entry.id, entry]));
  let question = byId.get(byId.get(answer.id)?.parent);
  while (question && !(question.kind === "message" && question.role === "user")) question = byId.get(question.parent);
  if (!question) {
    problem("This answer is still being saved; try again in a moment.");
    return;
  }
  // A first question's parent is the conversation itself: the new branch starts at the root.
  show(byId.has(question.parent) ? branch(state.entries, question.parent) : []);
  state.leaf = question.parent;
  // The question as it was asked: its words and its files.
  await send(wordsOf(question), { retry: question.attachments || [] });
}

// --- sending ------------------------------------------------------------------------------

// The open conversation, created first when there is none (once, however many messages and
// uploads ask at the same time).
async function ensureSession() {
  if (state.session) return state.session;
  if (!state.creating) {
    const room = state.room;
    state.creating = api("/api/sessions", { method: "POST", body: { room } }).finally(() => {
      state.creating = null;
    });
    const created = await state.creating;
    if (state.room === room && !state.session) {
      state.session = created.id;
      state.entries = [];
      $("bar").hidden = false;
      refreshSessions();
    }
    return created.id;
  }
  return (await state.creating).id;
}

// `retry`: the files of a question asked again (what waits in the composer stays there).
async function send(text, { retry = null } = {}) {
  // Files still uploading go with the message, as the chips above the input promise.
  if (!retry) await state.uploads;
  const content = (text ?? input.value).trim();
  const attachments = retry || state.attachments;
  if (!content && !attachments.length) return;
  if (!retry) {
    input.value = "";
    state.attachments = [];
    drawAttachments();
  }
  $("replying").hidden = true;
  const pending = bubble("user", content);
  state.pending.push(pending);
  try {
    const session = await ensureSession();
    // It names its conversation, and the entry it answers when a branch was chosen; else the
    // daemon puts it after the newest (after a turn still running, too).
    await api("/api/messages", {
      method: "POST",
      body: { content, session_id: session, parent: state.leaf, room: state.room, attachments },
    });
  } catch (error) {
    state.pending = state.pending.filter((shown) => shown !== pending);
    pending.remove();
    problem(error.message);
    if (!retry) {
      input.value = content;
      state.attachments = attachments;
      drawAttachments();
    }
  }
}

function upload(files) {
  const uploading = uploadAll(files);
  state.uploads = Promise.all([state.uploads, uploading]);
  return uploading;
}

async function uploadAll(files) {
  try {
    const session = await ensureSession();
    for (const file of files) {
      const chip = document.createElement("li");
      chip.textContent = `${file.name} (uploading…)`;
      $("attached").append(chip);
      const query = `name=${encodeURIComponent(file.name)}&session=${encodeURIComponent(session)}${roomQuery()}`;
      const stored = await api(`/api/uploads?${query}`, { method: "POST", raw: file, type: file.type });
      chip.remove();
      // Kept only for the conversation it was stored in, if that is still the one open.
      if (session !== state.session) return;
      state.attachments.push(stored.attachment);
      drawAttachments();
    }
  } catch (error) {
    drawAttachments();
    problem(error.message);
  }
}

function drawAttachments() {
  const list = $("attached");
  list.replaceChildren();
  for (const [index, attachment] of state.attachments.entries()) {
    const chip = document.createElement("li");
    chip.textContent = attachment.filename;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Remove ${attachment.filename}`);
    remove.addEventListener("click", () => {
      state.attachments.splice(index, 1);
      drawAttachments();
    });
    chip.append(remove);
    list.append(chip);
  }
}

// --- the side bar -------------------------------------------------------------------------

// Marks another conversation of this place as having news; a new one joins the list first.
async function markUnread(session) {
  if (state.unread.has(session)) return;
  state.unread.add(session);
  const find = () => $("sessions").querySelector(`[data-id="${CSS.escape(session)}"]`);
  if (!find()) await refreshSessions();
  find()?.classList.add("unread");
}

const roomName = (id) => state.rooms.find((room) => room.id === id)?.name || id;

function when(time) {
  if (!time) return "";
  const date = new Date(time);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString([], { dateStyle: "short", timeStyle: "short" });
}

// The side bar's conversations anew; one refresh at a time (a second asks once more after it).
let refreshing = null;
let again = false;
async function refreshSessions() {
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

async function drawSessions() {
  let sessions;
  try {
    sessions = (await api("/api/sessions")).sessions;
  } catch (error) {
    problem(error.message);
    return;
  }
  const here = sessions.filter((session) => session.room === state.room);
  for (const [list, shown] of [
    [$("sessions"), here.filter((session) => session.status !== "archived")],
    [$("archived"), here.filter((session) => session.status === "archived")],
  ]) {
    list.replaceChildren();
    for (const session of shown) {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      b.dataset.id = session.id;
      b.innerHTML = "<span class=\"name\"></span><span class=\"meta\"></span>";
      b.querySelector(".name").textContent = session.title || "Untitled conversation";
      b.querySelector(".meta").textContent = `${session.status} · ${when(session.last_activity || session.created)}`;
      if (state.unread.has(session.id)) b.classList.add("unread");
      if (session.id === state.session) {
        b.setAttribute("aria-current", "page");
        $("title").textContent = session.title || "Conversation";
      }
      b.addEventListener("click", async () => {
        if (session.status === "archived" || session.status === "idle") {
          await api(`/api/sessions/${encodeURIComponent(session.id)}/resume`, { method: "POST" }).catch((e) => problem(e.message));
          refreshSessions();
        }
        open(session.id);
        document.body.classList.remove("menu-open");
      });
      li.append(b);
      list.append(li);
    }
  }
  $("archived-count").textContent = `Archived (${$("archived").children.length})`;
}

async function refreshRooms() {
  try {
    const answer = await api("/api/rooms");
    state.rooms = answer.rooms;
    $("new-room").hidden = !answer.admin;
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
    b.textContent = room.active ? room.name || room.id : `${room.name || room.id} (read-only)`;
    if (room.id === state.room) b.setAttribute("aria-current", "page");
    b.addEventListener("click", () => enter(room.id));
    li.append(b);
    list.append(li);
  }
}

async function enter(room) {
  state.room = room;
  state.session = "";
  const info = state.rooms.find((r) => r.id === room);
  const readOnly = Boolean(info && !info.active);
  for (const id of ["input", "send", "attach"]) $(id).disabled = readOnly;
  input.placeholder = readOnly
    ? `This room is closed${info.why ? `: ${info.why}` : ""}. You can read it.`
    : "Write a message (Enter sends, Shift+Enter: new line)";
  await refreshRooms();
  follow();
  await refreshSessions();
  const first = $("sessions").querySelector("button");
  await open(first ? first.dataset.id : "");
  document.body.classList.remove("menu-open");
}

// --- wiring -------------------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});
$("stop").addEventListener("click", async () => {
  for (const turn of state.running) {
    await api(`/api/sessions/${encodeURIComponent(state.session)}/stop`, { method: "POST", body: { turn } }).catch((e) =>
      problem(e.message),
    );
  }
});
$("new").addEventListener("click", async () => {
  try {
    const created = await api("/api/sessions", { method: "POST", body: { room: state.room } });
    await refreshSessions();
    await open(created.id);
    input.focus();
  } catch (error) {
    problem(error.message);
  }
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
$("model-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await api(`/api/sessions/${encodeURIComponent(state.session)}/model`, { method: "POST", body: { model: $("model").value } });
    bubble("notice", `Model: ${$("model").value}`);
  } catch (error) {
    problem(error.message);
  }
});
$("tree-toggle").addEventListener("click", () => {
  const tree = $("tree");
  tree.hidden = !tree.hidden;
  $("tree-toggle").setAttribute("aria-expanded", String(!tree.hidden));
});
$("replying-cancel").addEventListener("click", () => open(state.session));
$("attach").addEventListener("click", () => $("file").click());
$("file").addEventListener("change", () => {
  upload([...$("file").files]);
  $("file").value = "";
});
for (const kind of ["dragenter", "dragover"]) {
  $("chat").addEventListener(kind, (event) => {
    event.preventDefault();
    $("chat").classList.add("dropping");
  });
}
$("chat").addEventListener("dragleave", () => $("chat").classList.remove("dropping"));
$("chat").addEventListener("drop", (event) => {
  event.preventDefault();
  $("chat").classList.remove("dropping");
  if (event.dataTransfer?.files?.length) upload([...event.dataTransfer.files]);
});
$("menu").addEventListener("click", () => {
  const open = document.body.classList.toggle("menu-open");
  $("menu").setAttribute("aria-expanded", String(open));
});
for (const [id, format] of [
  ["export-md", "md"],
  ["export-html", "html"],
]) {
  // The export is of the branch on screen, as it is now.
  $(id).addEventListener("click", () => {
    const at = state.leaf;
    $(id).href = `/api/sessions/${encodeURIComponent(state.session)}/export?format=${format}&leaf=${encodeURIComponent(at)}`;
  });
}
$("new-room").addEventListener("submit", async (event) => {
  event.preventDefault();
  const members = $("room-members").value.split(/[\s,]+/).filter(Boolean);
  try {
    const body = { id: $("room-id").value, name: $("room-name").value, members };
    const room = await api("/api/rooms", { method: "POST", body });
    event.target.reset();
    await refreshRooms();
    await enter(room.id);
  } catch (error) {
    problem(error.message);
  }
});
// Settings: the name others see and where scheduled results go are kept by the daemon; the
// theme by this browser, applied as it is chosen.
function showMe() {
  $("who").textContent = state.me.name || state.me.email || "you";
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
});

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
    const title = Object.assign(document.createElement("strong"), { textContent: entry.key });
    const from = Object.assign(document.createElement("p"), { className: "hint", textContent: `From: ${entry.came_from || "content from outside"}` });
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

state.me = await api("/api/me");
showMe();
await refreshRooms();
follow();
await refreshSessions();
const first = $("sessions").querySelector("button");
await open(first ? first.dataset.id : "");
input.focus();
