// baaaht's web UI: the conversation, followed over Server-Sent Events (the browser's
// EventSource sends Last-Event-ID when it reconnects, so a blip loses no words), and the
// composer. No framework, no build step: the gateway serves this file as it is.

const log = document.getElementById("log");
const composer = document.getElementById("composer");
const input = document.getElementById("input");
const csrf = composer.dataset.csrf;
let session = "";
const answers = new Map(); // turn id → the element its answer is written in

function bubble(kind, text) {
  const element = document.createElement("div");
  element.className = `bubble ${kind}`;
  element.textContent = text;
  log.append(element);
  element.scrollIntoView({ block: "end" });
  return element;
}

function answerOf(turn) {
  let element = answers.get(turn);
  if (!element) {
    element = bubble("assistant", "");
    element.dataset.turn = turn;
    answers.set(turn, element);
  }
  return element;
}

function status(turn, text) {
  const element = answerOf(turn);
  let line = element.querySelector(".status");
  if (!line) {
    line = document.createElement("div");
    line.className = "status";
    element.prepend(line);
  }
  line.textContent = text;
}

const events = new EventSource("/api/events");
events.onerror = async () => {
  // Closed for good (signed out, expired): back to the sign-in when that is why.
  if (events.readyState === EventSource.CLOSED) {
    const me = await fetch("/api/me");
    if (me.status === 401) window.location.assign("/login");
  }
};
events.onmessage = (message) => {
  const event = JSON.parse(message.data);
  switch (event.type) {
    case "user":
      bubble("user", event.text);
      break;
    case "delta": {
      const element = answerOf(event.turn);
      element.append(document.createTextNode(event.text));
      element.scrollIntoView({ block: "end" });
      break;
    }
    case "reply": {
      const element = answerOf(event.turn);
      element.textContent = event.text;
      element.classList.add("done");
      break;
    }
    case "delegation":
      status(event.turn, `${event.agent}: ${event.state}`);
      break;
    case "tool":
      status(event.turn, `${event.tool}: ${event.state}${event.ms ? ` (${event.ms} ms)` : ""}`);
      break;
    case "error":
      answerOf(event.turn).classList.add("failed");
      bubble("error", event.text);
      break;
    case "message":
    case "notice":
      bubble("notice", event.text);
      break;
  }
};

async function send() {
  const content = input.value.trim();
  if (!content) return;
  input.value = "";
  const answer = await fetch("/api/messages", {
    method: "POST",
    headers: { "content-type": "application/json", "x-csrf-token": csrf },
    body: JSON.stringify({ content, session_id: session }),
  });
  if (answer.status === 401) {
    window.location.assign("/login");
    return;
  }
  if (!answer.ok) {
    const failure = await answer.json().catch(() => ({ error: "The message was not sent; try again." }));
    bubble("error", failure.error);
    input.value = content;
    return;
  }
  // The conversation this page writes in is the one its messages went to.
  session = (await answer.json()).session || session;
}

composer.addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    send();
  }
});
