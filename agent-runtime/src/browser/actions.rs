//! What the model asks the browser to do: open, read, click, type, choose, scroll, wait for,
//! back, screenshot, pdf, download. Each that changes the page answers with the page as it is
//! after, rendered by [`super::page`].

use std::time::Duration;

use serde_json::{json, Value};

use super::{failed, Running, Settings, DOWNLOADING, QUICK, WINDOW};
use crate::tools::{Params, ToolError, ToolOutput};

/// How long a page may go on loading what it needs after its load event.
const SETTLE: Duration = Duration::from_secs(3);
/// How long a page that began to show may take to load: past it, it is read as it is (and a
/// page whose script never yields is found not answering).
const LOAD: Duration = Duration::from_secs(20);
/// How long a page's text must hold still to be read as loaded.
const STILL: Duration = Duration::from_millis(300);
/// How long after a click or an Enter a navigation may take to start.
const NAVIGATION_START: Duration = Duration::from_millis(700);

/// Runs `action` on the current page.
pub(super) async fn act(
    running: &mut Running,
    settings: &Settings,
    action: &str,
    params: &Value,
    limit: Duration,
) -> Result<ToolOutput, ToolError> {
    // The pages were stopped after the last call ([`Running::quiet`]).
    super::memory::pause_pages(false);
    let params = Params(params);
    let mut told = vec![];
    let crashed = running.happened.lock().unwrap_or_else(std::sync::PoisonError::into_inner).crashed;
    if crashed {
        let why = running.crash();
        running.fresh_page().await?;
        told.push(format!("{why}; a blank page is open now"));
    }
    // A download by address keeps the page's scripts stopped until it has begun: a page's timer
    // must not start a download of its own in the moment the one asked for is allowed.
    let by_address = action == "download" && params.0.get("url").is_some_and(|url| !url.is_null());
    let run = json!({"value": by_address});
    if let Err(error) =
        running.cdp.call(&running.page.session, "Emulation.setScriptExecutionDisabled", run, QUICK).await
    {
        if matches!(error, super::CdpError::Timeout { .. }) {
            running.fresh_page().await?;
            told.push("the last page stopped answering; a blank page is open now".to_string());
        }
    }
    let done = match action {
        "open" => open(running, settings, params.string("url")?, limit).await,
        "read" => read(running, settings).await,
        "click" => {
            let node = node_of(running, &params)?;
            click(running, node).await?;
            after_input(running, settings, limit).await
        }
        "type" => {
            let node = node_of(running, &params)?;
            let text = params.string("text")?;
            type_into(running, node, text, params.flag("submit")?).await?;
            after_input(running, settings, limit).await
        }
        "choose" => {
            let node = node_of(running, &params)?;
            choose(running, node, params.string("option")?).await?;
            after_input(running, settings, limit).await
        }
        "scroll" => {
            let down = params.optional_string("direction")?.unwrap_or("down") != "up";
            scroll(running, down).await?;
            read(running, settings).await
        }
        "wait_for" => wait_for(running, settings, params.string("text")?, limit).await,
        "back" => back(running, settings, limit).await,
        "screenshot" => screenshot(running, settings, params.optional_string("path")?, params.flag("full_page")?).await,
        "pdf" => pdf(running, settings, params.optional_string("path")?).await,
        "download" => download(running, settings, &params, limit).await,
        "" => Err(ToolError::Param { name: "action", problem: "is required".into() }),
        other => Err(ToolError::Param {
            name: "action",
            problem: format!(
                "`{other}` is not one of open, read, click, type, choose, scroll, wait_for, back, screenshot, pdf, download, close"
            ),
        }),
    };
    let crashed = running.happened.lock().unwrap_or_else(std::sync::PoisonError::into_inner).crashed;
    if crashed {
        let why = running.crash();
        running.fresh_page().await?;
        return Err(failed(format!("{why}; a blank page is open now")));
    }
    let mut output = match done {
        Err(ToolError::Failed(why)) if why.contains("no answer within") => {
            running.fresh_page().await?;
            return Err(failed(format!(
                "the page did not answer within {} s (a script keeps it busy); it was closed and a blank page is open",
                QUICK.as_secs()
            )));
        }
        other => other?,
    };
    if !told.is_empty() {
        output.content = format!("{}\n{}", told.join("\n"), output.content);
    }
    Ok(output)
}

