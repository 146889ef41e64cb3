//! Liveness: the event stream and the clocks. Every message on `/events`, and every (re)connect,
//! reloads the page shown (replacing what it shows, never appending, so a reconnect cannot duplicate
//! rows); ages, durations and countdowns count on from the server's "now" the page was rendered with.

use std::cell::{Cell, RefCell};

use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::Element;

use super::{document, listen, navigate, spawn, window};
use crate::components::{LIVE, STATIC};
use crate::model::{clock_text, now_from};

thread_local! {
    /// When `<main>` was last rendered, in the browser's milliseconds: elapsed time is read off the
    /// clock, not counted in ticks, which a background tab gets once a minute at most.
    static RENDERED_AT: Cell<f64> = const { Cell::new(0.0) };
    static STREAM: RefCell<Option<web_sys::EventSource>> = const { RefCell::new(None) };
}

pub fn start() {
    rendered();
    let tick = Closure::<dyn FnMut()>::new(render_clocks);
    let _ = window().set_interval_with_callback_and_timeout_and_arguments_0(
        tick.as_ref().unchecked_ref(),
        1000,
    );
    tick.forget();
    // A page the browser keeps for Back (the back/forward cache) must not keep its stream: over
    // HTTP/1.1 a browser opens at most six connections to one host, so six kept pages would stall the
    // seventh load until one times out. Closed when the page is hidden, opened again if it comes back;
    // a fresh stream's `open` reloads, so what it shows is current.
    listen(&window(), "pagehide", |_: web_sys::Event| {
        if let Some(events) = STREAM.with(|s| s.borrow_mut().take()) {
            events.close();
            show_connected(false);
        }
    });
    listen(&window(), "pageshow", |e: web_sys::PageTransitionEvent| {
        if e.persisted() && STREAM.with(|s| s.borrow().is_none()) {
            connect();
        }
    });
    connect();
}

/// Opens `/events`. EventSource reconnects by itself after a drop; `open` fires again then.
fn connect() {
    let Ok(events) = web_sys::EventSource::new("/events") else {
        return;
    };
    let on_change = Closure::<dyn FnMut()>::new(|| spawn(navigate::reload()));
    events.set_onmessage(Some(on_change.as_ref().unchecked_ref()));
    on_change.forget();
    let on_open = Closure::<dyn FnMut()>::new(|| {
        show_connected(true);
        spawn(navigate::reload());
    });
    events.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    on_open.forget();
    let on_error = Closure::<dyn FnMut()>::new(|| show_connected(false));
    events.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    on_error.forget();
    STREAM.with(|s| *s.borrow_mut() = Some(events));
}

fn show_connected(connected: bool) {
    if let Ok(Some(el)) = document().query_selector(".live") {
        el.set_text_content(Some(if connected { LIVE } else { STATIC }));
    }
}

/// `<main>` was just rendered: the clocks count from its `data-now` again.
pub fn rendered() {
    RENDERED_AT.with(|r| r.set(js_sys::Date::now()));
    render_clocks();
}

/// Every `data-clock` element — `age` from `data-from`, `duration` from `data-from` to `data-to` or
/// now, `countdown` to `data-to` — as of the nearest `data-now` (the server's time when it rendered
/// the page: the clock's own, or a table's for all of its rows) plus the seconds since.
fn render_clocks() {
    let Ok(clocks) = document().query_selector_all("[data-clock]") else {
        return;
    };
    let since = ((js_sys::Date::now() - RENDERED_AT.with(Cell::get)) / 1000.0) as i64;
    for i in 0..clocks.length() {
        let Some(el) = clocks.item(i).and_then(|n| n.dyn_into::<Element>().ok()) else {
            continue;
        };
        let Some(server_now) = el
            .closest("[data-now]")
            .ok()
            .flatten()
            .and_then(|at| at.get_attribute("data-now"))
        else {
            continue;
        };
        let attr = |name| el.get_attribute(name);
        let now = now_from(&server_now, since);
        let text = clock_text(
            attr("data-clock").as_deref(),
            attr("data-from"),
            attr("data-to"),
            &now,
        );
        if let Some(text) = text
            && el.text_content().as_deref() != Some(text.as_str())
        {
            el.set_text_content(Some(&text));
        }
    }
}
