//! What runs in the browser (feature `hydrate`). The dashboard is built in Leptos' islands mode: every
//! page is rendered by the server only, and the one part that must react to typing, the new tenant's
//! name, is an island. The rest is here, plain DOM work over the server's HTML:
//! - [`navigate`]: a link or a filter loads the next page's HTML and puts its `<main>` in place of the
//!   current one — no page load, so the event stream, the focus memory and the history stay;
//! - [`live`]: the event stream, which reloads the current page's `<main>` the same way on every
//!   change, and the clocks (ages, durations, countdowns) that tick between renders;
//! - [`forms`]: posts to `/actions/…` sent with `fetch`, answered at the top of the page;
//! - [`focus`]: the keyboard focus kept through every new `<main>`;
//! - [`scroll`]: each page's scroll position, kept for Back, Forward and a reload.
//!
//! Before islands the whole app was hydrated: 468 KiB of wasm + JS (gzip -9), against 147 KiB now
//! (BENCHMARKS.md, Sizes).

mod focus;
mod forms;
mod live;
mod navigate;
mod scroll;

use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;

pub fn start() {
    navigate::start();
    forms::start();
    live::start();
    scroll::start();
}

fn window() -> web_sys::Window {
    web_sys::window().expect("a window")
}

fn document() -> web_sys::Document {
    window().document().expect("a document")
}

/// Calls `f` on every `event` at `target`, for the life of the page.
fn listen<E: wasm_bindgen::convert::FromWasmAbi + 'static>(
    target: &web_sys::EventTarget,
    event: &str,
    f: impl FnMut(E) + 'static,
) {
    let f = Closure::<dyn FnMut(E)>::new(f);
    let _ = target.add_event_listener_with_callback(event, f.as_ref().unchecked_ref());
    f.forget();
}

fn spawn(f: impl std::future::Future<Output = ()> + 'static) {
    wasm_bindgen_futures::spawn_local(f);
}

/// The form a `submit` event is for, and its method (lower case).
fn submitted_form(e: &web_sys::SubmitEvent) -> Option<(web_sys::HtmlFormElement, String)> {
    let form = e.target()?.dyn_into::<web_sys::HtmlFormElement>().ok()?;
    let method = form.method().to_ascii_lowercase();
    Some((form, method))
}

/// A form's fields, encoded as a plain form post or a GET query encodes them.
fn form_fields(
    form: &web_sys::HtmlFormElement,
) -> Result<web_sys::UrlSearchParams, wasm_bindgen::JsValue> {
    let data = web_sys::FormData::new_with_form(form)?;
    web_sys::UrlSearchParams::new_with_str_sequence_sequence(&data)
}