/// The page's title and address (the browser's, not the page's word).
async fn where_now(running: &Running) -> (String, String) {
    let info = running.cdp.call("", "Target.getTargetInfo", json!({"targetId": running.page.target}), QUICK).await;
    let info = info.unwrap_or_default();
    let text = |name: &str| super::page::tidy(info["targetInfo"][name].as_str().unwrap_or_default());
    (text("title"), text("url"))
}

/// The page as the model reads it; the numbers in it name what `click`, `type` and `choose` act on.
async fn read(running: &mut Running, settings: &Settings) -> Result<ToolOutput, ToolError> {
    let tree = running.cdp.call(&running.page.session, "Accessibility.getFullAXTree", json!({}), QUICK).await?;
    let nodes = tree["nodes"].as_array().cloned().unwrap_or_default();
    let rendered = super::page::render(&nodes, settings.limits.text_bytes);
    running.refs = rendered.refs;
    let (title, url) = where_now(running).await;
    let mut content = format!("page: {title} — {url}\n\n{}", rendered.text);
    if rendered.cut {
        content.push_str(&format!("\n… (cut at {} bytes; scroll or wait_for to see more)", settings.limits.text_bytes));
    }
    if rendered.text.is_empty() {
        content.push_str("(the page shows no text)");
    }
    Ok(ToolOutput { content, is_error: false, metadata: vec![("url".into(), url), ("title".into(), title)] })
}

/// Waits for a load that began after `loads` load events (and a moment of quiet after it).
async fn settle(running: &Running, loads: u64, limit: Duration) -> bool {
    let loaded = running.until(limit.min(LOAD), |now| now.loads > loads).await;
    running.until(SETTLE, |now| now.requests.is_empty()).await;
    loaded
}

