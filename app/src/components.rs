//! Pieces every page uses.

use leptos::prelude::*;
use leptos_router::components::A;
use leptos_router::hooks::use_query_map;

use crate::forms::PostForm;
use crate::model::{Allowed, PAGE_SIZE, TenantRow, phase_class};
use crate::text::percent_encode;

/// The header's word for a page connected to the event stream, and for one that is not.
pub const LIVE: &str = "● Live";
pub const STATIC: &str = "○ Static";

/// `view` rendered to HTML at once, in one pass into one string, to be put in place with
/// `inner_html`. A page as a whole goes through Leptos' streaming renderer (a page may wait on the
/// API), which allocates and copies every element's tags on its own; for the many small elements of
/// a table's rows or a chart's marks that was most of a page's cost. Text and attributes are escaped
/// the same way on both paths. Only for markup without islands: an island's script is not wired up
/// inside a string.
pub fn rendered_at_once(view: impl RenderHtml) -> String {
    view.to_html()
}

#[component]
pub fn Layout(children: Children) -> impl IntoView {
    view! {
        <header class="top">
            <a class="brand" href="/">"sentry-tenants"</a>
            <nav>
                <A href="/" exact=true>"Overview"</A>
                <A href="/tenants">"Tenants"</A>
                <A href="/runs">"Run jobs"</A>
            </nav>
            // The script says LIVE while it is connected to the event stream.
            <span class="live" title="Live updates from the cluster">{STATIC}</span>
        </header>
        <main>
            // The answer to an action sent with `fetch` ([`crate::browser`]); a plain post's comes back
            // in the query and is shown by the page's `Flash`.
            <div id="answer" role="status" aria-live="polite"></div>
            {children()}
        </main>
    }
}

#[component]
pub fn PhaseBadge(#[prop(into)] phase: String) -> impl IntoView {
    view! { <span class=phase_class(&phase) data-phase=phase.clone()>{phase.clone()}</span> }
}

#[component]
pub fn ReadyCell(
    ready: bool,
    #[prop(into)] reason: String,
    #[prop(into)] message: String,
) -> impl IntoView {
    let text = if ready { "Ready" } else { "Not ready" };
    let class = if ready { "ready yes" } else { "ready no" };
    view! {
        <span class=class title=message.clone()>{text}</span>
        {(!ready).then(|| view! { <small class="why">{reason}</small> })}
    }
}

/// `?notice=` / `?error=` left by a no-JS form post.
#[component]
pub fn Flash() -> impl IntoView {
    let query = use_query_map();
    move || {
        let q = query.get();
        let notice = q
            .get("notice")
            .map(|m| view! { <p class="flash ok" role="status">{m}</p> });
        let error = q
            .get("error")
            .map(|m| view! { <p class="flash bad" role="alert">{m}</p> });
        (notice, error)
    }
}

#[component]
pub fn EmptyState(
    #[prop(into)] title: String,
    #[prop(into)] hint: String,
    children: Children,
) -> impl IntoView {
    view! {
        <div class="empty">
            <h3>{title}</h3>
            <p>{hint}</p>
            {children()}
        </div>
    }
}

/// Provision / Suspend / Resume / Delete / Rotate for one tenant, each shown only when the tenant's state
/// allows it and the dashboard's account may take it. Suspend asks for a confirmation first (a link to
/// the same page with `?confirm=suspend`), which works the same with and without JavaScript.
#[component]
pub fn TenantActions(row: TenantRow, may: Allowed, #[prop(into)] here: String) -> impl IntoView {
    if !may.any() {
        return view! { <span class="muted">"read-only"</span> }.into_any();
    }
    let name = row.name.clone();
    let provision_label = row.provision_label();
    let confirm_href = confirm(&here, "suspend", &name);
    view! {
        <div class="actions" data-focus-group=format!("actions-{name}")>
            {(may.start_runs && row.can_provision()).then(|| view! {
                <PostForm action=format!("/actions/tenants/{name}/provision") return_to=here.clone()>
                    <button type="submit" class="btn primary">{provision_label}</button>
                </PostForm>
            })}
            {(row.provisioning).then(|| view! { <span class="muted">"provisioning…"</span> })}
            {(may.change && row.can_suspend()).then(|| view! { <a class="btn" href=confirm_href.clone()>"Suspend"</a> })}
            {(may.change && row.can_resume()).then(|| view! {
                <PostForm action=format!("/actions/tenants/{name}/resume") return_to=here.clone()>
                    <button type="submit" class="btn">"Resume"</button>
                </PostForm>
            })}
            {(may.delete && row.can_delete()).then(|| view! {
                <a class="btn danger-outline" href=format!("/tenants/{name}?confirm=delete")>"Delete"</a>
            })}
            {(may.start_runs && row.can_rotate()).then(|| view! {
                <PostForm action=format!("/actions/tenants/{name}/rotate") return_to=here.clone()>
                    <button type="submit" class="btn" title="Issue a new password; the old one keeps working for the tenant's rotation grace period where ClickHouse allows it">"Rotate credentials"</button>
                </PostForm>
                <a class="btn danger-outline" href=confirm(&here, "revoke", &name) title="For a leaked password: a new one, every other refused at once, running queries ended">"Revoke credentials"</a>
            })}
        </div>
    }
    .into_any()
}

