//! Going from page to page without a page load: a plain click on a link to another dashboard page, a
//! filter (a GET form) and Back/Forward load the page's HTML with `fetch` and put its `<main>` and
//! title in place of the current ones. Anything that goes wrong falls back to a plain load, which shows
//! it. [`reload`] does the same for the page shown, when the cluster changed.

use std::cell::Cell;

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Document, Element, HtmlElement};

use super::{document, focus, form_fields, listen, live, scroll, spawn, submitted_form, window};

thread_local! {
    /// A reload is running; `AGAIN` asks for one more when it ends (changes come in bursts).
    static RELOADING: Cell<bool> = const { Cell::new(false) };
    static AGAIN: Cell<bool> = const { Cell::new(false) };
}

pub fn start() {
    listen(&document(), "click", on_click);
    listen(&document(), "submit", on_get_form);
    listen(&window(), "popstate", |_: web_sys::Event| {
        spawn(go(here(), false));
    });
}

/// The path and query of the page shown.
pub fn here() -> String {
    let l = window().location();
    format!(
        "{}{}",
        l.pathname().unwrap_or_default(),
        l.search().unwrap_or_default()
    )
}

/// A page someone is typing into holds still: a reload would take what was typed (and the focus).
/// Suspend's confirmation has no field, so it does not.
fn holds_still(url: &str) -> bool {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let asks = |pair: &str| query.split('&').any(|p| p == pair);
    path == "/tenants/new" || asks("confirm=delete") || asks("edit=limits")
}

/// Shows the current state of the page shown.
pub async fn reload() {
    if RELOADING.with(|r| r.replace(true)) {
        AGAIN.with(|a| a.set(true));
        return;
    }
    loop {
        let url = here();
        if !holds_still(&url)
            && let Ok((page, _)) = load(&url).await
            // Not if the person went elsewhere meanwhile.
            && here() == url
        {
            swap(&page, true);
        }
        if !AGAIN.with(|a| a.replace(false)) {
            break;
        }
    }
    RELOADING.with(|r| r.set(false));
}

/// Shows `url`; `push` adds it to the history (not for Back/Forward, which have moved there already).
pub async fn go(url: String, push: bool) {
    let Ok((page, landed)) = load(&url).await else {
        let _ = window().location().assign(&url);
        return;
    };
    let opener = focus::opener();
    if push {
        // Before the new `<main>` comes in: a shorter page would clamp the scroll.
        scroll::remember();
    }
    if !swap(&page, false) {
        let _ = window().location().assign(&url);
        return;
    }
    if push && let Ok(history) = window().history() {
        let _ = history.push_state_with_url(&JsValue::NULL, "", Some(&landed));
    }
    scroll::restore();
    // Browsers honour `autofocus` on a page's first load only; a confirmation opened here gets the
    // focus the same way.
    if let Ok(Some(el)) = document().query_selector("main [autofocus]") {
        focus::focus_opened(&el, opener);
    }
}

/// The page at `url`, and where it was found (the server may have redirected: a message link it did
/// not sign, say).
async fn load(url: &str) -> Result<(Document, String), JsValue> {
    let init = web_sys::RequestInit::new();
    // Only this dashboard's pages are ever put into this one.
    init.set_mode(web_sys::RequestMode::SameOrigin);
    let headers = web_sys::Headers::new()?;
    headers.set("Accept", "text/html")?;
    init.set_headers(&headers);
    let response: web_sys::Response = JsFuture::from(window().fetch_with_str_and_init(url, &init))
        .await?
        .dyn_into()?;
    // A 404 page is a page (a tenant deleted meanwhile); other errors are shown by a plain load.
    if !response.ok() && response.status() != 404 {
        return Err(JsValue::NULL);
    }
    let html = JsFuture::from(response.text()?)
        .await?
        .as_string()
        .unwrap_or_default();
    let page =
        web_sys::DomParser::new()?.parse_from_string(&html, web_sys::SupportedType::TextHtml)?;
    let landed = web_sys::Url::new(&response.url())
        .map(|u| format!("{}{}", u.pathname(), u.search()))
        .unwrap_or_else(|_| url.to_owned());
    Ok((page, landed))
}