/// The page once what its scripts show holds still: read again every [`STILL`] until two
/// readings agree, for at most [`SETTLE`] (a page built by a script after its load).
async fn read_settled(running: &mut Running, settings: &Settings) -> Result<ToolOutput, ToolError> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut last = read(running, settings).await?;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(STILL).await;
        let now = read(running, settings).await?;
        if now.content == last.content {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

fn counts(running: &Running) -> (u64, u64) {
    let now = running.happened.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    (now.loads, now.navigations)
}

async fn open(running: &mut Running, settings: &Settings, url: &str, limit: Duration) -> Result<ToolOutput, ToolError> {
    let scheme = url.split_once(':').map(|(scheme, _)| scheme.to_ascii_lowercase()).unwrap_or_default();
    if !matches!(scheme.as_str(), "http" | "https") {
        return Err(ToolError::Param { name: "url", problem: "must be an http:// or https:// address".into() });
    }
    let (loads, _) = counts(running);
    let navigated =
        running.cdp.call(&running.page.session, "Page.navigate", json!({"url": url}), limit.max(QUICK)).await?;
    if let Some(error) = navigated["errorText"].as_str().filter(|error| !error.is_empty()) {
        return Err(failed(format!("{url} could not be opened: {error}")));
    }
    if !settle(running, loads, limit).await {
        let mut output = read_settled(running, settings).await?;
        output.content =
            format!("(the page was still loading after {} s)\n{}", limit.min(LOAD).as_secs(), output.content);
        return Ok(output);
    }
    read_settled(running, settings).await
}

/// After a click, a key or a choice: the navigation it started (or the window it opened) is
/// waited for, and the page read.
async fn after_input(running: &mut Running, settings: &Settings, limit: Duration) -> Result<ToolOutput, ToolError> {
    let (loads, navigations) = counts(running);
    let started = running
        .until(NAVIGATION_START, |now| now.navigations > navigations || now.loads > loads || !now.new_pages.is_empty())
        .await;
    let opened = {
        let mut now = running.happened.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let target = &running.page.target;
        let opened = now.new_pages.iter().find(|(_, opener)| opener == target).map(|(new, _)| new.clone());
        now.new_pages.clear();
        opened
    };
    if let Some(new) = opened {
        // A link into a new window: the tool follows it there, as a person would.
        let old = std::mem::replace(&mut running.page, super::attach(&running.cdp, &running.happened, &new).await?);
        // silent-ok: the old page may be gone already.
        let _ = running.cdp.call("", "Target.closeTarget", json!({"targetId": old.target}), QUICK).await;
        // Its load may have come before it was attached: then it is not waited for.
        let state = json!({"expression": "document.readyState", "returnByValue": true});
        let ready = running.cdp.call(&running.page.session, "Runtime.evaluate", state, QUICK).await?;
        if ready["result"]["value"] != "complete" {
            let (loads, _) = counts(running);
            running.until(limit.min(LOAD), |now| now.loads > loads).await;
        }
    } else if started {
        settle(running, loads, limit).await;
    } else {
        running.until(Duration::from_millis(300), |now| now.requests.is_empty()).await;
    }
    read_settled(running, settings).await
}

/// The DOM node of the number `ref` in the last reading of the page.
fn node_of(running: &Running, params: &Params<'_>) -> Result<i64, ToolError> {
    let number = params.optional_u64("ref")?.ok_or(ToolError::Param {
        name: "ref",
        problem: "is required: the number of the thing to act on, as the page's last reading shows it".into(),
    })?;
    let index = usize::try_from(number).unwrap_or(usize::MAX);
    match running.refs.get(index.wrapping_sub(1)) {
        Some(node) => Ok(*node),
        None if running.refs.is_empty() => {
            Err(failed("read the page first (action read): its numbers name what to act on"))
        }
        None => Err(failed(format!(
            "the page's last reading has no [{number}] (1 to {}); read it again",
            running.refs.len()
        ))),
    }
}

/// Where on the screen the node's middle is, scrolled into view.
async fn middle(running: &Running, node: i64) -> Result<(f64, f64), ToolError> {
    let session = &running.page.session;
    running.cdp.call(session, "DOM.scrollIntoViewIfNeeded", json!({"backendNodeId": node}), QUICK).await?;
    let quads = running.cdp.call(session, "DOM.getContentQuads", json!({"backendNodeId": node}), QUICK).await?;
    let quad: Vec<f64> =
        quads["quads"][0].as_array().into_iter().flatten().filter_map(Value::as_f64).collect::<Vec<_>>();
    if quad.len() != 8 {
        return Err(failed("it is not shown on the page (no size); read the page again"));
    }
    let x = (quad[0] + quad[2] + quad[4] + quad[6]) / 4.0;
    let y = (quad[1] + quad[3] + quad[5] + quad[7]) / 4.0;
    Ok((x, y))
}

async fn click(running: &Running, node: i64) -> Result<(), ToolError> {
    let (x, y) = middle(running, node).await?;
    let session = &running.page.session;
    // What is at that point must be the element or inside it: a page cannot lay something
    // (an invisible link, another site's frame) over it to take the click.
    let hit = json!({"x": x.round() as i64, "y": y.round() as i64, "includeUserAgentShadowDOM": true});
    let hit = running.cdp.call(session, "DOM.getNodeForLocation", hit, QUICK).await?;
    let hit = hit["backendNodeId"].as_i64().ok_or_else(|| failed("nothing is at its place on the page"))?;
    if hit != node && !holds(running, node, hit).await? {
        return Err(failed("something else covers it on the page, so it was not clicked; read the page again"));
    }
    for (kind, buttons) in [("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 0)] {
        let event = json!({"type": kind, "x": x, "y": y, "button": "left", "buttons": buttons, "clickCount": 1});
        running.cdp.call(session, "Input.dispatchMouseEvent", event, QUICK).await?;
    }
    Ok(())
}

/// The tool's own world in the page's main frame: the page's scripts cannot change what the
/// functions called there see (`contains`, `focus`, a list's options), nor run between the
/// steps of one of them.
async fn world(running: &Running) -> Result<Value, ToolError> {
    let session = &running.page.session;
    let tree = running.cdp.call(session, "Page.getFrameTree", json!({}), QUICK).await?;
    let frame = tree["frameTree"]["frame"]["id"].as_str().unwrap_or_default().to_string();
    let world = json!({"frameId": frame, "worldName": "baaaht", "grantUniveralAccess": false});
    let world = running.cdp.call(session, "Page.createIsolatedWorld", world, QUICK).await?;
    Ok(world["executionContextId"].clone())
}

/// The node `backend` as an object of the world `context`.
async fn object_in(running: &Running, context: &Value, backend: i64) -> Result<String, ToolError> {
    let resolved = running
        .cdp
        .call(
            &running.page.session,
            "DOM.resolveNode",
            json!({"backendNodeId": backend, "executionContextId": context}),
            QUICK,
        )
        .await?;
    resolved["object"]["objectId"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| failed("the element is gone; read the page again"))
}

/// Calls `function` (JavaScript, `this` the node) on `node` in the tool's own world, with
/// `arguments` (protocol call arguments); its value.
async fn in_world(running: &Running, node: i64, function: &str, arguments: Value) -> Result<Value, ToolError> {
    let context = world(running).await?;
    let object = object_in(running, &context, node).await?;
    let asked =
        json!({"objectId": object, "functionDeclaration": function, "arguments": arguments, "returnByValue": true});
    let called = running.cdp.call(&running.page.session, "Runtime.callFunctionOn", asked, QUICK).await?;
    if let Some(thrown) = called["exceptionDetails"]["exception"]["description"].as_str() {
        return Err(failed(format!("the page did not take it: {}", super::page::tidy(thrown))));
    }
    Ok(called["result"]["value"].clone())
}

/// Whether the element `node` holds `inner`, asked in the tool's own world.
async fn holds(running: &Running, node: i64, inner: i64) -> Result<bool, ToolError> {
    let context = world(running).await?;
    let inner = object_in(running, &context, inner).await?;
    let outer = object_in(running, &context, node).await?;
    let asked = json!({
        "objectId": outer,
        "functionDeclaration": "function(inner) { return Node.prototype.contains.call(this, inner); }",
        "arguments": [{"objectId": inner}],
        "returnByValue": true,
    });
    let answered = running.cdp.call(&running.page.session, "Runtime.callFunctionOn", asked, QUICK).await?;
    Ok(answered["result"]["value"] == true)
}

/// Types `text` into the field `node`, over what it held. One function in the tool's own
/// world focuses the field, checks that it has the focus and inserts the text, with nothing of
/// the page's run in between but the field's own events: a page (or a frame of another site)
/// cannot move the focus elsewhere between the check and the text, so the text goes only where
/// the model asked.
const TYPE: &str = "function(text) {
    const field = this;
    const editable = field instanceof HTMLInputElement || field instanceof HTMLTextAreaElement || field.isContentEditable;
    if (!editable) return {error: 'it is not a field to type in; click it instead'};
    if (field.disabled || field.readOnly) return {error: 'the field takes no text (it is disabled or read-only)'};
    field.focus();
    const doc = field.ownerDocument;
    if (doc.activeElement !== field) return {error: 'the field did not take the focus (the page moved it), so nothing was typed; read the page again'};
    if (field.isContentEditable) {
        const range = doc.createRange();
        range.selectNodeContents(field);
        const selection = doc.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
    } else {
        field.select();
    }
    let typed = text === '' ? doc.execCommand('delete', false) : doc.execCommand('insertText', false, text);
    if (!typed && !field.isContentEditable) {
        // A field the editing commands do not reach (a date, a number): its value, and its events.
        field.value = text;
        field.dispatchEvent(new InputEvent('input', {bubbles: true, inputType: 'insertText', data: text}));
        field.dispatchEvent(new Event('change', {bubbles: true}));
        typed = true;
    }
    if (!typed) return {error: 'the field did not take the text'};
    return {focused: doc.activeElement === field};
}";

async fn type_into(running: &Running, node: i64, text: &str, submit: bool) -> Result<(), ToolError> {
    let session = &running.page.session;
    // The page's scripts run while it types (its fields' events), as they would for a person.
    let done = in_world(running, node, TYPE, json!([{"value": text}])).await?;
    if let Some(error) = done["error"].as_str() {
        return Err(failed(error));
    }
    if submit {
        // The Enter goes only to the field: if the page took the focus away, it is not pressed.
        let focused =
            in_world(running, node, "function() { return this.ownerDocument.activeElement === this; }", json!([]))
                .await?;
        if focused != true {
            return Err(failed("the text was typed, but the page moved the focus away from the field, so Enter was not pressed; read the page again"));
        }
        for kind in ["keyDown", "keyUp"] {
            let key = json!({"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"});
            running.cdp.call(session, "Input.dispatchKeyEvent", key, QUICK).await?;
        }
    }
    Ok(())
}

/// Chooses `option` in the list `node`, matched in the tool's own world (a page cannot change
/// which option is found, nor what the list's options say they are).
async fn choose(running: &Running, node: i64, option: &str) -> Result<(), ToolError> {
    let pick = "function(wanted) {
        if (!(this instanceof HTMLSelectElement)) return {error: 'it is not a list to choose from; click it instead'};
        if (this.disabled) return {error: 'the list is disabled'};
        const options = Array.from(this.options).filter(o => !o.disabled);
        const trimmed = wanted.trim();
        const found = options.find(o => o.label.trim() === trimmed || o.value === wanted)
            || options.find(o => o.label.trim().toLowerCase() === trimmed.toLowerCase());
        if (!found) return {error: 'no option ' + JSON.stringify(wanted) + '; the options are: ' + options.map(o => o.label.trim()).slice(0, 50).join(', ')};
        this.value = found.value;
        this.dispatchEvent(new Event('input', {bubbles: true}));
        this.dispatchEvent(new Event('change', {bubbles: true}));
        return {chosen: found.label};
    }";
    let done = in_world(running, node, pick, json!([{"value": option}])).await?;
    match done["error"].as_str() {
        Some(error) => Err(failed(error)),
        None => Ok(()),
    }
}

