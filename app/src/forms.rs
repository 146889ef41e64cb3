//! Mutating forms. Without JavaScript they are plain POSTs to `/actions/…` that redirect back with a
//! message in the query; once hydrated, the same forms submit with `fetch`, show the answer inline and
//! refresh the data — one markup, both ways.

use leptos::prelude::*;
use leptos_router::hooks::use_location;
use serde::{Deserialize, Serialize};

use crate::live::use_live;

/// What `/actions/…` answers a request that asks for JSON.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ActionReply {
    pub ok: bool,
    pub message: String,
    /// Where the page should go next (e.g. a tenant just created).
    pub redirect: Option<String>,
}

/// The path and query of the current page: where a no-JS form post comes back to.
pub fn current_url() -> String {
    let location = use_location();
    let path = location.pathname.get_untracked();
    let query = location.search.get_untracked();
    if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.trim_start_matches('?'))
    }
}

#[component]
pub fn PostForm(
    /// `/actions/…` endpoint.
    action: String,
    /// Where to come back to after a no-JS post; defaults to the current page.
    #[prop(optional, into)]
    return_to: Option<String>,
    #[prop(optional)] class: &'static str,
    children: Children,
) -> impl IntoView {
    let reply = RwSignal::new(None::<ActionReply>);
    let busy = RwSignal::new(false);
    let live = use_live();
    let return_to = return_to.unwrap_or_else(current_url);
    #[cfg(feature = "hydrate")]
    let navigate = leptos_router::hooks::use_navigate();
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        #[cfg(feature = "hydrate")]
        {
            use wasm_bindgen::JsCast;
            ev.prevent_default();
            if busy.get_untracked() {
                return; // a double click sends one request
            }
            let Some(form) = ev
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlFormElement>().ok())
            else {
                return;
            };
            busy.set(true);
            let navigate = navigate.clone();
            leptos::task::spawn_local(async move {
                let answer = browser::post(&form)
                    .await
                    .unwrap_or_else(|message| ActionReply {
                        ok: false,
                        message,
                        redirect: None,
                    });
                busy.set(false);
                live.version.update(|v| *v += 1);
                if let Some(to) = answer.redirect.clone().filter(|_| answer.ok) {
                    navigate(&to, Default::default());
                }
                reply.set(Some(answer));
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (ev, live);
    };
    view! {
        <form method="post" action=action class=class on:submit=on_submit aria-busy=move || busy.get().to_string()>
            <input type="hidden" name="return_to" value=return_to/>
            {children()}
            {move || reply.get().map(|r| {
                let class = if r.ok { "inline-msg ok" } else { "inline-msg bad" };
                view! { <span class=class role="status">{r.message}</span> }
            })}
        </form>
    }
}

#[cfg(feature = "hydrate")]
mod browser {
    use wasm_bindgen::JsCast;
    use wasm_bindgen_futures::JsFuture;

    use super::ActionReply;

    fn js_err(e: wasm_bindgen::JsValue) -> String {
        e.as_string()
            .unwrap_or_else(|| "the request failed; check your connection".to_owned())
    }

    pub async fn post(form: &web_sys::HtmlFormElement) -> Result<ActionReply, String> {
        let data = web_sys::FormData::new_with_form(form).map_err(js_err)?;
        let body =
            web_sys::UrlSearchParams::new_with_str_sequence_sequence(&data).map_err(js_err)?;
        let init = web_sys::RequestInit::new();
        init.set_method("POST");
        init.set_body(&body);
        let headers = web_sys::Headers::new().map_err(js_err)?;
        headers.set("Accept", "application/json").map_err(js_err)?;
        init.set_headers(&headers);
        let request =
            web_sys::Request::new_with_str_and_init(&form.action(), &init).map_err(js_err)?;
        let window = web_sys::window().ok_or("no window")?;
        let response: web_sys::Response = JsFuture::from(window.fetch_with_request(&request))
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
}
