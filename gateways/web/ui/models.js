// The model picker: the models the daemon can use for this conversation (GET /api/models),
// the current one chosen; one that cannot be used now (its provider down, a budget used up)
// is listed, unchoosable, with why.

import { $, api, announce, roomQuery, state } from "./state.js";
import { problem } from "./conversation.js";

const picker = $("model");

// An option's words: the model as its provider names it, what it costs, or why it cannot be
// chosen now (said in full in its title).
function label(model) {
  const short = model.name.startsWith(`${model.provider}/`) ? model.name.slice(model.provider.length + 1) : model.name;
  if (!model.available) return `${short} (unavailable)`;
  if (!model.priced) return short;
  if (model.input_price === 0 && model.output_price === 0) return `${short} · free`;
  return `${short} · $${model.input_price}/$${model.output_price}`;
}

export async function refreshModels() {
  const session = state.session;
  const query = session ? `session=${encodeURIComponent(session)}` : roomQuery().slice(1);
  let choices;
  try {
    choices = await api(`/api/models?${query}`);
  } catch (error) {
    picker.replaceChildren(new Option("model unknown", ""));
    picker.title = error.message;
    return;
  }
  if (session !== state.session) return;
  // By provider, each model's option saying why when it cannot be chosen.
  const groups = new Map();
  for (const model of choices.models) {
    if (!groups.has(model.provider)) groups.set(model.provider, []);
    const option = new Option(label(model), model.name);
    option.disabled = !model.available;
    const price = model.priced ? ` (US$ ${model.input_price} in, ${model.output_price} out per million tokens)` : "";
    option.title = model.available ? `${model.name}, from ${model.provider}${price}` : model.why;
    groups.get(model.provider).push(option);
  }
  const options = [...groups].map(([provider, models]) => {
    const group = document.createElement("optgroup");
    group.label = provider;
    group.append(...models);
    return group;
  });
  if (choices.current && !choices.models.some((model) => model.name === choices.current)) {
    options.unshift(new Option(choices.current, choices.current));
  }
  picker.replaceChildren(...options);
  picker.value = choices.current;
  picker.dataset.current = choices.current;
  picker.title = covers(choices.current);
}

// What a choice covers, said where the picker is (its title, and to screen readers).
const covers = (model) =>
  `The Assistant answers with ${model} in this conversation; the Worker, Researcher and Coder it delegates to keep their own models.`;

picker.addEventListener("change", async () => {
  const model = picker.value;
  // Without a conversation yet, the choice waits for the first message (composer.js).
  if (!state.session) {
    picker.title = covers(model);
    announce(`Your next conversation starts with ${model} for the Assistant.`);
    return;
  }
  try {
    await api(`/api/sessions/${encodeURIComponent(state.session)}/model`, { method: "POST", body: { model } });
    picker.dataset.current = model;
    picker.title = covers(model);
    announce(`The Assistant now answers with ${model} in this conversation; agents it delegates to keep their own models.`);
  } catch (error) {
    picker.value = picker.dataset.current || "";
    problem(error.message);
  }
});