/// `here` with `confirm=ACTION&tenant=NAME` added: the link that asks before a destructive action.
fn confirm(here: &str, action: &str, name: &str) -> String {
    let join = if here.contains('?') { '&' } else { '?' };
    format!("{here}{join}confirm={action}&tenant={name}")
}

/// The confirmation for Delete (`?confirm=delete` on the tenant's page): it says what the tenant's
/// reclaim policy will do and asks for the tenant's name, which the server checks again.
#[component]
pub fn ConfirmDelete(row: TenantRow, allowed: bool) -> impl IntoView {
    let query = use_query_map();
    move || {
        let asked = query.get().get("confirm").as_deref() == Some("delete");
        (asked && allowed && row.can_delete()).then(|| {
            let name = row.name.clone();
            let back = format!("/tenants/{name}");
            view! {
                <div class="confirm" role="dialog" aria-label="Confirm delete">
                    <p>"Delete " <strong>{name.clone()}</strong> "? " {row.delete_consequence()}</p>
                    <PostForm action=format!("/actions/tenants/{name}/delete") return_to=back.clone()>
                        <label for="confirm_name">"Type " <code>{name.clone()}</code> " to confirm"</label>
                        <input id="confirm_name" name="confirm_name" required autocomplete="off" autofocus/>
                        <button type="submit" class="btn danger">"Delete " {name.clone()}</button>
                        <a class="btn" href=back.clone()>"Cancel"</a>
                    </PostForm>
                </div>
            }
        })
    }
}

/// The confirmation for Revoke, requested with `?confirm=revoke&tenant=…`: what the apps will feel.
#[component]
pub fn ConfirmRevoke(allowed: bool, #[prop(into)] back: String) -> impl IntoView {
    view! {
        <ConfirmAction action="revoke" label="Revoke" question="Revoke the credentials of"
            consequence="It gets a new password and every other stops working at once, with no grace period; its running queries are ended. Its apps fail until they read the new password from the Secret."
            allowed back/>
    }
}

/// The confirmation for Suspend, requested with `?confirm=suspend&tenant=…`.
#[component]
pub fn ConfirmSuspend(allowed: bool, #[prop(into)] back: String) -> impl IntoView {
    view! {
        <ConfirmAction action="suspend" label="Suspend" question="Suspend"
            consequence="Its ClickHouse logins will be locked until it is resumed."
            allowed back/>
    }
}

/// The confirmation box for a destructive `action` on the tenant named by `?confirm=ACTION&tenant=…`:
/// "`question` TENANT? `consequence`", and a button that posts the action.
#[component]
fn ConfirmAction(
    action: &'static str,
    label: &'static str,
    question: &'static str,
    consequence: &'static str,
    allowed: bool,
    back: String,
) -> impl IntoView {
    let query = use_query_map();
    move || {
        let q = query.get();
        let tenant = q
            .get("tenant")
            .filter(|_| q.get("confirm").as_deref() == Some(action) && allowed)?;
        let back = back.clone();
        Some(view! {
            <div class="confirm" role="dialog" aria-label=format!("Confirm {action}")>
                <p>{question} " " <strong>{tenant.clone()}</strong> "? " {consequence}</p>
                <PostForm action=format!("/actions/tenants/{tenant}/{action}") return_to=back.clone()>
                    <button type="submit" id=format!("confirm_{action}") class="btn danger" autofocus>{label} " " {tenant.clone()}</button>
                    <a class="btn" href=back.clone()>"Cancel"</a>
                </PostForm>
            </div>
        })
    }
}

