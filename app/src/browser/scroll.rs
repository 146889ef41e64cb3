//! Where each page was scrolled to, kept in its history entry, so that Back, Forward and a reload come
//! back to the same place. The browser's own restoration is off: on Back it would scroll the page being
//! left, before the next page's `<main>` has come in, and [`navigate::go`](super::navigate::go) would
//! then scroll to the top.

use super::{listen, window};

pub fn start() {
    if let Ok(history) = window().history() {
        let _ = history.set_scroll_restoration(web_sys::ScrollRestoration::Manual);
    }
    listen(&window(), "scrollend", |_: web_sys::Event| remember());
    listen(&window(), "pagehide", |_: web_sys::Event| remember());
    // A reload of a page left scrolled (unless someone scrolled while it loaded).
    if window().scroll_y() == Ok(0.0) {
        restore();
    }
}

/// Records how far the page shown is scrolled in its history entry: whenever scrolling stops, and
/// before the page is left.
pub fn remember() {
    if let (Ok(history), Ok(y)) = (window().history(), window().scroll_y()) {
        let _ = history.replace_state(&y.into(), "");
    }
}

/// Scrolls to where the history entry shown was left; the top for an entry never scrolled.
pub fn restore() {
    let y = window()
        .history()
        .and_then(|h| h.state())
        .ok()
        .and_then(|state| state.as_f64())
        .unwrap_or(0.0);
    window().scroll_to_with_x_and_y(0.0, y);
}