async fn scroll(running: &Running, down: bool) -> Result<(), ToolError> {
    let (x, y) = (f64::from(WINDOW.0) / 2.0, f64::from(WINDOW.1) / 2.0);
    let delta = if down { 700.0 } else { -700.0 };
    let wheel = json!({"type": "mouseWheel", "x": x, "y": y, "deltaX": 0, "deltaY": delta});
    running.cdp.call(&running.page.session, "Input.dispatchMouseEvent", wheel, QUICK).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
}

async fn wait_for(
    running: &mut Running,
    settings: &Settings,
    text: &str,
    limit: Duration,
) -> Result<ToolOutput, ToolError> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let output = read(running, settings).await?;
        if output.content.contains(text) {
            return Ok(output);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(failed(format!("`{text}` did not appear on the page within {} s", limit.as_secs())));
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

async fn back(running: &mut Running, settings: &Settings, limit: Duration) -> Result<ToolOutput, ToolError> {
    let session = running.page.session.clone();
    let history = running.cdp.call(&session, "Page.getNavigationHistory", json!({}), QUICK).await?;
    let current = history["currentIndex"].as_u64().unwrap_or(0) as usize;
    let Some(entry) = current.checked_sub(1).and_then(|index| history["entries"].get(index)) else {
        return Err(failed("there is no page to go back to"));
    };
    let (loads, _) = counts(running);
    running.cdp.call(&session, "Page.navigateToHistoryEntry", json!({"entryId": entry["id"]}), QUICK).await?;
    settle(running, loads, limit).await;
    read_settled(running, settings).await
}

/// Writes `bytes` at `path` in the workspace (atomically, beneath it); the path as shown.
fn keep(settings: &Settings, path: &str, bytes: &[u8]) -> Result<String, ToolError> {
    let mounts = crate::tools::paths::Mounts::open(&[(settings.workspace.clone(), true)])
        .map_err(|error| failed(format!("cannot open the workspace: {error}")))?;
    let located = mounts.locate(path)?;
    crate::tools::files::write_atomic(&located, bytes, 0o644)?;
    Ok(path.trim_start_matches("./").to_string())
}

/// A name for a file the browser makes: `given`, or `{folder}/{stem}-{time}.{extension}`.
fn named(given: Option<&str>, folder: &str, stem: &str, extension: &str) -> String {
    match given {
        Some(path) if !path.trim().is_empty() => path.to_string(),
        _ => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            format!("{folder}/{stem}-{}.{extension}", now.as_millis())
        }
    }
}

