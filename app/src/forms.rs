//! Mutating forms. Without JavaScript they are plain POSTs to `/actions/…` that redirect back with a
//! message in the query; with it, the same forms submit with `fetch` and show the answer inline
//! ([`crate::browser`]) — one markup, both ways.

use leptos::prelude::*;
use leptos_router::hooks::use_location;
use serde::{Deserialize, Serialize};

/// What `/actions/…` answers a request that asks for JSON.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ActionReply {
    pub ok: bool,
    pub message: String,
    /// Where the page should go next (e.g. a tenant just created).
    pub redirect: Option<String>,
}

/// The current page, as its path and the query parameters that choose what it lists (a filter, a
/// page number): where a form post comes back to and a confirmation's Cancel goes. What only opened a
/// confirmation or carried a message is left out, so coming back closes the one and drops the other.
pub fn current_url() -> String {
    let location = use_location();
    let path = location.pathname.get_untracked();
    let query = location.search.get_untracked();
    page_url(&path, &query)
}

/// `path` with those of `query`'s parameters that choose what the page lists.
pub fn page_url(path: &str, query: &str) -> String {
    const KEPT: [&str; 3] = ["phase", "q", "page"];
    let kept: Vec<&str> = query
        .trim_start_matches('?')
        .split('&')
        .filter(|pair| KEPT.contains(&pair.split('=').next().unwrap_or_default()))
        .collect();
    if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

/// The dashboard session's token, which the server provides to every page it renders; every form sends
/// it back (`session`), and the server refuses a post without it.
#[derive(Clone, Debug)]
pub struct SessionToken(pub String);

#[component]
pub fn PostForm(
    /// `/actions/…` endpoint.
    action: String,
    /// Where to come back to after the post (with JavaScript or without); defaults to the current page.
    #[prop(optional, into)]
    return_to: Option<String>,
    #[prop(optional)] class: &'static str,
    children: Children,
) -> impl IntoView {
    let return_to = return_to.unwrap_or_else(current_url);
    let session = use_context::<SessionToken>()
        .map(|t| t.0)
        .unwrap_or_default();
    view! {
        <form method="post" action=action class=class>
            <input type="hidden" name="session" value=session/>
            <input type="hidden" name="return_to" value=return_to/>
            {children()}
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::page_url;

    #[test]
    fn coming_back_keeps_the_listing_and_drops_confirmations_and_messages() {
        assert_eq!(
            page_url("/tenants/acme", "?confirm=suspend&tenant=acme"),
            "/tenants/acme"
        );
        assert_eq!(
            page_url(
                "/tenants",
                "?phase=Ready&confirm=suspend&tenant=acme&q=ac&page=2&notice=x"
            ),
            "/tenants?phase=Ready&q=ac&page=2"
        );
        assert_eq!(page_url("/runs", ""), "/runs");
    }
}
