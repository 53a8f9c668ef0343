// Writing: the composer, files attached to the next message, sending, and the first screen a
// conversation starts from (a greeting and suggestions drawn from the user's skills and
// scheduled tasks, the composer in the middle until the first message).

import { $, api, input, roomQuery, state } from "./state.js";
import { visible } from "./text.js";
import { awaiting, bubble, problem, showOpen } from "./conversation.js";
import { refreshSessions } from "./sidebar.js";
import { refreshModels } from "./models.js";

// --- the first screen ---------------------------------------------------------------------------

function greeting(name) {
  const hour = new Date().getHours();
  const part = hour < 5 ? "Good evening" : hour < 12 ? "Good morning" : hour < 18 ? "Good afternoon" : "Good evening";
  const first = String(name || "").trim().split(/\s+/)[0];
  return first ? `${part}, ${visible(first)}` : part;
}

let suggested = "";
export async function showWelcome() {
  $("greeting").textContent = greeting(state.me?.name);
  refreshModels();
  const place = state.room;
  if (suggested === place && $("suggestions").children.length) return;
  try {
    const home = await api(`/api/home?${roomQuery().slice(1)}`);
    if (state.room !== place) return;
    suggested = place;
    $("suggestions").replaceChildren(
      ...home.suggestions.map((suggestion) => {
        const li = document.createElement("li");
        const b = document.createElement("button");
        b.type = "button";
        const title = document.createElement("strong");
        title.textContent = visible(suggestion.title);
        b.append(title);
        if (suggestion.detail) {
          const detail = document.createElement("span");
          detail.textContent = visible(suggestion.detail);
          b.append(detail);
        }
        b.addEventListener("click", () => {
          input.value = suggestion.prompt;
          grow();
          input.focus();
          input.setSelectionRange(input.value.length, input.value.length);
        });
        li.append(b);
        return li;
      }),
    );
  } catch {
    // No suggestions: the greeting and the composer are enough.
  }
}

// --- the composer ---------------------------------------------------------------------------------

// The text box grows with what is written, up to a third of the screen.
export function grow() {
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight + 2, window.innerHeight / 3)}px`;
}
input.addEventListener("input", grow);

// The open conversation, created first when there is none (once, however many messages and
// uploads ask at the same time).
async function ensureSession() {
  if (state.session) return state.session;
  if (!state.creating) {
    const room = state.room;
    const model = $("model").value;
    state.creating = api("/api/sessions", { method: "POST", body: { room } }).finally(() => {
      state.creating = null;
    });
    const created = await state.creating;
    if (state.room === room && !state.session) {
      state.session = created.id;
      state.entries = [];
      state.activities = [];
      showOpen(true);
      // A model chosen on the first screen is the new conversation's.
      if (model && model !== $("model").dataset.current) {
        await api(`/api/sessions/${encodeURIComponent(created.id)}/model`, { method: "POST", body: { model } });
      }
      refreshSessions();
    }
    return created.id;
  }
  return (await state.creating).id;
}

// `retry`: the files of a question asked again (what waits in the composer stays there).
export async function send(text, { retry = null } = {}) {
  // Files still uploading go with the message, as the chips above the input promise.
  if (!retry) await state.uploads;
  const content = (text ?? input.value).trim();
  const attachments = retry || state.attachments;
  if (!content && !attachments.length) return;
  if (!retry) {
    input.value = "";
    grow();
    state.attachments = [];
    drawAttachments();
  }
  $("replying").hidden = true;
  showOpen(true);
  const pending = bubble("user", content);
  state.pending.push(pending);
  // Said at once, before the daemon has the message: the answer is coming.
  const answer = awaiting();
  state.waiting.push(answer);
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
    state.waiting = state.waiting.filter((shown) => shown !== answer);
    pending.remove();
    answer.remove();
    problem(error.message);
    if (!retry) {
      input.value = content;
      grow();
      state.attachments = attachments;
      drawAttachments();
    }
  }
}

export function upload(files) {
  const uploading = uploadAll(files);
  state.uploads = Promise.all([state.uploads, uploading]);
  return uploading;
}

async function uploadAll(files) {
  try {
    const session = await ensureSession();
    for (const file of files) {
      const chip = document.createElement("li");
      chip.textContent = `${visible(file.name)} (uploading…)`;
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

export function drawAttachments() {
  const list = $("attached");
  list.replaceChildren();
  for (const [index, attachment] of state.attachments.entries()) {
    const chip = document.createElement("li");
    chip.textContent = visible(attachment.filename);
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Remove ${visible(attachment.filename)}`);
    remove.addEventListener("click", () => {
      state.attachments.splice(index, 1);
      drawAttachments();
    });
    chip.append(remove);
    list.append(chip);
  }
}

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
