// The open conversation: its messages (one branch of its tree), the answer being written, the
// approval cards, and the events that change them. The log follows new words while the user
// is at its end; scrolled up, it stays put and offers a button back to the latest.

import { $, api, announce, input, log, roomQuery, state } from "./state.js";
import { render } from "./markdown.js";
import { avatar, size, visible } from "./text.js";
import { markUnread, refreshSessions } from "./sidebar.js";
import { refreshModels } from "./models.js";
import { send, showWelcome } from "./composer.js";

// --- following the end of the log ------------------------------------------------------------

// Within this many pixels of the end, the log counts as at its end.
const NEAR_END = 48;

// Where the log was last put at its end: a log above it and away from the end was scrolled
// up by the person, even before the browser's scroll event says so.
let snapped = 0;

export function stick() {
  const away = log.scrollHeight - log.scrollTop - log.clientHeight >= NEAR_END;
  if (state.following && away && log.scrollTop + 1 < snapped) state.following = false;
  if (state.following) {
    log.scrollTop = log.scrollHeight;
    snapped = log.scrollTop;
  } else $("jump").hidden = false;
}

log.addEventListener("scroll", () => {
  state.following = log.scrollHeight - log.scrollTop - log.clientHeight < NEAR_END;
  if (state.following) $("jump").hidden = true;
});
$("jump").addEventListener("click", () => {
  state.following = true;
  $("jump").hidden = true;
  log.scrollTop = log.scrollHeight;
  snapped = log.scrollTop;
  input.focus();
});

// Pages and pictures in answers say how tall they are (artifacts.rs adds the script that
// does): their frame takes that height, up to a cap, so an 80-pixel picture is not drawn in a
// tall empty box. Only a number is taken from the frame.
window.addEventListener("message", (event) => {
  const height = Number(event.data?.baaahtArtifactHeight);
  if (!Number.isFinite(height)) return;
  for (const frame of log.querySelectorAll("iframe.artifact")) {
    if (frame.contentWindow !== event.source) continue;
    const cap = Math.min(window.innerHeight * 0.7, 640);
    frame.style.height = `${Math.max(32, Math.min(Math.ceil(height) + 2, cap))}px`;
    stick();
  }
});

// --- messages ---------------------------------------------------------------------------------

export function bubble(kind, text) {
  const element = document.createElement("article");
  element.className = `bubble ${kind}`;
  if (text !== undefined) textOf(element).textContent = text;
  log.append(element);
  stick();
  return element;
}

export function problem(text) {
  const element = bubble("error", text);
  element.setAttribute("role", "alert");
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

// The buttons of a finished message (copy, retry for answers, answer from here, fork), shown
// on hover and keyboard focus, and by a long press on a touch screen.
function actions(element, entry, { retry } = {}) {
  element.dataset.entry = entry.id;
  element.tabIndex = -1;
  const bar = document.createElement("div");
  bar.className = "actions";
  bar.setAttribute("role", "toolbar");
  bar.setAttribute("aria-label", "Message actions");
  const button = (label, title, act) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.title = title;
    b.addEventListener("click", () => {
      element.classList.remove("pressed");
      act();
    });
    bar.append(b);
    return b;
  };
  const copy = button("Copy", "Copy this message", async () => {
    await navigator.clipboard.writeText(entry.text || "");
    copy.textContent = "Copied";
    setTimeout(() => (copy.textContent = "Copy"), 1500);
  });
  if (retry) button("Retry", "Ask again (a new branch)", () => retryAnswer(entry));
  if (retry) button("Undo", "Take this turn back, and the ones after it: files and conversation", () => undoFrom(entry));
  button("Reply here", "Answer from this message (a new branch)", () => branchAt(entry.id));
  button("Fork", "A new conversation from this message", () => forkAt(entry.id));
  element.append(bar);
  longPress(element);
}

