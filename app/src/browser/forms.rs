//! Posts to `/actions/…` once the page runs its script: sent with `fetch` (asking for JSON) and
//! answered at the top of the page; then the page the answer names is shown (a tenant just
//! created), else the one a plain post returns to (which closes a confirmation), else the page is
//! reloaded. A form that is busy ignores a second click. Without JavaScript
//! the same forms are plain posts that redirect back with the answer.

use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::HtmlFormElement;

use super::{document, form_fields, listen, navigate, spawn, submitted_form, window};
use crate::forms::ActionReply;

pub fn start() {
    listen(&document(), "submit", on_submit);
}

fn on_submit(e: web_sys::SubmitEvent) {
    let Some((form, method)) = submitted_form(&e) else {
        return;
    };
    let action = form.get_attribute("action").unwrap_or_default();
    if method != "post" || !action.starts_with("/actions/") {
        return;
    }
    e.prevent_default();
    if form.get_attribute("aria-busy").as_deref() == Some("true") {
        return; // a double click sends one request
    }
    let _ = form.set_attribute("aria-busy", "true");
    spawn(async move {
        let answer = post(&form).await.unwrap_or_else(|message| ActionReply {
            ok: false,
            message,
            redirect: None,
        });
        let _ = form.set_attribute("aria-busy", "false");
        // Done: on to where the answer says, else back where a plain post returns (out of a
        // confirmation); refused: the page stays, with what was typed.
        let next = answer.redirect.clone().or_else(|| return_to(&form));
        match next.filter(|to| answer.ok && *to != navigate::here()) {
            Some(to) => navigate::go(to, true).await,
            None => navigate::reload().await,
        }
        show_answer(&answer);
    });
}

/// Where the form's plain post would come back to.
fn return_to(form: &HtmlFormElement) -> Option<String> {
    let field = form.query_selector("input[name=return_to]").ok()??;
    Some(field.dyn_into::<web_sys::HtmlInputElement>().ok()?.value())
}

/// In the page's answer line (`#answer`, at the top of `<main>`), which a live reload keeps and the
/// next page clears.
fn show_answer(answer: &ActionReply) {
    let doc = document();
    let (Ok(Some(line)), Ok(message)) = (doc.query_selector("#answer"), doc.create_element("p"))
    else {
        return;
    };
    message.set_class_name(if answer.ok { "flash ok" } else { "flash bad" });
    message.set_text_content(Some(&answer.message));
    line.set_text_content(None);
    let _ = line.append_child(&message);
}

fn js_err(e: wasm_bindgen::JsValue) -> String {
    e.as_string()
        .unwrap_or_else(|| "the request failed; check your connection".to_owned())
}

async fn post(form: &HtmlFormElement) -> Result<ActionReply, String> {
    let body = form_fields(form).map_err(js_err)?;
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(&body);
    let headers = web_sys::Headers::new().map_err(js_err)?;
    headers.set("Accept", "application/json").map_err(js_err)?;
    init.set_headers(&headers);
    let request = web_sys::Request::new_with_str_and_init(&form.action(), &init).map_err(js_err)?;
    let response: web_sys::Response = JsFuture::from(window().fetch_with_request(&request))
        .await
        .map_err(|_| "the dashboard is unreachable; try again".to_owned())?
        .dyn_into()
        .map_err(js_err)?;
    let text = JsFuture::from(response.text().map_err(js_err)?)
        .await
        .map_err(js_err)?;
    let text = text.as_string().unwrap_or_default();
    serde_json::from_str(&text)
        .map_err(|_| format!("unexpected answer ({}): {text}", response.status()))
}
