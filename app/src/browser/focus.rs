//! Keeping the keyboard focus where the person left it. A live refresh replaces the page's `<main>`, and
//! the element that held the focus goes with it: the browser then leaves the focus on the page itself,
//! and a keyboard user starts again from the top. So the element with the focus is known by what it
//! is — its id, a link's address, a form's action and its button's words, a field's name — and when the
//! focus has fallen to the page, the same element of the new render takes it back; if the new render has no such element (Suspend became Resume), the first control of the
//! same group (`data-focus-group`, a tenant's actions) does. A confirmation remembers what opened it and
//! hands the focus back to it when it closes.
use std::cell::RefCell;

use wasm_bindgen::JsCast;
use web_sys::{Document, Element, HtmlElement, HtmlInputElement};

use super::document;

/// An element, in words that name the same element in a new render of the page.
#[derive(Clone, PartialEq, Eq)]
struct Focus {
    key: String,
    /// Its `data-focus-group`, if it is in one.
    group: Option<String>,
}

thread_local! {
    /// An open confirmation's element id, and what opened it.
    static OPENER: RefCell<Option<(String, Focus)>> = const { RefCell::new(None) };
}

/// Runs `change` (a new render of part of the page) and gives the focus back if it fell to the page
/// with the part it was in: to what opened a confirmation that has closed, else to the element that
/// had it — with what was typed into it, if it is a field.
pub fn keep_through(change: impl FnOnce()) {
    let doc = document();
    let active = doc.active_element().filter(|el| !is_body(&doc, el));
    let had = active.as_ref().and_then(focus_of);
    let typed = active
        .and_then(|el| el.dyn_into::<HtmlInputElement>().ok())
        .map(|input| input.value());
    change();
    let closed = OPENER.with(|o| {
        let mut o = o.borrow_mut();
        match o.as_ref() {
            Some((id, _)) if doc.get_element_by_id(id).is_none() => o.take().map(|(_, k)| k),
            _ => None,
        }
    });
    if doc.active_element().is_some_and(|el| !is_body(&doc, &el)) {
        return;
    }
    let again = closed
        .iter()
        .chain(had.iter())
        .find_map(|focus| find(&doc, &focus.key))
        .or_else(|| {
            let group = closed.as_ref().or(had.as_ref())?.group.as_deref()?;
            first_in_group(&doc, group)
        });
    let Some(element) = again else { return };
    if closed.is_none()
        && let (Some(typed), Some(input)) = (typed, element.dyn_ref::<HtmlInputElement>())
    {
        input.set_value(&typed);
    }
    let _ = element.focus();
}

fn is_body(doc: &Document, el: &Element) -> bool {
    doc.body()
        .is_some_and(|b| b.unchecked_ref::<Element>() == el)
}

/// What has the focus now, to be handed to [`focus_opened`] once the page changed.
pub struct Opener(Option<Focus>);

pub fn opener() -> Opener {
    let doc = document();
    Opener(
        doc.active_element()
            .filter(|a| !is_body(&doc, a))
            .as_ref()
            .and_then(focus_of),
    )
}

/// Moves the focus into a confirmation just opened (to `el`, its `autofocus` element), remembering
/// what opened it: when `el` is gone again, the focus returns there.
pub fn focus_opened(el: &Element, opener: Opener) {
    let Some(target) = el.dyn_ref::<HtmlElement>() else {
        return;
    };
    if let Some(opener) = opener.0 {
        OPENER.with(|o| *o.borrow_mut() = Some((el.id(), opener)));
    }
    let _ = target.focus();
}

fn focus_of(el: &Element) -> Option<Focus> {
    Some(Focus {
        key: key_of(el)?,
        group: el
            .closest("[data-focus-group]")
            .ok()
            .flatten()
            .and_then(|g| g.get_attribute("data-focus-group")),
    })
}

/// The first link or button of the group `group`.
fn first_in_group(doc: &Document, group: &str) -> Option<HtmlElement> {
    let groups = doc.query_selector_all("[data-focus-group]").ok()?;
    let container = (0..groups.length())
        .filter_map(|i| groups.item(i)?.dyn_into::<Element>().ok())
        .find(|g| g.get_attribute("data-focus-group").as_deref() == Some(group))?;
    container
        .query_selector("a[href], button")
        .ok()
        .flatten()?
        .dyn_into::<HtmlElement>()
        .ok()
}

/// What an element is, in words that name the same element in a new render of the page.
fn key_of(el: &Element) -> Option<String> {
    if !el.id().is_empty() {
        return Some(format!("#{}", el.id()));
    }
    match el.tag_name().as_str() {
        "A" => el.get_attribute("href").map(|href| format!("a {href}")),
        "INPUT" | "SELECT" => el
            .get_attribute("name")
            .map(|name| format!("[name={name}]")),
        "BUTTON" => {
            let form = el.closest("form").ok().flatten()?;
            let action = form.get_attribute("action")?;
            Some(format!("button {action} {}", el.text_content()?))
        }
        _ => None,
    }
}

fn find(doc: &Document, key: &str) -> Option<HtmlElement> {
    let found = if let Some(id) = key.strip_prefix('#') {
        doc.get_element_by_id(id)
    } else {
        let selector = match key.split_once(' ') {
            Some(("a", _)) => "a[href]",
            Some(("button", _)) => "form button",
            _ => key, // `[name=…]`
        };
        let all = doc.query_selector_all(selector).ok()?;
        (0..all.length())
            .filter_map(|i| all.item(i)?.dyn_into::<Element>().ok())
            .find(|el| key_of(el).as_deref() == Some(key))
    };
    found?.dyn_into::<HtmlElement>().ok()
}