// A long press (touch) shows a message's actions; a tap elsewhere hides them.
function longPress(element) {
  let timer = 0;
  element.addEventListener("pointerdown", (event) => {
    if (event.pointerType !== "touch") return;
    timer = setTimeout(() => {
      for (const other of log.querySelectorAll(".pressed")) other.classList.remove("pressed");
      element.classList.add("pressed");
      element.querySelector(".actions button")?.focus();
    }, 500);
  });
  for (const end of ["pointerup", "pointercancel", "pointermove"]) element.addEventListener(end, () => clearTimeout(timer));
}
document.addEventListener("pointerdown", (event) => {
  for (const pressed of log.querySelectorAll(".pressed")) if (!pressed.contains(event.target)) pressed.classList.remove("pressed");
});

// A user message's own words: without the daemon's note of each attached file (what the
// agents read: "[attached: PATH (TYPE, SIZE) in the session's workspace]").
export function wordsOf(entry) {
  const notes = (entry.attachments || []).map((file) => `[attached: ${file.path} (`);
  return (entry.text || "")
    .split("\n")
    .filter((line) => !notes.some((note) => line.startsWith(note)))
    .join("\n")
    .trim();
}

// In a room, who wrote: their initials and name.
function byline(element, name) {
  const who = document.createElement("div");
  who.className = "who";
  const label = document.createElement("span");
  label.textContent = visible(name);
  who.append(avatar(name), label);
  element.prepend(who);
}

