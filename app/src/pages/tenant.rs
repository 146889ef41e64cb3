use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::{RunsTable, load_error};
use crate::api::get_tenant;
use crate::charts::RunTimeline;
use crate::components::{
    ConfirmDelete, ConfirmRevoke, ConfirmSuspend, Flash, LIMIT_FIELDS, LimitsFields, PhaseBadge,
    ReadyCell, TenantActions, limits_fields,
};
use crate::forms::{PostForm, current_url};
use crate::model::CopyView;
use crate::names::CREDENTIAL_KEYS;

#[component]
pub fn TenantPage() -> impl IntoView {
    let params = use_params_map();
    let name = move || params.get().get("name").unwrap_or_default();
    let query = leptos_router::hooks::use_query_map();
    let editing = move || query.with(|q| q.get("edit").as_deref() == Some("limits"));
    let data = Resource::new(name, get_tenant);
    let here = current_url();
    view! {
        <section>
            <p class="crumbs"><a href="/tenants">"Tenants"</a> " / " {name}</p>
            <Flash/>
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || {
                    let here = here.clone();
                    Suspend::new(async move {
                        let (meta, detail) = match data.await {
                            Ok(d) => d,
                            Err(e) => return load_error(e),
                        };
                        let Some(d) = detail else {
                            return view! {
                                <p class="flash bad">"This tenant does not exist (any more). " <a href="/tenants">"All tenants"</a></p>
                            }.into_any();
                        };
                        let t = d.tenant.clone();
                        let f = d.facts.clone();
                        let may = meta.may;
                        view! {
                            <div class="title-row">
                                <h1>{t.name.clone()} " " <PhaseBadge phase=t.phase.clone()/></h1>
                                <TenantActions row=t.clone() may here=here.clone()/>
                            </div>
                            <ConfirmSuspend allowed=may.change back=here.clone()/>
                            <ConfirmRevoke allowed=may.start_runs back=here.clone()/>
                            <ConfirmDelete row=t.clone() allowed=may.delete/>
                            {t.display_name.clone().map(|n| view! { <p class="sub">{n}</p> })}
                            <dl class="facts">
                                <dt>"Ready"</dt><dd><ReadyCell ready=t.ready reason=t.ready_reason.clone() message=t.ready_message.clone()/> " " <span class="muted">{t.ready_message.clone()}</span></dd>
                                <dt>"Database"</dt><dd><code>{t.database.clone().unwrap_or_else(|| "—".into())}</code></dd>
                                <dt>"Credentials Secret"</dt><dd><code>{t.secret_name.clone().unwrap_or_else(|| "—".into())}</code></dd>
                                <dt>"Logins"</dt><dd>{f.logins.clone()}</dd>
                                <dt>"Provisioning"</dt><dd>{f.provisioning_policy.clone()}</dd>
                                <dt>"When deleted"</dt><dd>{t.reclaim_policy.clone()}</dd>
                                <dt>"Limits"</dt><dd>{f.limits.describe()} " " <span class="muted">"(" {f.limits_state.clone()} ")"</span></dd>
                                <dt>"ClickHouse reflects"</dt><dd>{f.clickhouse_generation.clone()}</dd>
                                <dt>"Credentials"</dt><dd>{f.credentials.clone()}</dd>
                                {f.deletion.clone().map(|d| view! { <dt>"Deletion"</dt><dd>{d}</dd> })}
                            </dl>
                            {(may.change && t.can_change_limits()).then(|| {
                                let page = format!("/tenants/{}", t.name);
                                if editing() {
                                    // What a refused no-JS post brought back, else the spec's limits.
                                    let q = query.get_untracked();
                                    let initial = if LIMIT_FIELDS.iter().any(|f| q.get(f).is_some()) {
                                        LIMIT_FIELDS.map(|f| q.get(f).unwrap_or_default())
                                    } else {
                                        limits_fields(&f.limits)
                                    };
                                    view! {
                                        <div class="edit-limits" role="group" aria-label="Change limits">
                                            <PostForm action=format!("/actions/tenants/{}/limits", t.name) class="stack">
                                                <LimitsFields initial/>
                                                <div class="row">
                                                    <button type="submit" class="btn primary">"Save limits"</button>
                                                    <a class="btn" href=page>"Cancel"</a>
                                                </div>
                                            </PostForm>
                                        </div>
                                    }.into_any()
                                } else {
                                    view! { <p><a class="btn" href=format!("{page}?edit=limits")>"Change limits"</a></p> }.into_any()
                                }
                            })}
                            <CopiesSection copies=d.copies.clone() name=t.name.clone() may_deliver=may.start_runs && t.can_rotate()/>
                            <h2>"Conditions"</h2>
                            <table class="grid">
                                <thead><tr><th>"Type"</th><th>"Status"</th><th>"Reason"</th><th>"Message"</th><th>"Since"</th></tr></thead>
                                <tbody>{d.conditions.into_iter().map(|c| view! {
                                    <tr><td>{c.type_}</td><td>{c.status}</td><td>{c.reason}</td><td>{c.message}</td><td class="muted">{c.last_transition}</td></tr>
                                }).collect_view()}</tbody>
                            </table>
                            <h2>"Runs"</h2>
                            <RunsTable rows=d.runs server_now=meta.server_now.clone() empty="No run in progress or waiting for cleanup."/>
                            <h2>"History"</h2>
                            <RunTimeline history=d.history.clone() now=meta.server_now.clone()/>
                            {if d.history.is_empty() {
                                view! { <p class="muted">"No finished runs recorded yet."</p> }.into_any()
                            } else {
                                view! {
                                    <table class="grid">
                                        <thead><tr><th>"Run"</th><th>"Action"</th><th>"Outcome"</th><th>"Message"</th><th>"Finished"</th></tr></thead>
                                        <tbody>{d.history.into_iter().map(|h| view! {
                                            <tr>
                                                <td>{h.name}</td><td>{h.action}</td><td><PhaseBadge phase=h.phase/></td>
                                                <td>{h.message}{h.log_tail.map(|l| view! { <details><summary>"log"</summary><pre>{l}</pre></details> })}</td>
                                                <td class="muted">{h.finished}</td>
                                            </tr>
                                        }).collect_view()}</tbody>
                                    </table>
                                }.into_any()
                            }}
                            <h2>"Recent events"</h2>
                            {if d.events.is_empty() {
                                view! { <p class="muted">"No recent events."</p> }.into_any()
                            } else {
                                view! {
                                    <ul class="events">{d.events.into_iter().map(|e| view! {
                                        <li class=if e.type_ == "Warning" { "warn" } else { "" }>
                                            <strong>{e.reason}</strong> " " {e.message} " " <span class="muted">{e.time.unwrap_or_default()}</span>
                                        </li>
                                    }).collect_view()}</ul>
                                }.into_any()
                            }}
                        }.into_any()
                    })
                }}
            </Transition>
        </section>
    }
}

/// Where the tenant's applications get their credentials: each copy, how it stands, and how to read
/// a key of it — a command, never a value.
#[component]
fn CopiesSection(copies: Vec<CopyView>, name: String, may_deliver: bool) -> impl IntoView {
    let first = copies.first().cloned()?;
    let keys = CREDENTIAL_KEYS.join(", ");
    Some(view! {
        <h2>"Copies of the credentials"</h2>
        <table class="grid">
            <thead><tr><th>"Namespace"</th><th>"Secret"</th><th>"State"</th><th>"Message"</th></tr></thead>
            <tbody>{copies.into_iter().map(|c| view! {
                <tr><td>{c.namespace}</td><td><code>{c.secret_name}</code></td><td>{c.state}</td><td>{c.message}</td></tr>
            }).collect_view()}</tbody>
        </table>
        <p class="muted">"Each copy holds the keys " {keys} ". An application reads one, e.g.: "
            <code>{first.read_command("uri")}</code></p>
        {may_deliver.then(|| view! {
            <PostForm action=format!("/actions/tenants/{name}/deliver")>
                <button type="submit" class="btn" title="Write every copy again from the credentials Secret, e.g. after a conflicting Secret was removed">"Write copies now"</button>
            </PostForm>
        })}
    })
}
