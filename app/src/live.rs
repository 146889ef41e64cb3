//! Liveness in the browser: a change counter fed by server-sent events, and a one-second clock for ages
//! and countdowns. On the server both are inert, so pages render once, complete.

use leptos::prelude::*;

/// Provided at the app root.
#[derive(Clone, Copy)]
pub struct Live {
    /// Bumped on every change the server announces, and on every (re)connect: resources that read it
    /// refetch, replacing what they show (never appending, so a reconnect cannot duplicate rows).
    pub version: RwSignal<u64>,
    /// Seconds since the page loaded; re-renders countdowns.
    pub tick: RwSignal<i64>,
    /// Connected to the event stream.
    pub connected: RwSignal<bool>,
}

pub fn provide_live() -> Live {
    let live = Live {
        version: RwSignal::new(0),
        tick: RwSignal::new(0),
        connected: RwSignal::new(false),
    };
    provide_context(live);
    #[cfg(feature = "hydrate")]
    browser::start(live);
    live
}

pub fn use_live() -> Live {
    expect_context::<Live>()
}

/// The server's "now" plus the seconds since it was fetched.
pub fn now_from(server_now: &str, fetched_at_tick: i64, tick: i64) -> String {
    match server_now.parse::<jiff::Timestamp>() {
        Ok(t) => (t + jiff::SignedDuration::from_secs((tick - fetched_at_tick).max(0))).to_string(),
        Err(_) => server_now.to_owned(),
    }
}

#[cfg(feature = "hydrate")]
mod browser {
    use leptos::prelude::*;
    use wasm_bindgen::JsCast;
    use wasm_bindgen::closure::Closure;

    use super::Live;

    pub fn start(live: Live) {
        let Some(window) = web_sys::window() else {
            return;
        };
        let tick = Closure::<dyn FnMut()>::new(move || live.tick.update(|t| *t += 1));
        let _ = window.set_interval_with_callback_and_timeout_and_arguments_0(
            tick.as_ref().unchecked_ref(),
            1000,
        );
        tick.forget();

        // A page the browser keeps for Back (the back/forward cache) must not keep its stream: over
        // HTTP/1.1 a browser opens at most six connections to one host, so six kept pages would stall
        // the seventh load until one times out. Closed when the page is hidden, opened again if it comes
        // back; a fresh stream's `open` refetches, so what it shows is current.
        let stream = std::rc::Rc::new(std::cell::RefCell::new(connect(live)));
        let held = stream.clone();
        let on_hide = Closure::<dyn FnMut()>::new(move || {
            if let Some(events) = held.borrow_mut().take() {
                events.close();
                live.connected.set(false);
            }
        });
        let _ =
            window.add_event_listener_with_callback("pagehide", on_hide.as_ref().unchecked_ref());
        on_hide.forget();
        let on_show = Closure::<dyn FnMut(web_sys::PageTransitionEvent)>::new(
            move |e: web_sys::PageTransitionEvent| {
                let mut held = stream.borrow_mut();
                if e.persisted() && held.is_none() {
                    *held = connect(live);
                }
            },
        );
        let _ =
            window.add_event_listener_with_callback("pageshow", on_show.as_ref().unchecked_ref());
        on_show.forget();
    }

    /// Opens `/events`. EventSource reconnects by itself after a drop; `open` fires again then, and the
    /// refetch it triggers replaces whatever the page showed.
    fn connect(live: Live) -> Option<web_sys::EventSource> {
        let events = web_sys::EventSource::new("/events").ok()?;
        let on_change = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |_| {
            live.version.update(|v| *v += 1)
        });
        events.set_onmessage(Some(on_change.as_ref().unchecked_ref()));
        on_change.forget();
        let on_open = Closure::<dyn FnMut()>::new(move || {
            live.connected.set(true);
            live.version.update(|v| *v += 1);
        });
        events.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        on_open.forget();
        let on_error = Closure::<dyn FnMut()>::new(move || live.connected.set(false));
        events.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        on_error.forget();
        Some(events)
    }
}