function showUser(entry) {
  const element = bubble(entry.mine ? "user" : "user other");
  if (state.room) byline(element, entry.mine ? state.me?.name || entry.name || "you" : entry.name || "someone");
  const files = entry.attachments || [];
  textOf(element).textContent = wordsOf(entry);
  if (files.length) {
    const list = document.createElement("ul");
    list.className = "files";
    list.setAttribute("aria-label", "Attached files");
    for (const file of files) {
      const item = document.createElement("li");
      item.textContent = `📎 ${visible(file.filename)} (${file.mime_type}, ${size(file.size_bytes)})`;
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

// An answer still to come says what the assistant is doing (sending, starting, thinking,
// delegating, waiting for an approval), in the bubble and to screen readers; its first words
// take the line's place.
export function working(element, text) {
  let line = element.querySelector(":scope > .working");
  if (!text) {
    line?.remove();
    return;
  }
  if (!line) {
    line = document.createElement("p");
    line.className = "working";
    element.prepend(line);
  }
  if (line.textContent === text) return;
  line.textContent = text;
  announce(text);
}

// An answer's bubble before its turn is known (the page's message is on its way).
export function awaiting() {
  const element = bubble("assistant");
  element.setAttribute("aria-busy", "true");
  working(element, "Sending your message…");
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

// The model's thinking before its answer: folded under "Thinking", the text as it streams.
function thinkingOf(turn) {
  const element = answerOf(turn);
  let folded = element.querySelector(":scope > details.thinking");
  if (!folded) {
    folded = document.createElement("details");
    folded.className = "thinking";
    const summary = document.createElement("summary");
    summary.textContent = "Thinking";
    const text = document.createElement("div");
    text.className = "thought";
    folded.append(summary, text);
    const answer = element.querySelector(":scope > .text");
    if (answer) answer.before(folded);
    else element.append(folded);
  }
  return folded.querySelector(".thought");
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
  stick();
}

export function running(turn, on) {
  if (on) state.running.add(turn);
  else state.running.delete(turn);
  $("stop").hidden = state.running.size === 0;
}

export async function stopAll() {
  for (const turn of state.running) {
    await api(`/api/sessions/${encodeURIComponent(state.session)}/stop`, { method: "POST", body: { turn } }).catch((e) =>
      problem(e.message),
    );
  }
}

// What screen readers hear of an answer being written: whole sentences, not each word.
let spoken = "";
function speak(text, { flush = false } = {}) {
  spoken += text;
  const end = flush ? spoken.length : Math.max(spoken.lastIndexOf(". "), spoken.lastIndexOf("\n")) + 1;
  if (end <= 0) return;
  const said = spoken.slice(0, end).trim();
  spoken = spoken.slice(end);
  if (said) $("live").textContent = said;
}

// --- approvals ---------------------------------------------------------------------------------

// Their words (the request, its answers, how long it waits, how it ended, a skill's review)
// come from the gateway, as every channel's do.
// A connection waiting for someone to allow it, or a skill an agent asked to install waiting
// for its review: a card with the answers as buttons. Shown again from the conversation's
// history, `left` says how many seconds it still waits, as the daemon said when it was read
// (0: no longer; its answer, if it had one, follows).
function approvalCard(event, { left } = {}) {
  const live = left === undefined;
  const waiting = event.review ? "Waiting for a skill's review (below)…" : "Waiting for an approval (below)…";
  for (const turn of live ? state.running : []) {
    const answer = state.answers.get(turn);
    if (answer && !textOf(answer).textContent) working(answer, waiting);
  }
  const card = bubble(event.review || event.action ? "approval review" : "approval");
  card.dataset.approval = event.id;
  card.setAttribute("role", "group");
  card.setAttribute("aria-label", event.review ? "Skill review" : event.action ? "Action to allow" : "Approval request");
  const text = document.createElement("p");
  text.className = "text";
  text.textContent = visible(event.text);
  const shown = event.review ? [text, reviewOf(event.review)] : event.action ? [text, actionOf(event.action)] : [text];
  const note = document.createElement("p");
  note.className = "meta";
  note.textContent = event.expires_text;
  if (!live && left <= 0) {
    note.textContent = "No longer waiting for an answer.";
    card.append(...shown, note);
    return;
  }
  const buttons = document.createElement("div");
  buttons.className = "answers";
  for (const [decision, label] of event.choices) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = label;
    button.dataset.decision = decision;
    if (decision === "deny" || decision === "decline") button.className = "danger";
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
  card.append(...shown, note, buttons);
  if (live) announce(text.textContent);
}

// An action a turn that read content from outside wants to take: what the tool does, what the
// turn read, and each argument exactly as the call has it (the gateway's lines, controls made
// visible, long values folded). Written as text, never as markup.
function actionOf(action) {
  const box = document.createElement("div");
  box.className = "review";
  let list = null;
  for (const line of action.lines || []) {
    if (line.startsWith("• ")) {
      if (!list) {
        list = document.createElement("ul");
        list.className = "facts arguments";
        box.append(list);
      }
      const item = document.createElement("li");
      item.textContent = visible(line.slice(2));
      list.append(item);
    } else {
      const said = document.createElement("p");
      said.textContent = visible(line);
      box.append(said);
    }
  }
  return box;
}

// A skill's review: what it is, would run and would reach (the gateway's lines), and what its
// scan found, each finding a warning. Every word of it comes from a repository nobody has read
// yet: written as text (textContent), never as markup.
function reviewOf(review) {
  const box = document.createElement("div");
  box.className = "review";
  const facts = document.createElement("ul");
  facts.className = "facts";
  for (const fact of review.facts || []) {
    const item = document.createElement("li");
    item.textContent = visible(fact);
    facts.append(item);
  }
  const found = review.found || [];
  const scan = document.createElement("p");
  scan.className = found.length ? "scan warning" : "scan";
  scan.textContent = visible(review.scan);
  box.append(facts, scan);
  if (found.length) {
    const findings = document.createElement("ul");
    findings.className = "findings";
    for (const finding of found) {
      const item = document.createElement("li");
      item.className = "finding";
      item.textContent = visible(finding);
      findings.append(item);
    }
    box.append(findings);
  }
  return box;
}

// How a request ended: its buttons gone, the note saying what was decided and by whom.
function approvalSettled(event) {
  const card = log.querySelector(`[data-approval="${CSS.escape(event.id)}"]`);
  if (!card) return;
  card.querySelector(".answers")?.remove();
  const note = card.querySelector(".meta");
  note.textContent = event.text;
  card.classList.remove("denied", "allowed");
  card.classList.add(event.decision === "deny" || event.decision === "decline" ? "denied" : "allowed");
}

// --- events -------------------------------------------------------------------------------------

// The first words of each turn are marked with the Performance API (`first-token`, its detail
// the turn and the provider's stamp when the words carry one) as they reach the page, and
// again once they are painted (`first-token-painted`), for `baaaht-bench web`.
const marked = new Set();
function markFirst(turn, text) {
  if (marked.has(turn)) return;
  marked.add(turn);
  const detail = { turn, text: text.slice(0, 40) };
  performance.mark("first-token", { detail });
  requestAnimationFrame(() => setTimeout(() => performance.mark("first-token-painted", { detail })));
}

// What an agent sent (the `message` tool, markdown as answers are), with its files to
// download; a budget's warning; a memory waiting for review.
function showMessage(event) {
  const element = bubble("notice message");
  render(textOf(element), event.text);
  if ((event.files || []).length) {
    const list = document.createElement("ul");
    list.className = "files";
    list.setAttribute("aria-label", "Files sent");
    for (const file of event.files) {
      const item = document.createElement("li");
      const link = document.createElement("a");
      const name = file.path.replace(/^sent\//, "");
      link.href = `/api/sessions/${encodeURIComponent(event.session)}/files/sent/${encodeURIComponent(name)}`;
      link.download = name;
      link.textContent = `📎 ${visible(file.name)} (${file.type}, ${size(file.size)})`;
      item.append(link);
      // A picture (a screenshot the browser took) is shown too, not only offered.
      if (/^image\/(png|jpeg|gif|webp)$/.test(file.type || "")) {
        const picture = document.createElement("img");
        picture.src = link.href;
        picture.alt = visible(file.name);
        picture.loading = "lazy";
        picture.className = "sent-picture";
        item.append(picture);
      }
      list.append(item);
    }
    element.append(list);
  }
}

// An approval or a notice kept in the conversation, shown as it was when it happened.
function showActivity(entry) {
  const event = entry.event || {};
  if (event.type === "approval") approvalCard(event, { left: event.expires_in || 0 });
  else if (event.type === "settled") approvalSettled(event);
  else if (event.type === "message") showMessage(event);
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
      // The conversation went on: an undo may take it back to where it was before.
      state.moved = "";
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
      // The answer's bubble stands under the message: the page's own waited for it already.
      const answer = mine ? state.waiting.shift() : null;
      if (answer && !state.answers.has(event.turn)) {
        answer.dataset.turn = event.turn;
        state.answers.set(event.turn, answer);
      }
      if (!textOf(answerOf(event.turn)).textContent) working(answerOf(event.turn), "The assistant is on it…");
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
      working(element, "");
      // The live tail is plain text; the finished answer is rendered (no flicker).
      textOf(element).append(document.createTextNode(event.text));
      markFirst(event.turn, event.text);
      speak(event.text);
      stick();
      break;
    }
    case "reply": {
      const element = answerOf(event.turn);
      working(element, "");
      element.removeAttribute("aria-busy");
      const entry = { id: event.entry, text: event.text };
      render(textOf(element), event.text, artifactsOf(event.entry));
      element.classList.add("done");
      actions(element, entry, { retry: true });
      running(event.turn, false);
      speak("", { flush: true });
      announce("The answer is complete.");
      stick();
      reloadEntries();
      break;
    }
    case "thinking": {
      thinkingOf(event.turn).append(document.createTextNode(event.text));
      stick();
      break;
    }
    case "phase": {
      // Before the first words only: a later model call (after a tool) is in the progress lines.
      const element = answerOf(event.turn);
      if (textOf(element).textContent) break;
      working(element, `${event.said.charAt(0).toUpperCase()}${event.said.slice(1)}…`);
      break;
    }
    case "delegation": {
      const task = (event.task || "").split("\n")[0].slice(0, 80);
      const verb = { started: "working on", finished: "finished", failed: "failed" }[event.state] || event.state;
      if (event.state === "started" && !textOf(answerOf(event.turn)).textContent) {
        working(answerOf(event.turn), `Delegated to the ${event.agent}, who is working on it…`);
      }
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
      working(element, "");
      element.removeAttribute("aria-busy");
      element.classList.add("failed");
      const note = document.createElement("p");
      note.className = "failure";
      note.setAttribute("role", "alert");
      note.textContent = event.text;
      element.append(note);
      running(event.turn, false);
      stick();
      reloadEntries();
      break;
    }
    case "tainted": {
      const paused = (event.withheld || []).join(", ");
      progress(event.turn, "taint", `Reading untrusted content: some tools are paused (${paused}). Source: ${event.source}`, "tainted");
      announce("Reading untrusted content: some tools are paused.");
      break;
    }
    case "message":
      showMessage(event);
      break;
    case "notice":
      bubble("notice", event.text);
      break;
    case "moved":
      // An undo or a redo elsewhere (another tab, the TUI, a chat): this page shows where the
      // conversation is now, once (its own undo got there already).
      if (!state.undoing && state.moved !== event.leaf) {
        state.moved = event.leaf;
        open(state.session, event.leaf).then(() => bubble("notice undo-plan", event.text));
      }
      break;
  }
}

export function follow() {
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

// --- reading a conversation ----------------------------------------------------------------

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

// A conversation's entries as read: its tree, and its approvals and notices apart.
function keep(entries) {
  state.entries = entries.filter((entry) => entry.kind !== "activity");
  state.activities = entries.filter((entry) => entry.kind === "activity");
}

// `path` (a branch) with the approvals and notices that came after each of its entries (and
// before its first).
function withActivities(path) {
  const known = new Set(state.entries.map((entry) => entry.id));
  const shown = state.activities.filter((activity) => !known.has(activity.after));
  for (const entry of path) shown.push(entry, ...state.activities.filter((activity) => activity.after === entry.id));
  return shown;
}

function show(path) {
  log.replaceChildren();
  state.answers.clear();
  for (const entry of withActivities(path)) {
    if (entry.kind === "activity") showActivity(entry);
    else if (entry.kind === "message" && entry.role === "user") showUser(entry);
    else if (entry.kind === "message" && entry.role === "assistant") showAnswer(entry);
    else if (entry.kind === "delegation") {
      const element = bubble("notice", `${entry.agent}: ${(entry.task || "").split("\n")[0]}`);
      element.classList.add("delegation");
    } else if (entry.kind === "compaction") bubble("notice", "Earlier messages were summarized.");
    else if (entry.kind === "model") bubble("notice", `Model: ${entry.to}`);
  }
  state.following = true;
  $("jump").hidden = true;
  log.scrollTop = log.scrollHeight;
  snapped = log.scrollTop;
}

// Whether a conversation is open: its toolbar and log, or the first screen.
export function showOpen(open) {
  // The model can be chosen before the first message; the rest is a conversation's.
  $("more").hidden = !open;
  if (!open) $("tree-toggle").hidden = true;
  document.body.classList.toggle("fresh", !open);
  $("welcome").hidden = open;
  log.hidden = !open;
}

export async function open(id, leaf = "") {
  const generation = ++state.generation;
  state.session = id;
  state.leaf = leaf;
  state.running.clear();
  running("", false);
  state.attachments = [];
  state.pending = [];
  state.waiting = [];
  state.answers.clear();
  $("attached").replaceChildren();
  log.replaceChildren();
  showOpen(Boolean(id));
  if (!id) {
    $("title").textContent = state.room ? state.rooms.find((room) => room.id === state.room)?.name || state.room : "New conversation";
    showWelcome();
    return;
  }
  try {
    const read = await api(`/api/sessions/${encodeURIComponent(id)}`);
    if (generation !== state.generation) return; // something else was opened meanwhile
    keep(read.entries);
    $("title").textContent = visible(read.session.title || "Conversation");
    // A branch chosen while the conversation was being read (state.leaf) is the one shown.
    show(branch(state.entries, state.leaf));
    drawTree();
    refreshModels();
    // A turn still running (sent from here before a reload, or from another channel) can be
    // stopped here too.
    for (const turn of read.running || []) {
      running(turn, true);
      working(answerOf(turn), "The assistant is on it…");
    }
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
      b.textContent = visible(`${who}: ${(entry.text || "").slice(0, 60)}`);
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
  // Shown once there is more than one branch to choose between.
  $("tree-toggle").textContent = `Branches (${leaves})`;
  $("tree-toggle").hidden = leaves < 2;
  if (leaves < 2) $("tree").hidden = true;
  tree.replaceChildren(top);
}

// The open conversation's entries anew (after an answer), for the tree.
async function reloadEntries() {
  const session = state.session;
  if (!session) return;
  try {
    const entries = (await api(`/api/sessions/${encodeURIComponent(session)}`)).entries;
    if (session !== state.session) return; // another conversation was opened meanwhile
    keep(entries);
    drawTree();
  } catch {
    // The tree stays as it was; the next answer tries again.
  }
}

function branchAt(entry, text = "") {
  const found = state.entries.find((e) => e.id === entry);
  show(branch(state.entries, entry));
  state.leaf = entry;
  drawTree();
  $("replying").hidden = false;
  $("replying-text").textContent = text || visible(`Answering: ${(found?.text || "").slice(0, 80)}`);
  input.focus();
}

// ↑ in an empty composer: the last message of the user's, to write again (sent, it becomes a
// new branch beside the old one).
export async function editLast() {
  const mine = [...log.querySelectorAll(".user:not(.other)[data-entry]")].pop();
  if (!mine) return;
  if (!state.entries.some((e) => e.id === mine.dataset.entry)) await reloadEntries();
  const entry = state.entries.find((e) => e.id === mine.dataset.entry);
  if (!entry || input.value) return;
  if (state.entries.some((e) => e.id === entry.parent)) {
    branchAt(entry.parent, "Editing your last message: sent, it makes a new branch");
  } else {
    // A first message's parent is the conversation itself: the new branch starts at the root.
    show([]);
    drawTree();
    $("replying").hidden = false;
    $("replying-text").textContent = "Editing your first message: sent, it makes a new branch";
  }
  state.leaf = entry.parent;
  input.value = wordsOf(entry);
  input.setSelectionRange(input.value.length, input.value.length);
  input.dispatchEvent(new Event("input"));
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

// Undo from an answer: the turns from its question to the end of the branch shown, taken back
// (the files they changed too) once the plan shown in the conversation is confirmed.
async function undoFrom(answer) {
  const path = branch(state.entries, state.leaf || undefined);
  const at = path.findIndex((entry) => entry.id === answer.id);
  let turns = path.slice(Math.max(at, 0)).filter((entry) => entry.kind === "message" && entry.role === "user").length;
  // The answer's own question is before it.
  turns += 1;
  const url = `/api/sessions/${encodeURIComponent(state.session)}/undo`;
  try {
    const plan = await api(url, { method: "POST", body: { turns } });
    const card = bubble("notice undo-plan", plan.text);
    card.setAttribute("role", "group");
    card.setAttribute("aria-label", "Undo");
    const bar = document.createElement("div");
    bar.className = "answers";
    const choice = (label, act) => {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.addEventListener("click", async () => {
        for (const other of bar.querySelectorAll("button")) other.disabled = true;
        await act();
      });
      bar.append(b);
      return b;
    };
    choice("Undo", async () => {
      try {
        state.undoing = true;
        const done = await api(url, { method: "POST", body: { turns, apply: true, expect: plan.from, digest: plan.digest } });
        state.moved = done.to;
        await open(state.session, done.to);
        bubble("notice undo-plan", done.text);
      } catch (error) {
        problem(error.message);
      } finally {
        state.undoing = false;
      }
    }).focus();
    choice("Keep", async () => card.remove());
    card.append(bar);
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
