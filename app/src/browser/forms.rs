//! Posts to `/actions/…` once the page runs its script: sent with `fetch` (asking for JSON), answered
//! inline next to the button, and the page reloaded — or, where the answer says so (a tenant just
//! created), the page it names shown. A form that is busy ignores a second click. Without JavaScript
//! the same forms are plain posts that redirect back with the answer.

use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::HtmlFormElement;

use super::{document, listen, navigate, spawn, window};
use crate::forms::ActionReply;

pub fn start() {
    listen(&document(), "submit", on_submit);
}

fn on_submit(e: web_sys::SubmitEvent) {
    let Some(form) = e
        .target()
        .and_then(|t| t.dyn_into::<HtmlFormElement>().ok())
    else {
        return;
    };
    let action = form.get_attribute("action").unwrap_or_default();
    if !form.method().eq_ignore_ascii_case("post") || !action.starts_with("/actions/") {
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
        if let Some(to) = answer.redirect.clone().filter(|_| answer.ok) {
            navigate::go(to, true).await;
            return;
        }
        navigate::reload().await;
        // The reload may have replaced the form: the answer goes next to the form of the same action.
        show_answer(&action, &answer);
    });
}

fn show_answer(action: &str, answer: &ActionReply) {
    let doc = document();
    let Ok(forms) = doc.query_selector_all("main form[method=post]") else {
        return;
    };
    let form = (0..forms.length())
        .filter_map(|i| forms.item(i)?.dyn_into::<web_sys::Element>().ok())
        .find(|f| f.get_attribute("action").as_deref() == Some(action));
    let (Some(form), Ok(span)) = (form, doc.create_element("span")) else {
        return;
    };
    if let Ok(Some(old)) = form.query_selector(".inline-msg") {
        old.remove();
    }
    span.set_class_name(if answer.ok {
        "inline-msg ok"
    } else {
        "inline-msg bad"
    });
    let _ = span.set_attribute("role", "status");
    span.set_text_content(Some(&answer.message));
    let _ = form.append_child(&span);
}

fn js_err(e: wasm_bindgen::JsValue) -> String {
    e.as_string()
        .unwrap_or_else(|| "the request failed; check your connection".to_owned())
}

async fn post(form: &HtmlFormElement) -> Result<ActionReply, String> {
    let data = web_sys::FormData::new_with_form(form).map_err(js_err)?;
    let body = web_sys::UrlSearchParams::new_with_str_sequence_sequence(&data).map_err(js_err)?;
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
