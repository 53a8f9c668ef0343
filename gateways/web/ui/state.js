// What the page's modules share: its own elements (taken once at the start, so nothing an
// answer shows can stand in for one), the state of what is open, and the API.

export const elements = new Map();
for (const element of document.querySelectorAll("[id]")) elements.set(element.id, element);
export const $ = (id) => elements.get(id);
export const csrf = $("composer").dataset.csrf;
export const log = $("log");
export const input = $("input");

export const state = {
  me: null,
  room: "", // the room open, "" for the user's own conversations
  rooms: [],
  session: "", // the conversation open
  leaf: "", // the entry the next message answers, when a branch was chosen ("" = the newest)
  moved: "", // where the last undo or redo shown here moved the conversation
  undoing: false, // this page's own undo is under way (its event is not followed)
  pending: [], // the page's own messages, shown before the daemon has them
  waiting: [], // the answers to them, each saying at once that the assistant is working
  unread: new Set(), // conversations with news not yet seen
  generation: 0, // counts open() calls: a read that finished after a newer one is dropped
  creating: null, // a conversation being created for the page's first message or upload
  entries: [], // the open conversation's entries, every branch
  activities: [], // its approvals and notices, each kept after the entry it came after
  running: new Set(), // turns of the open conversation still running
  answers: new Map(), // turn → its answer's element
  attachments: [], // uploaded, waiting for the next message
  uploads: Promise.resolve(), // the uploads in progress: a message sent meanwhile waits for them
  events: null,
  following: true, // the log follows new words (the user has not scrolled up)
};

export async function api(path, { method = "GET", body, raw, type } = {}) {
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
export function announce(text) {
  $("status").textContent = text;
}

export const roomQuery = () => (state.room ? `&room=${encodeURIComponent(state.room)}` : "");
