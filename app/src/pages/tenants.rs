use std::sync::Arc;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::load_error;
use crate::api::{TenantQuery, tenants_now};
use crate::components::{
    Clock, ConfirmRevoke, ConfirmSuspend, EmptyState, Flash, Pager, PhaseBadge, ReadyCell,
    TenantActions, rendered_at_once,
};
use crate::forms::{SessionToken, current_url};
use crate::fragments::{self, RowKey};
use crate::model::{Allowed, Meta, Page, TENANT_PHASES, TenantRow, age_at};

/// The tenants list, filtered by phase and text, 50 rows a page.
#[component]
pub fn TenantsPage() -> impl IntoView {
    // Rendered on the server for each request: the query is read once, not followed.
    let query = use_query_map().get_untracked();
    let phase = query.get("phase").filter(|p| !p.is_empty());
    let search = query.get("q").filter(|q| !q.is_empty());
    let page = query.get("page").and_then(|p| p.parse::<usize>().ok());
    let data = tenants_now(&TenantQuery::new(phase.as_deref(), search.as_deref(), page));
    // Only for an account that may create tenants.
    let may_create = data.as_ref().is_ok_and(|(meta, _)| meta.may.create);
    view! {
        <section>
            <div class="title-row">
                <h1>"Tenants"</h1>
                {may_create.then(|| view! { <a class="btn primary" href="/tenants/new">"New tenant"</a> })}
            </div>
            <Flash/>
            // A GET form: filtering works the same without JavaScript.
            <form method="get" action="/tenants" class="filters">
                <label>"Phase "
                    <select name="phase">
                        <option value="" selected=phase.is_none()>"All"</option>
                        {TENANT_PHASES.iter().map(|p| view! {
                            <option value=*p selected=phase.as_deref() == Some(*p)>{*p}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label>"Search "
                    <input type="search" name="q" placeholder="name or display name" value=search.unwrap_or_default()/>
                </label>
                <button type="submit" class="btn">"Filter"</button>
            </form>
            {match data {
                Ok((meta, listing)) => listing_view(meta, listing, current_url()),
                Err(e) => load_error(e),
            }}
        </section>
    }
}

/// The table of one page of tenants, or why there is none.
fn listing_view(meta: Meta, listing: Page<Arc<TenantRow>>, here: String) -> AnyView {
    if listing.total == 0 {
        return view! {
            <EmptyState title="No tenants yet" hint="Create a tenant, then provision it to get its ClickHouse database and credentials.">
                {meta.may.create.then(|| view! { <a class="btn primary" href="/tenants/new">"Create the first tenant"</a> })}
            </EmptyState>
        }.into_any();
    }
    if listing.rows.is_empty() {
        return view! {
            <EmptyState title="No tenant matches" hint="Clear the filter to see every tenant.">
                <a class="btn" href="/tenants">"Clear filter"</a>
            </EmptyState>
        }
        .into_any();
    }
    let may = meta.may;
    let pager = (listing.pages > 1).then(|| {
        view! {
            <Pager page=listing.page pages=listing.pages matched=listing.matched path="/tenants"/>
        }
    });
    let rows = rows_html(listing.rows, &meta, may, &here);
    view! {
        <ConfirmSuspend allowed=may.change back=here.clone()/>
        <ConfirmRevoke allowed=may.start_runs back=here.clone()/>
        // The rows' clocks count from the table's `data-now`: a row's HTML changes only with the row.
        <table class="grid" data-now=meta.server_now.clone()>
            <thead><tr>
                <th>"Name"</th><th>"Phase"</th><th>"Ready"</th><th>"Database"</th>
                <th>"Credentials Secret"</th><th>"Age"</th><th>"Actions"</th>
            </tr></thead>
            <tbody inner_html=rows></tbody>
        </table>
        {pager}
    }
    .into_any()
}

/// The table's rows, each a kept copy while nothing it shows has changed ([`fragments`]), or
/// rendered at once ([`rendered_at_once`]).
fn rows_html(rows: Vec<Arc<TenantRow>>, meta: &Meta, may: Allowed, here: &str) -> String {
    let kept = fragments::of_this_page();
    let session: Arc<str> = use_context::<SessionToken>()
        .map(|t| t.0)
        .unwrap_or_default()
        .into();
    let here: Arc<str> = here.into();
    let now = meta.server_now.parse().ok();
    let pieces: Vec<Arc<str>> = rows
        .into_iter()
        .map(|row| {
            let key = RowKey {
                age: age_at(row.created.as_deref(), now),
                row,
                may,
                here: here.clone(),
                session: session.clone(),
            };
            fragments::row(kept.as_ref(), key, |key| row_html(key, &meta.server_now))
        })
        .collect();
    // Fifty rows are most of the page's bytes: copied once, into a string of the right size.
    pieces.concat()
}

fn row_html(key: &RowKey, now: &str) -> String {
    let RowKey {
        row: r, may, here, ..
    } = key;
    let (may, now) = (*may, now.to_owned());
    rendered_at_once(view! {
        <tr data-tenant=r.name.clone()>
            <td>
                <a href=format!("/tenants/{}", r.name)>{r.name.clone()}</a>
                {r.display_name.clone().map(|d| view! { <div class="sub">{d}</div> })}
            </td>
            <td><PhaseBadge phase=r.phase.clone()/></td>
            <td><ReadyCell ready=r.ready reason=r.ready_reason.clone() message=r.ready_message.clone()/></td>
            <td><code>{r.database.clone().unwrap_or_else(|| "—".into())}</code></td>
            <td><code>{r.secret_name.clone().unwrap_or_else(|| "—".into())}</code></td>
            <td><Clock kind="age" from=r.created.clone() to=None now now_above=true/></td>
            <td><TenantActions row=TenantRow::clone(r) may here=here.to_string()/></td>
        </tr>
    })
}