fn decoded(data: &Value) -> Result<Vec<u8>, ToolError> {
    let text = data.as_str().ok_or_else(|| failed("the browser sent no data"))?;
    data_encoding::BASE64.decode(text.as_bytes()).map_err(|error| failed(format!("the browser's data: {error}")))
}

async fn screenshot(
    running: &Running,
    settings: &Settings,
    path: Option<&str>,
    full_page: bool,
) -> Result<ToolOutput, ToolError> {
    let path = named(path, "screenshots", "page", "png");
    if !path.to_ascii_lowercase().ends_with(".png") {
        return Err(ToolError::Param { name: "path", problem: "a screenshot is a PNG: end the name with .png".into() });
    }
    let mut asked = json!({"format": "png"});
    if full_page {
        let metrics = running.cdp.call(&running.page.session, "Page.getLayoutMetrics", json!({}), QUICK).await?;
        let size = &metrics["cssContentSize"];
        let (width, height) = (size["width"].as_f64().unwrap_or(1280.0), size["height"].as_f64().unwrap_or(900.0));
        // Past 16,000 pixels a page is cut: a longer one is read, not looked at.
        asked["clip"] = json!({"x": 0, "y": 0, "width": width.min(4000.0), "height": height.min(16_000.0), "scale": 1});
        asked["captureBeyondViewport"] = json!(true);
    }
    let taken =
        running.cdp.call(&running.page.session, "Page.captureScreenshot", asked, Duration::from_secs(30)).await?;
    let bytes = decoded(&taken["data"])?;
    let kept = keep(settings, &path, &bytes)?;
    let (title, url) = where_now(running).await;
    Ok(ToolOutput {
        content: format!(
            "saved a screenshot of {title} ({url}) as {kept} ({} KiB); it is shown in the chat",
            bytes.len() >> 10
        ),
        is_error: false,
        metadata: vec![("screenshot".into(), kept.clone()), ("wrote".into(), kept), ("url".into(), url)],
    })
}

