use leptos::prelude::*;

use super::load_error;
use crate::api::{leader_later, overview_now};
use crate::charts::{DurationsChart, PhaseChart, RunsPerHourChart};
use crate::model::{Meta, Overview, phase_class};

#[component]
pub fn OverviewPage() -> impl IntoView {
    let body = match overview_now() {
        Err(e) => load_error(e),
        Ok((meta, o)) => overview_view(meta, o, leader_later()),
    };
    view! {
        <section>
            <h1>"Overview"</h1>
            {body}
        </section>
    }
}

/// Everything the overview shows; only the leader's name may wait (on the API).
fn overview_view(
    meta: Meta,
    o: Overview,
    leader: impl std::future::Future<Output = Option<String>> + Send + 'static,
) -> AnyView {
    view! {
        <h2 class="first">"Needs attention"</h2>
        {if o.attention.is_empty() {
            view! { <p class="all-well">"Nothing needs attention: no failed runs, no tenant stuck."</p> }.into_any()
        } else {
            let more = o.attention_total - o.attention.len();
            view! {
                <ul class="attention">
                    {o.attention.into_iter().map(|a| view! {
                        <li>
                            <a href=a.href><strong>{a.tenant}</strong> " — " {a.what}</a>
                            <span class="muted">" " {a.detail}</span>
                        </li>
                    }).collect_view()}
                </ul>
                {(more > 0).then(|| view! { <p class="muted small">"and " {more} " more"</p> })}
            }.into_any()
        }}
        <h2>"Tenants"</h2>
        <PhaseChart phases=o.tenants_by_phase.clone() total=o.tenants_total/>
        <div class="cards">
            <a class="card" href="/tenants">
                <span class="num">{o.tenants_total}</span>
                <span class="label">"tenants"</span>
            </a>
            {o.tenants_by_phase.into_iter().map(|p| view! {
                <a class="card" href=format!("/tenants?phase={}", p.phase)>
                    <span class="num">{p.count}</span>
                    <span class=phase_class(&p.phase)>{p.phase.clone()}</span>
                </a>
            }).collect_view()}
        </div>
        <div class="cards">
            <a class="card" href="/runs">
                <span class="num">{o.runs_in_flight}</span>
                <span class="label">"runs in flight"</span>
            </a>
            <div class="card">
                <span class="num">{o.finished_last_24h}</span>
                <span class="label">"runs finished (24 h)"</span>
            </div>
            <div class="card">
                <span class="num">{o.cleaned_up_last_24h}</span>
                <span class="label">"cleaned up (24 h)"</span>
            </div>
        </div>
        <h2>"Runs per hour"</h2>
        <RunsPerHourChart hours=o.runs_per_hour/>
        <h2>"How long runs take"</h2>
        <DurationsChart durations=o.durations/>
        <p class="muted small">
            "Namespace " <code>{meta.namespace.clone()}</code>
            " · leader "
            <Suspense fallback=|| view! { <code>"…"</code> }>
                {Suspend::new(async move {
                    let leader = leader.await;
                    view! { <code>{leader.unwrap_or_else(|| "none yet".into())}</code> }
                })}
            </Suspense>
            " · version " <code>{o.version}</code>
            {meta.read_only().then_some(" · read-only dashboard")}
            {meta.acting_as.map(|who| view! { " · acting as " <code>{who}</code> })}
        </p>
    }.into_any()
}