/// Puts `page`'s `<main>` and title in place of the current ones, unless nothing changed (a page
/// that re-renders identically is left alone, focus, selection and all). A reload of the same page
/// keeps the answer to the last action (`#answer`). False if `page` is no dashboard page.
fn swap(page: &Document, same_page: bool) -> bool {
    let doc = document();
    let (Ok(Some(old)), Ok(Some(new))) = (doc.query_selector("main"), page.query_selector("main"))
    else {
        return false;
    };
    doc.set_title(&page.title());
    if old.inner_html() == new.inner_html() {
        return true;
    }
    let new: Element = doc.adopt_node(&new).map_or(new, |n| n.unchecked_into());
    if same_page
        && let (Ok(Some(answer)), Ok(Some(empty))) =
            (old.query_selector("#answer"), new.query_selector("#answer"))
    {
        let _ = empty.replace_with_with_node_1(&answer);
    }
    focus::keep_through(|| {
        let _ = old.replace_with_with_node_1(&new);
    });
    hydrate_islands(&new);
    live::rendered();
    true
}

/// The islands in a part of the page put in by [`swap`] (Leptos' island script hydrates the first
/// page's, and leaves its hydrate function on `window` for the rest).
fn hydrate_islands(root: &Element) {
    let Ok(hydrate) = js_sys::Reflect::get(&window(), &"__hydrateIsland".into()) else {
        return;
    };
    let (Some(hydrate), Ok(islands)) = (
        hydrate.dyn_ref::<js_sys::Function>(),
        root.query_selector_all("leptos-island"),
    ) else {
        return;
    };
    for i in 0..islands.length() {
        if let Some(el) = islands
            .item(i)
            .and_then(|n| n.dyn_into::<HtmlElement>().ok())
        {
            let id = el.dataset().get("component").unwrap_or_default();
            let _ = hydrate.call2(&JsValue::NULL, &el, &id.into());
        }
    }
}

/// A plain left click on a link to another dashboard page.
fn on_click(e: web_sys::MouseEvent) {
    let modified = e.meta_key() || e.ctrl_key() || e.shift_key() || e.alt_key();
    if e.default_prevented() || e.button() != 0 || modified {
        return;
    }
    let Some(link) = e
        .target()
        .and_then(|t| t.dyn_into::<Element>().ok())
        .and_then(|el| el.closest("a[href]").ok().flatten())
    else {
        return;
    };
    if link.has_attribute("download") || link.has_attribute("target") {
        return;
    }
    let Some(path) = link
        .get_attribute("href")
        .and_then(|href| same_origin_path(&href))
    else {
        return;
    };
    e.prevent_default();
    spawn(go(path, true));
}

/// `href`'s path and query if it leads to another page of this dashboard — resolved as the browser
/// resolves it (`/\\evil.example` is another host), and not just a jump within the page.
fn same_origin_path(href: &str) -> Option<String> {
    let location = window().location();
    let here = location.href().ok()?;
    let url = web_sys::Url::new_with_base(href, &here).ok()?;
    let same_page = !url.hash().is_empty() && url.pathname() == location.pathname().ok()?;
    (url.origin() == location.origin().ok()? && !same_page)
        .then(|| format!("{}{}", url.pathname(), url.search()))
}

/// A GET form (the tenants' filter): its fields become the query of the page to show.
fn on_get_form(e: web_sys::SubmitEvent) {
    let Some((form, method)) = submitted_form(&e) else {
        return;
    };
    if method != "get" {
        return;
    }
    let (Ok(query), Some(action)) = (form_fields(&form), form.get_attribute("action")) else {
        return;
    };
    e.prevent_default();
    spawn(go(
        format!("{action}?{}", String::from(query.to_string())),
        true,
    ));
}