async fn pdf(running: &Running, settings: &Settings, path: Option<&str>) -> Result<ToolOutput, ToolError> {
    let path = named(path, "pages", "page", "pdf");
    let printed = running
        .cdp
        .call(&running.page.session, "Page.printToPDF", json!({"printBackground": true}), Duration::from_secs(60))
        .await?;
    let bytes = decoded(&printed["data"])?;
    let kept = keep(settings, &path, &bytes)?;
    let (title, url) = where_now(running).await;
    Ok(ToolOutput {
        content: format!("saved {title} ({url}) as a PDF, {kept} ({} KiB)", bytes.len() >> 10),
        is_error: false,
        metadata: vec![("wrote".into(), kept), ("url".into(), url)],
    })
}

/// A name Chromium suggested, made safe: its last part, no leading dot, printable, short.
fn safe_name(suggested: &str) -> String {
    let last = suggested.rsplit(['/', '\\']).next().unwrap_or_default();
    let mut name: String = last
        .chars()
        .map(|c| if c.is_alphanumeric() || "._- ()+,".contains(c) { c } else { '_' })
        .collect::<String>()
        .trim_start_matches(['.', ' '])
        .chars()
        .take(120)
        .collect();
    if name.is_empty() {
        name = "download".into();
    }
    name
}

/// Downloads what the number `ref` leads to (a click) or `url`, into `downloads/` in the workspace.
async fn download(
    running: &mut Running,
    settings: &Settings,
    params: &Params<'_>,
    limit: Duration,
) -> Result<ToolOutput, ToolError> {
    let folder = settings.workspace.join(DOWNLOADING);
    std::fs::create_dir_all(&folder).map_err(|error| failed(format!("cannot make the download folder: {error}")))?;
    let allow =
        json!({"behavior": "allowAndName", "downloadPath": folder.display().to_string(), "eventsEnabled": true});
    running.cdp.call("", "Browser.setDownloadBehavior", allow, QUICK).await?;
    {
        let mut now = running.happened.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        now.downloads.clear();
        now.began.clear();
    }
    let started = async {
        match params.optional_string("url")? {
            Some(url) => {
                let navigated =
                    running.cdp.call(&running.page.session, "Page.navigate", json!({"url": url}), limit).await?;
                // A download aborts the navigation; anything else is an error.
                match navigated["errorText"].as_str() {
                    Some(error) if !error.is_empty() && error != "net::ERR_ABORTED" => {
                        Err(failed(format!("{url} could not be opened: {error}")))
                    }
                    _ => Ok(()),
                }
            }
            None => click(running, node_of(running, params)?).await,
        }
    };
    let by_address = params.optional_string("url")?.is_some();
    let outcome = match started.await {
        Ok(()) => finish_download(running, settings, by_address, limit).await,
        Err(error) => Err(error),
    };
    // Only what the model asks for is downloaded: a page cannot start one by itself, and what
    // it started beside the one asked for is cancelled and removed.
    let deny = json!({"behavior": "deny"});
    // silent-ok: a browser gone meanwhile denies nothing more.
    let _ = running.cdp.call("", "Browser.setDownloadBehavior", deny, QUICK).await;
    if by_address {
        // The page's scripts were kept stopped for the download ([`run`]); they run again.
        let run = json!({"value": false});
        // silent-ok: a page gone meanwhile is dealt with at the next call.
        let _ = running.cdp.call(&running.page.session, "Emulation.setScriptExecutionDisabled", run, QUICK).await;
    }
    let others: Vec<String> = {
        let now = running.happened.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        now.began.iter().filter(|id| now.downloads.get(*id).is_some_and(|d| d.state == "inProgress")).cloned().collect()
    };
    for other in others {
        // silent-ok: it may have ended already; its file goes below either way.
        let _ = running.cdp.call("", "Browser.cancelDownload", json!({"guid": other}), QUICK).await;
    }
    // silent-ok: whatever is left half way is the page's, and goes.
    let _ = std::fs::remove_dir_all(&folder);
    outcome
}