/// "Showing 51–100 of 10,000" with Previous/Next links that keep the page's other query parameters
/// (plain links: paging works without JavaScript).
#[component]
pub fn Pager(
    page: usize,
    pages: usize,
    matched: usize,
    /// The list's path, e.g. `/tenants`.
    path: &'static str,
) -> impl IntoView {
    let query = use_query_map();
    let href = move |to: usize| {
        let mut params: Vec<String> = query
            .get_untracked()
            .into_iter()
            .filter(|(k, _)| k != "page" && k != "notice" && k != "error" && k != "confirm")
            .map(|(k, v)| format!("{}={}", percent_encode(&k), percent_encode(&v)))
            .collect();
        params.push(format!("page={to}"));
        format!("{path}?{}", params.join("&"))
    };
    let first = (page - 1) * PAGE_SIZE + 1;
    let last = (page * PAGE_SIZE).min(matched);
    view! {
        <nav class="pager" aria-label="Pages">
            <span class="muted">{format!("Showing {first}–{last} of {matched}")}</span>
            {(page > 1).then(|| view! { <a class="btn" rel="prev" href=href(page - 1)>"← Previous"</a> })}
            <span>{format!("Page {page} of {pages}")}</span>
            {(page < pages).then(|| view! { <a class="btn" rel="next" href=href(page + 1)>"Next →"</a> })}
        </nav>
    }
}

/// The limit fields' names, as the forms post them.
pub const LIMIT_FIELDS: [&str; 4] = [
    "max_memory_per_query",
    "max_execution_seconds",
    "max_concurrent_queries",
    "queries_per_hour",
];

/// The four limit fields (empty: no limit), shared by the create form and the tenant page's Change
/// limits form; `initial` is what to show (the spec's limits, or what a rejected post brought back).
#[component]
pub fn LimitsFields(initial: [String; 4]) -> impl IntoView {
    use crate::limits::{MAX_CONCURRENT_QUERIES, MAX_EXECUTION_SECONDS, MAX_QUERIES_PER_HOUR};
    let [memory, seconds, concurrent, per_hour] = initial;
    view! {
        <fieldset class="limits">
            <legend>"Limits " <span class="muted">"(empty: no limit)"</span></legend>
            <label for="max_memory_per_query">"Memory per query"</label>
            <input id="max_memory_per_query" name="max_memory_per_query" autocomplete="off" value=memory
                pattern="[1-9][0-9]{0,3}(Mi|Gi)" placeholder="4Gi" aria-describedby="memory-hint"/>
            <small class="hint" id="memory-hint">"1 to 9999 followed by Mi or Gi"</small>
            <label for="max_execution_seconds">"Seconds per query"</label>
            <input id="max_execution_seconds" name="max_execution_seconds" type="number" min="1"
                max=MAX_EXECUTION_SECONDS.to_string() value=seconds placeholder="60"/>
            <label for="max_concurrent_queries">"Concurrent queries"</label>
            <input id="max_concurrent_queries" name="max_concurrent_queries" type="number" min="1"
                max=MAX_CONCURRENT_QUERIES.to_string() value=concurrent placeholder="8"/>
            <label for="queries_per_hour">"Queries per hour"</label>
            <input id="queries_per_hour" name="queries_per_hour" type="number" min="1"
                max=MAX_QUERIES_PER_HOUR.to_string() value=per_hour placeholder="10000"/>
        </fieldset>
    }
}

/// The limits as the form's four fields.
pub fn limits_fields(l: &crate::limits::Limits) -> [String; 4] {
    let n = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    [
        l.max_memory_per_query.clone().unwrap_or_default(),
        n(l.max_execution_seconds),
        n(l.max_concurrent_queries),
        n(l.queries_per_hour),
    ]
}

/// An age, duration or countdown as of the server's `now`, which the browser counts on every second
/// ([`crate::model::clock_text`] names the kinds) from the nearest `data-now`: the clock's own, or —
/// with `now_above` — that of an element around it (a table of many clocks says it once, so that
/// its rows do not change every second).
#[component]
pub fn Clock(
    kind: &'static str,
    from: Option<String>,
    to: Option<String>,
    #[prop(into)] now: String,
    #[prop(optional)] now_above: bool,
) -> impl IntoView {
    let text = crate::model::clock_text(Some(kind), from.clone(), to.clone(), &now);
    let own_now = (!now_above).then_some(now);
    view! { <span data-clock=kind data-from=from data-to=to data-now=own_now>{text}</span> }
}
