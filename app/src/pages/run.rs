use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::{RunsTable, load_error};
use crate::api::get_run;

#[component]
pub fn RunPage() -> impl IntoView {
    let params = use_params_map();
    let name = move || params.get().get("name").unwrap_or_default();
    let data = Resource::new(name, get_run);
    view! {
        <section>
            <p class="crumbs"><a href="/runs">"Run jobs"</a> " / " {name}</p>
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Err(e) => load_error(e),
                        Ok((_, None)) => view! {
                            <p class="flash ok">"This run has been cleaned up; its outcome is kept in its tenant's history."</p>
                        }.into_any(),
                        Ok((meta, Some(d))) => view! {
                            <h1>{d.run.name.clone()}</h1>
                            <RunsTable rows=vec![d.run.clone()] server_now=meta.server_now empty=""/>
                            <h2>"Job"</h2>
                            <p>{d.job_status.unwrap_or_else(|| "No Job yet.".into())}</p>
                            <h2>"Log tail"</h2>
                            {match d.log_tail {
                                Some(log) if !log.is_empty() => view! { <pre class="log">{log}</pre> }.into_any(),
                                _ => view! { <p class="muted">"The pod's log is kept once the run finishes."</p> }.into_any(),
                            }}
                        }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}