/// Waits for the download asked for and moves it into `downloads/`. By address, that is the first
/// that began from the network (a page's `blob:` or `data:` one never is); by a click, the first.
async fn finish_download(
    running: &Running,
    settings: &Settings,
    by_address: bool,
    limit: Duration,
) -> Result<ToolOutput, ToolError> {
    let most = settings.limits.download_bytes;
    let asked = |download: &super::Download| !by_address || download.url.starts_with("http");
    let began = running.until(Duration::from_secs(10).min(limit), |now| now.downloads.values().any(asked)).await;
    if !began {
        return Err(failed("no download started (the link may open a page: open it and read it instead)"));
    }
    let first = {
        let now = running.happened.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        now.began.iter().find(|id| now.downloads.get(*id).is_some_and(asked)).cloned()
    };
    let id = first.ok_or_else(|| failed("the download vanished"))?;
    running
        .until(limit, |now| {
            now.downloads.get(&id).is_none_or(|d| d.state != "inProgress" || d.received > most || d.total > most)
        })
        .await;
    let download = {
        let now = running.happened.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        now.downloads.get(&id).cloned().ok_or_else(|| failed("the download vanished"))?
    };
    let partial = settings.workspace.join(DOWNLOADING).join(&id);
    if download.state != "completed" {
        // silent-ok: it may not have begun.
        let _ = running.cdp.call("", "Browser.cancelDownload", json!({"guid": id}), QUICK).await;
        let _ = std::fs::remove_file(&partial);
        let why = if download.received > most || download.total > most {
            format!("it is larger than the {} MiB a download may be", most >> 20)
        } else if download.state == "inProgress" {
            format!("it did not finish within {} s", limit.as_secs())
        } else {
            "the browser stopped it".to_string()
        };
        return Err(failed(format!("the download of {} was stopped: {why}", safe_name(&download.name))));
    }
    let name = safe_name(&download.name);
    let path = format!("downloads/{name}");
    let mounts = crate::tools::paths::Mounts::open(&[(settings.workspace.clone(), true)])
        .map_err(|error| failed(format!("cannot open the workspace: {error}")))?;
    let located = mounts.locate(&path)?;
    let (dir, file) = located.parent(true)?;
    let size = std::fs::metadata(&partial).map(|meta| meta.len()).unwrap_or(0);
    rustix::fs::renameat(rustix::fs::CWD, &partial, &dir, file.as_os_str()).map_err(|errno| {
        // silent-ok: the partial file goes either way.
        let _ = std::fs::remove_file(&partial);
        failed(format!("the downloaded file cannot be put in {path}: {errno}"))
    })?;
    Ok(ToolOutput {
        content: format!("downloaded {path} ({} KiB)", size >> 10),
        is_error: false,
        metadata: vec![("wrote".into(), path)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suggested_name_stays_one_plain_file_name() {
        assert_eq!(safe_name("report.pdf"), "report.pdf");
        assert_eq!(safe_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_name(".bashrc"), "bashrc");
        assert_eq!(safe_name("a\nb<c>.txt"), "a_b_c_.txt");
        assert_eq!(safe_name(""), "download");
        assert_eq!(safe_name(&"x".repeat(500)).len(), 120);
    }
}
