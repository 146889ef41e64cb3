//! Keeping the keyboard focus where the person left it. A live refresh replaces the part of the page it
//! re-renders, and the element that held the focus goes with it: the browser then leaves the focus on
//! the page itself, and a keyboard user starts again from the top. So the element with the focus is
//! remembered by what it is — its id, a link's address, a form's action and its button's words — and
//! when the page changes and the focus has fallen to the page, the same element of the new render takes
//! it back; if the new render has no such element (Suspend became Resume), the first control of the
//! same group (`data-focus-group`, a tenant's actions) does. A confirmation remembers what opened it and
//! hands the focus back to it when it closes.

/// Started once, at the app root (in the browser; nothing on the server).
pub fn keep_focus() {
    #[cfg(feature = "hydrate")]
    browser::start();
}

/// Moves the focus to the element `id` (inside a confirmation just opened), remembering what had it:
/// when `id` is gone again the focus returns there.
pub fn focus_opened(id: &'static str) {
    #[cfg(feature = "hydrate")]
    browser::focus_opened(id);
    #[cfg(not(feature = "hydrate"))]
    let _ = id;
}

#[cfg(feature = "hydrate")]
mod browser {
    use std::cell::RefCell;

    use wasm_bindgen::JsCast;
    use wasm_bindgen::closure::Closure;
    use web_sys::{Document, Element, HtmlElement};

    /// An element, in words that name the same element in a new render of the page.
    #[derive(Clone, PartialEq, Eq)]
    struct Focus {
        key: String,
        /// Its `data-focus-group`, if it is in one.
        group: Option<String>,
    }

    thread_local! {
        /// What has the focus (or had it, until it was removed with its part of the page).
        static LAST: RefCell<Option<Focus>> = const { RefCell::new(None) };
        /// An open confirmation's element id, and what opened it.
        static OPENER: RefCell<Option<(&'static str, Focus)>> = const { RefCell::new(None) };
        /// A restore is scheduled.
        static RESTORE_PENDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    fn document() -> Option<Document> {
        web_sys::window()?.document()
    }

    pub fn start() {
        let Some(doc) = document() else { return };
        let on_focus = Closure::<dyn FnMut(web_sys::Event)>::new(|e: web_sys::Event| {
            let key = e
                .target()
                .and_then(|t| t.dyn_into::<Element>().ok())
                .and_then(|el| focus_of(&el));
            if key.is_some() {
                LAST.with(|l| *l.borrow_mut() = key);
            }
        });
        let _ = doc.add_event_listener_with_callback("focusin", on_focus.as_ref().unchecked_ref());
        on_focus.forget();
        // Focus moved away on purpose (a click on the page, say) is not brought back later.
        let on_blur = Closure::<dyn FnMut(web_sys::FocusEvent)>::new(|e: web_sys::FocusEvent| {
            let left = e.target().and_then(|t| t.dyn_into::<Element>().ok());
            if e.related_target().is_none() && left.is_some_and(|el| el.is_connected()) {
                LAST.with(|l| *l.borrow_mut() = None);
            }
        });
        let _ = doc.add_event_listener_with_callback("focusout", on_blur.as_ref().unchecked_ref());
        on_blur.forget();

        let on_change = Closure::<dyn FnMut()>::new(restore_soon);
        let Ok(observer) = web_sys::MutationObserver::new(on_change.as_ref().unchecked_ref())
        else {
            return;
        };
        on_change.forget();
        let options = web_sys::MutationObserverInit::new();
        options.set_child_list(true);
        options.set_subtree(true);
        if let Some(body) = doc.body() {
            let _ = observer.observe_with_options(&body, &options);
        }
    }

    pub fn focus_opened(id: &'static str) {
        let Some(target) = document()
            .and_then(|d| d.get_element_by_id(id))
            .and_then(|e| e.dyn_into::<HtmlElement>().ok())
        else {
            return;
        };
        let opener = LAST.with(|l| l.borrow().clone());
        if let Some(opener) = opener {
            OPENER.with(|o| *o.borrow_mut() = Some((id, opener)));
        }
        let _ = target.focus();
    }

    /// After the page changed, once the render is whole: a re-render can take out the old part and put
    /// in the new one in separate steps, and in between the confirmation would look closed.
    fn restore_soon() {
        if RESTORE_PENDING.with(|p| p.replace(true)) {
            return;
        }
        let Some(window) = web_sys::window() else {
            return;
        };
        let later = Closure::once_into_js(|| {
            RESTORE_PENDING.with(|p| p.set(false));
            restore();
        });
        let _ =
            window.set_timeout_with_callback_and_timeout_and_arguments_0(later.unchecked_ref(), 0);
    }

    /// If the focus fell to the page, gives it back — to what opened a
    /// confirmation that has closed, else to the element that had it.
    fn restore() {
        let Some(doc) = document() else { return };
        let fell = match (doc.active_element(), doc.body()) {
            (None, _) => true,
            (Some(active), Some(body)) => active == *body.unchecked_ref::<Element>(),
            (Some(_), None) => false,
        };
        let closed = OPENER.with(|o| {
            let mut o = o.borrow_mut();
            match o.as_ref() {
                Some((id, _)) if doc.get_element_by_id(id).is_none() => o.take().map(|(_, k)| k),
                _ => None,
            }
        });
        if !fell {
            return;
        }
        let last = LAST.with(|l| l.borrow().clone());
        let again = closed
            .iter()
            .chain(last.iter())
            .find_map(|focus| find(&doc, &focus.key))
            .or_else(|| {
                let group = closed.as_ref().or(last.as_ref())?.group.as_deref()?;
                first_in_group(&doc, group)
            });
        if let Some(element) = again {
            let _ = element.focus();
        }
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
            let selector = if key.starts_with("a ") {
                "a[href]"
            } else {
                "form button"
            };
            let all = doc.query_selector_all(selector).ok()?;
            (0..all.length())
                .filter_map(|i| all.item(i)?.dyn_into::<Element>().ok())
                .find(|el| key_of(el).as_deref() == Some(key))
        };
        found?.dyn_into::<HtmlElement>().ok()
    }
}
