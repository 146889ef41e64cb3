use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::load_error;
use crate::api::get_tenants;
use crate::components::{
    Clock, ConfirmRevoke, ConfirmSuspend, EmptyState, Flash, Pager, PhaseBadge, ReadyCell,
    TenantActions,
};
use crate::forms::current_url;
use crate::model::TENANT_PHASES;

#[component]
pub fn TenantsPage() -> impl IntoView {
    let query = use_query_map();
    let phase = move || query.get().get("phase").filter(|p| !p.is_empty());
    let search = move || query.get().get("q").filter(|q| !q.is_empty());
    let page = move || {
        query
            .get()
            .get("page")
            .and_then(|p| p.parse::<usize>().ok())
    };
    let data = Resource::new(
        move || (phase(), search(), page()),
        |(p, q, n)| get_tenants(p, q, n),
    );
    let here = current_url();
    view! {
        <section>
            <div class="title-row">
                <h1>"Tenants"</h1>
                // Only for an account that may create tenants.
                <Transition fallback=|| ()>
                    {move || Suspend::new(async move {
                        let may_create = data.await.is_ok_and(|(meta, _)| meta.may.create);
                        may_create.then(|| view! { <a class="btn primary" href="/tenants/new">"New tenant"</a> })
                    })}
                </Transition>
            </div>
            <Flash/>
            // A GET form: filtering works the same without JavaScript.
            <form method="get" action="/tenants" class="filters">
                <label>"Phase "
                    <select name="phase">
                        <option value="" selected=move || phase().is_none()>"All"</option>
                        {TENANT_PHASES.iter().map(|p| view! {
                            <option value=*p selected=move || phase().as_deref() == Some(*p)>{*p}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label>"Search "
                    <input type="search" name="q" placeholder="name or display name" value=move || search().unwrap_or_default()/>
                </label>
                <button type="submit" class="btn">"Filter"</button>
            </form>
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || {
                    let here = here.clone();
                    Suspend::new(async move {
                        let (meta, listing) = match data.await {
                            Ok(d) => d,
                            Err(e) => return load_error(e),
                        };
                        let total = listing.total;
                        let rows = listing.rows;
                        if total == 0 {
                            return view! {
                                <EmptyState title="No tenants yet" hint="Create a tenant, then provision it to get its ClickHouse database and credentials.">
                                    {meta.may.create.then(|| view! { <a class="btn primary" href="/tenants/new">"Create the first tenant"</a> })}
                                </EmptyState>
                            }.into_any();
                        }
                        if rows.is_empty() {
                            return view! {
                                <EmptyState title="No tenant matches" hint="Clear the filter to see every tenant.">
                                    <a class="btn" href="/tenants">"Clear filter"</a>
                                </EmptyState>
                            }.into_any();
                        }
                        let may = meta.may;
                        view! {
                            <ConfirmSuspend allowed=may.change back=here.clone()/>
                            <ConfirmRevoke allowed=may.start_runs back=here.clone()/>
                            <table class="grid">
                                <thead><tr>
                                    <th>"Name"</th><th>"Phase"</th><th>"Ready"</th><th>"Database"</th>
                                    <th>"Credentials Secret"</th><th>"Age"</th><th>"Actions"</th>
                                </tr></thead>
                                <tbody>
                                    {rows.into_iter().map(|r| {
                                        view! {
                                            <tr data-tenant=r.name.clone()>
                                                <td>
                                                    <a href=format!("/tenants/{}", r.name)>{r.name.clone()}</a>
                                                    {r.display_name.clone().map(|d| view! { <div class="sub">{d}</div> })}
                                                </td>
                                                <td><PhaseBadge phase=r.phase.clone()/></td>
                                                <td><ReadyCell ready=r.ready reason=r.ready_reason.clone() message=r.ready_message.clone()/></td>
                                                <td><code>{r.database.clone().unwrap_or_else(|| "—".into())}</code></td>
                                                <td><code>{r.secret_name.clone().unwrap_or_else(|| "—".into())}</code></td>
                                                <td><Clock kind="age" from=r.created.clone() to=None now=meta.server_now.clone()/></td>
                                                <td><TenantActions row=r.clone() may here=here.clone()/></td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                            {(listing.pages > 1).then(|| view! {
                                <Pager page=listing.page pages=listing.pages matched=listing.matched path="/tenants"/>
                            })}
                        }.into_any()
                    })
                }}
            </Transition>
        </section>
    }
}
