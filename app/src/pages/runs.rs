use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::load_error;
use crate::api::get_runs;
use crate::components::{EmptyState, Pager, PhaseBadge};
use crate::live::{now_from, use_live};
use crate::model::{RunRow, countdown, human_duration, seconds_between};

#[component]
pub fn RunsPage() -> impl IntoView {
    let live = use_live();
    let query = use_query_map();
    let page = move || {
        query
            .get()
            .get("page")
            .and_then(|p| p.parse::<usize>().ok())
    };
    let data = Resource::new(move || (live.version.get(), page()), |(_, n)| get_runs(n));
    view! {
        <section>
            <h1>"Run jobs"</h1>
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
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
                    }
                })}
            </Transition>
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
    let live = use_live();
    if rows.is_empty() {
        return view! { <p class="muted">{empty}</p> }.into_any();
    }
    let fetched = live.tick.get_untracked();
    view! {
        <table class="grid">
            <thead><tr>
                <th>"Run"</th><th>"Tenant"</th><th>"Action"</th><th>"Phase"</th><th>"Job"</th>
                <th>"Started"</th><th>"Duration"</th><th>"Cleanup"</th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|r| {
                    let now_s = server_now.clone();
                    let now_c = server_now.clone();
                    let started = r.started.clone();
                    let finished = r.finished.clone();
                    let cleanup = r.cleanup_at.clone();
                    view! {
                        <tr data-run=r.name.clone() data-phase=r.phase.clone()>
                            <td><a href=format!("/runs/{}", r.name)>{r.name.clone()}</a>
                                {(!r.message.is_empty()).then(|| view! { <div class="sub">{r.message.clone()}</div> })}</td>
                            <td><a href=format!("/tenants/{}", r.tenant)>{r.tenant.clone()}</a></td>
                            <td>{r.action.clone()}</td>
                            <td><PhaseBadge phase=r.phase.clone()/></td>
                            <td><code>{r.job.clone().unwrap_or_else(|| "—".into())}</code></td>
                            <td class="muted">{r.started.clone().unwrap_or_else(|| "—".into())}</td>
                            <td>{move || {
                                let now = now_from(&now_s, fetched, live.tick.get());
                                let end = finished.clone().unwrap_or(now);
                                started.as_deref().and_then(|s| seconds_between(s, &end)).map(human_duration).unwrap_or_else(|| "—".into())
                            }}</td>
                            <td class="countdown">{move || countdown(cleanup.as_deref(), &now_from(&now_c, fetched, live.tick.get())).unwrap_or_else(|| "—".into())}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
