//! HTML and SVG in answers, shown as they would look. Each one is served from an address of its
//! own under its conversation, to the people who may read that conversation, with a policy of
//! its own: a sandbox without the site's origin (so no cookies, storage or API of the site),
//! inline script and style only, and nothing loaded from anywhere. The page draws it in a
//! sandboxed frame. (A `srcdoc` frame would take the page's own policy, which runs no inline
//! script; and the answer's text stays where the daemon keeps it.)

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use baaaht_proto::v1;

use crate::app::{api_error, error, App, User};

/// What an artifact is drawn as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Html,
    Svg,
}

impl Kind {
    fn of_language(info: &str) -> Option<Kind> {
        match info.split_whitespace().next()?.to_ascii_lowercase().as_str() {
            "html" => Some(Kind::Html),
            "svg" => Some(Kind::Svg),
            _ => None,
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Kind::Html => "text/html; charset=utf-8",
            Kind::Svg => "image/svg+xml",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub kind: Kind,
    pub body: String,
}

/// The policy an artifact is served with. `sandbox` without `allow-same-origin` gives it an
/// origin of its own even when opened on its own; `default-src 'none'` keeps it from loading
/// or sending anything.
pub const POLICY: &str = "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data: blob:; media-src data: blob:; font-src data:; frame-ancestors 'self'";

/// What an artifact runs besides its own script: it tells the page drawing it how tall it is,
/// as it changes (a number only; the page caps it), so its frame fits it. A picture's height is
/// its own (its `height`, else its `viewBox` at the frame's width, else what it draws).
const MEASURE: &str = "(()=>{const e=document.documentElement;let l=0;\
     const s=()=>{const a=e.getAttribute('height');if(a&&!a.includes('%'))return e.height.baseVal.value;\
     const v=e.viewBox&&e.viewBox.baseVal;if(v&&v.width)return e.getBoundingClientRect().width*v.height/v.width;\
     const b=e.getBBox();return b.y+b.height;};\
     const t=()=>{const h=Math.ceil(e instanceof SVGSVGElement?s():Math.max(e.getBoundingClientRect().height,\
     document.body?document.body.getBoundingClientRect().bottom:0));\
     if(h!==l){l=h;parent.postMessage({baaahtArtifactHeight:h},'*');}};\
     if(window.ResizeObserver)new ResizeObserver(t).observe(document.body||e);addEventListener('load',t);t();})();";

/// `artifact`'s body as served: with [`MEASURE`] at its end (in a CDATA section in an SVG).
fn measured(artifact: &Artifact) -> String {
    match artifact.kind {
        Kind::Html => format!("{}\n<script>{MEASURE}</script>\n", artifact.body),
        Kind::Svg => match artifact.body.rfind("</svg>") {
            Some(end) => {
                format!("{}<script><![CDATA[{MEASURE}]]></script>{}", &artifact.body[..end], &artifact.body[end..])
            }
            None => artifact.body.clone(),
        },
    }
}

/// The kind of a whole answer that is a document, not markdown (what the page's `documentKind`
/// says too).
fn document_kind(text: &str) -> Option<Kind> {
    let start: String = text.trim_start().chars().take(15).collect::<String>().to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        Some(Kind::Html)
    } else if start.starts_with("<svg") || (start.starts_with("<?xml") && text.contains("<svg")) {
        Some(Kind::Svg)
    } else {
        None
    }
}

/// The HTML and SVG in an answer, in order: the answer itself when it is a document, else each
/// fenced code block marked `html` or `svg` (the page counts them the same way).
pub fn artifacts(text: &str) -> Vec<Artifact> {
    use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
    if let Some(kind) = document_kind(text) {
        return vec![Artifact { kind, body: text.to_string() }];
    }
    let mut found = Vec::new();
    let mut open: Option<Artifact> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                open = Kind::of_language(&info).map(|kind| Artifact { kind, body: String::new() });
            }
            Event::Text(text) => {
                if let Some(artifact) = open.as_mut() {
                    artifact.body.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => found.extend(open.take()),
            _ => {}
        }
    }
    found
}

/// `GET /api/sessions/{id}/entries/{entry}/artifacts/{n}`: the `n`th artifact of an answer in
/// a conversation the user may read.
pub async fn serve(
    State(app): State<Arc<App>>,
    user: User,
    Path((id, entry, n)): Path<(String, String, usize)>,
) -> Response {
    use v1::session_entry::Entry;
    let mut daemon = app.daemon.clone();
    let request = v1::ReadSessionRequest { session_id: id, leaf_entry_id: entry.clone() };
    let transcript = match daemon.sessions.read_session(app.as_user(&user.session, request)).await {
        Ok(transcript) => transcript.into_inner(),
        Err(status) => return api_error(&status),
    };
    let answer = transcript.entries.iter().find(|found| found.id == entry).and_then(|found| match &found.entry {
        Some(Entry::Message(message)) if message.role == "assistant" => Some(message.content.as_str()),
        _ => None,
    });
    let Some(artifact) = answer.and_then(|text| artifacts(text).into_iter().nth(n)) else {
        return error(StatusCode::NOT_FOUND, "That answer has no such page or picture.");
    };
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(artifact.kind.content_type())),
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
        (header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=300")),
    ];
    (headers, measured(&artifact)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_and_svg_blocks_are_found_in_order_and_other_code_is_not() {
        let text = "Here:\n\n```html\n<p>one</p>\n```\n\n```rust\nfn main() {}\n```\n\n```SVG\n<svg></svg>\n```\n\
                    \n- a list\n\n  ```html title\n  <b>two</b>\n  ```\n";
        let found = artifacts(text);
        assert_eq!(
            found,
            vec![
                Artifact { kind: Kind::Html, body: "<p>one</p>\n".into() },
                Artifact { kind: Kind::Svg, body: "<svg></svg>\n".into() },
                Artifact { kind: Kind::Html, body: "<b>two</b>\n".into() },
            ]
        );
        assert!(artifacts("`<p>inline</p>` and <b>raw</b>").is_empty());
    }

    #[test]
    fn an_artifact_is_served_with_the_script_that_tells_its_height() {
        let page = Artifact { kind: Kind::Html, body: "<p>hi</p>".into() };
        assert!(
            measured(&page).starts_with("<p>hi</p>\n<script>(()=>") && measured(&page).contains("baaahtArtifactHeight")
        );
        let picture = Artifact { kind: Kind::Svg, body: "<svg><rect/></svg>\n".into() };
        let served = measured(&picture);
        assert!(
            served.starts_with("<svg><rect/><script><![CDATA[(()=>") && served.ends_with("]]></script></svg>\n"),
            "{served}"
        );
    }

    #[test]
    fn an_answer_that_is_a_document_is_one_artifact() {
        let page = "  <!DOCTYPE html>\n<html><body>```html\nnot a block\n```</body></html>";
        assert_eq!(artifacts(page), vec![Artifact { kind: Kind::Html, body: page.into() }]);
        let picture = "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"/>";
        assert_eq!(artifacts(picture)[0].kind, Kind::Svg);
    }
}
