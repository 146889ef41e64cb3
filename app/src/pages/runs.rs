use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::load_error;
use crate::api::runs_now;
use crate::components::Clock;
use crate::components::{EmptyState, Pager, PhaseBadge, rendered_at_once};
use crate::model::RunRow;

/// Every run in flight or not yet cleaned up, newest first, 50 a page.
#[component]
pub fn RunsPage() -> impl IntoView {
    // Rendered on the server for each request: the query is read once, not followed.
    let page = use_query_map()
        .get_untracked()
        .get("page")
        .and_then(|p| p.parse::<usize>().ok());
    let listing = match runs_now(page) {
        Err(e) => load_error(e),
        Ok((_, listing)) if listing.matched == 0 => view! {
            <EmptyState title="No run jobs" hint="Runs appear here when a tenant is provisioned, suspended or resumed, and disappear once cleaned up.">
                <a class="btn" href="/tenants">"Go to tenants"</a>
            </EmptyState>
        }.into_any(),
        Ok((meta, listing)) => view! {
            <RunsTable rows=listing.rows server_now=meta.server_now empty=""/>
            {(listing.pages > 1).then(|| view! {
                <Pager page=listing.page pages=listing.pages matched=listing.matched path="/runs"/>
            })}
        }.into_any(),
    };
    view! {
        <section>
            <h1>"Run jobs"</h1>
            {listing}
        </section>
    }
}

/// Runs with their phase, Job, timing and — for finished ones — the countdown to their cleanup.
#[component]
pub fn RunsTable(
    rows: Vec<RunRow>,
    server_now: String,
    #[prop(into)] empty: String,
) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="muted">{empty}</p> }.into_any();
    }
    view! {
        <table class="grid">
            <thead><tr>
                <th>"Run"</th><th>"Tenant"</th><th>"Action"</th><th>"Phase"</th><th>"Job"</th>
                <th>"Started"</th><th>"Duration"</th><th>"Cleanup"</th>
            </tr></thead>
            <tbody inner_html=rendered_at_once(rows.into_iter().map(|r| {
                    view! {
                        <tr data-run=r.name.clone() data-phase=r.phase.clone()>
                            <td><a href=format!("/runs/{}", r.name)>{r.name.clone()}</a>
                                {(!r.message.is_empty()).then(|| view! { <div class="sub">{r.message.clone()}</div> })}</td>
                            <td><a href=format!("/tenants/{}", r.tenant)>{r.tenant.clone()}</a></td>
                            <td>{r.action.clone()}</td>
                            <td><PhaseBadge phase=r.phase.clone()/></td>
                            <td><code>{r.job.clone().unwrap_or_else(|| "—".into())}</code></td>
                            <td class="muted">{r.started.clone().unwrap_or_else(|| "—".into())}</td>
                            <td><Clock kind="duration" from=r.started.clone() to=r.finished.clone() now=server_now.clone()/></td>
                            <td class="countdown"><Clock kind="countdown" from=None to=r.cleanup_at.clone() now=server_now.clone()/></td>
                        </tr>
                    }
                }).collect_view())></tbody>
        </table>
    }
    .into_any()
}
