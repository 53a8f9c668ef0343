// Notifications on the person's devices: the service worker registered (it also keeps the
// offline page), this device's permission and push subscription sent to the gateway, the
// devices listed with a button to remove each, and what the person chose: how much of a
// message shows, which kinds come, and quiet hours. Saved with the settings.

import { $, api, announce } from "./state.js";
import { visible } from "./text.js";

const worker = "serviceWorker" in navigator ? navigator.serviceWorker.register("/sw.js").catch(() => null) : Promise.resolve(null);
const KINDS = ["approvals", "results", "heartbeats", "answers", "budget"];
let shown = null; // what the gateway said last: its key, the devices, the choices

// The subscription's key as the browser wants it (bytes) from base64url.
function bytes(base64url) {
  const text = atob(base64url.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(text, (c) => c.charCodeAt(0));
}

// What this device is called in the list: its browser and system, as far as the page knows.
function label() {
  const agent = navigator.userAgentData;
  const brand = agent?.brands?.find((b) => !/Not.?A.?Brand|Chromium/i.test(b.brand))?.brand || (/Firefox/.test(navigator.userAgent) ? "Firefox" : /Safari/.test(navigator.userAgent) && !/Chrome/.test(navigator.userAgent) ? "Safari" : "Chromium");
  const system = agent?.platform || (/Android/.test(navigator.userAgent) ? "Android" : /iPhone|iPad/.test(navigator.userAgent) ? "iOS" : navigator.platform || "");
  return system ? `${brand} on ${system}` : brand;
}

function say(text) {
  $("push-state").textContent = text;
}

// The section as the gateway and this browser say it is.
export async function showPush() {
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    say("This browser cannot show notifications from a site. On an iPhone or iPad, add baaaht to the home screen first.");
    $("push-allow").hidden = true;
  }
  try {
    shown = await api("/api/push");
  } catch (error) {
    say(error.message);
    return;
  }
  const here = await current();
  const list = $("push-devices");
  list.replaceChildren();
  for (const device of shown.devices) {
    const item = document.createElement("li");
    item.className = "device";
    item.dataset.id = device.id;
    const mine = here && here.endpoint === device.endpoint;
    const added = new Date(device.added * 1000).toLocaleDateString([], { dateStyle: "medium" });
    item.append(Object.assign(document.createElement("span"), { textContent: visible(`${device.label}${mine ? " (this device)" : ""}, added ${added}`) }));
    const remove = Object.assign(document.createElement("button"), { type: "button", textContent: "Remove", className: "danger" });
    remove.setAttribute("aria-label", `Remove ${visible(device.label)}`);
    remove.addEventListener("click", async () => {
      try {
        await api(`/api/push/devices/${encodeURIComponent(device.id)}`, { method: "DELETE" });
        if (mine) await here.unsubscribe().catch(() => {});
        announce("The device will not be notified any more.");
        showPush();
      } catch (error) {
        say(error.message);
      }
    });
    item.append(remove);
    list.append(item);
  }
  const allowed = here && shown.devices.some((device) => device.endpoint === here.endpoint);
  if ("Notification" in window && Notification.permission === "denied") {
    say("Notifications are blocked for this site in this browser's settings.");
  } else if (allowed) {
    say("This device shows notifications.");
  } else {
    say(shown.devices.length ? "This device does not show notifications yet." : "No device of yours shows notifications yet.");
  }
  $("push-allow").hidden = Boolean(allowed) || !("PushManager" in window);
  $("push-test").hidden = !shown.devices.length;
  const settings = shown.settings;
  $("push-content").value = settings.content;
  for (const kind of KINDS) $(`push-${kind}`).checked = settings.kinds[kind];
  $("push-quiet").checked = Boolean(settings.quiet);
  $("push-quiet-from").value = settings.quiet?.from || "22:00";
  $("push-quiet-to").value = settings.quiet?.to || "07:00";
  $("push-zone").textContent = settings.quiet?.timezone || Intl.DateTimeFormat().resolvedOptions().timeZone;
}

// This browser's push subscription, if it has one.
async function current() {
  const registration = await worker;
  return registration ? registration.pushManager.getSubscription().catch(() => null) : null;
}

// A browser that allowed notifications before, signed in again: its device (if it is this
// person's) goes on with this sign-in. Nobody else's device is touched.
(async () => {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  const here = await current();
  if (!here) return;
  const json = here.toJSON();
  await api("/api/push/devices", { method: "POST", body: { endpoint: json.endpoint, keys: json.keys, renew: true } }).catch(() => {});
})();

$("push-allow").addEventListener("click", async () => {
  try {
    const permission = await Notification.requestPermission();
    if (permission !== "granted") {
      say("Notifications were not allowed; this browser asks once, then its site settings decide.");
      return;
    }
    const registration = await navigator.serviceWorker.ready;
    const subscription = await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: bytes(shown.key) });
    const json = subscription.toJSON();
    await api("/api/push/devices", { method: "POST", body: { endpoint: json.endpoint, keys: json.keys, label: label() } });
    announce("This device shows notifications now.");
    showPush();
  } catch (error) {
    say(error.message);
  }
});

$("push-test").addEventListener("click", async () => {
  try {
    const sent = await api("/api/push/test", { method: "POST", body: {} });
    say(`A test was sent to ${sent.sent} device${sent.sent === 1 ? "" : "s"}.`);
  } catch (error) {
    say(error.message);
  }
});

// What the person chose, as the gateway keeps it (saved with the settings).
export async function savePush() {
  if (!shown) return;
  const kinds = Object.fromEntries(KINDS.map((kind) => [kind, $(`push-${kind}`).checked]));
  const quiet = $("push-quiet").checked
    ? { from: $("push-quiet-from").value, to: $("push-quiet-to").value, timezone: $("push-zone").textContent }
    : null;
  await api("/api/push/settings", { method: "POST", body: { content: $("push-content").value, kinds, quiet } });
}
