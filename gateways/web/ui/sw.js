// baaaht's service worker: the app's shell kept for when the network is gone (a clear
// "offline" page instead of the browser's error), and notifications pushed by the gateway
// (Web Push) with their answers. An approval's "Allow once" or "Deny" is answered from the
// notification as the person signed in on this device, with the page's own CSRF token; any
// other tap opens the app at the conversation.

const SHELL = "baaaht-shell";
// What the offline page needs. Conversations are never cached: they are the person's, and
// the server has them.
const KEPT = ["/offline", "/ui/app.css", "/ui/theme.js", "/ui/icons/icon-192.png"];

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches
      .open(SHELL)
      .then((cache) => cache.addAll(KEPT))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(self.clients.claim());
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== self.location.origin) return;
  if (request.mode === "navigate") {
    // The server first; without it, the offline page.
    event.respondWith(fetch(request).catch(() => caches.match("/offline")));
  } else if (KEPT.includes(url.pathname)) {
    // Fresh when the server answers (and kept fresh), else as kept.
    event.respondWith(
      fetch(request)
        .then((answer) => {
          if (answer.ok) {
            const copy = answer.clone();
            caches.open(SHELL).then((cache) => cache.put(request, copy));
          }
          return answer;
        })
        .catch(() => caches.match(request)),
    );
  }
});

// --- notifications ---------------------------------------------------------------------------

const ICON = "/ui/icons/icon-192.png";

self.addEventListener("push", (event) => {
  let shown;
  try {
    shown = event.data.json();
  } catch {
    shown = { kind: "message", title: "baaaht", body: "You have a message.", tag: "message", url: "/" };
  }
  event.waitUntil(show(shown));
});

function show(shown) {
  const options = {
    body: shown.body || "",
    tag: shown.tag || "baaaht",
    icon: ICON,
    badge: ICON,
    silent: Boolean(shown.silent),
    data: { url: shown.url || "/", approval: shown.approval || "", kind: shown.kind },
    actions: (shown.actions || []).slice(0, 2),
    // A question stays until it is answered; an answer replaces it under the same tag.
    requireInteraction: shown.kind === "approval",
    renotify: shown.kind === "approval",
  };
  return self.registration.showNotification(shown.title || "baaaht", options);
}

self.addEventListener("notificationclick", (event) => {
  const notification = event.notification;
  const data = notification.data || {};
  notification.close();
  const done = event.action && data.approval ? answer(notification, event.action) : openApp(data.url || "/");
  // (Only the browser's own click may keep the worker alive for it.)
  if (event.isTrusted) event.waitUntil(done);
});

// Answers the approval `notification` asks with `decision`, as the person signed in here.
async function answer(notification, decision) {
  const data = notification.data;
  let said;
  try {
    const me = await fetch("/api/me", { credentials: "same-origin" });
    if (me.status === 401) throw new Error("Your sign-in on this device has ended.");
    if (!me.ok) throw new Error("The server did not answer.");
    const { csrf } = await me.json();
    const answered = await fetch(`/api/approvals/${encodeURIComponent(data.approval)}`, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify({ decision }),
    });
    if (!answered.ok) {
      const refused = await answered.json().catch(() => ({}));
      throw new Error(refused.error || "The answer was not taken.");
    }
    said = { body: decision === "deny" ? "Denied." : "Allowed once.", silent: true };
  } catch (error) {
    said = { body: `${error.message} Open baaaht to answer.`, silent: false };
  }
  await self.registration.showNotification("baaaht", {
    ...said,
    tag: notification.tag,
    icon: ICON,
    data: { url: data.url, kind: "settled" },
  });
}

// The app at `url`: a window of it already open is brought forward there.
async function openApp(url) {
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const client of windows) {
    if (new URL(client.url).origin === self.location.origin && "focus" in client) {
      await client.focus();
      return client.navigate(url);
    }
  }
  return self.clients.openWindow(url);
}
