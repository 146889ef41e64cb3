//! One module per page.

mod new_tenant;
mod overview;
mod run;
mod runs;
mod tenant;
mod tenants;

pub use new_tenant::NewTenantPage;
pub use overview::OverviewPage;
pub use run::RunPage;
pub use runs::{RunsPage, RunsTable};
pub use tenant::TenantPage;
pub use tenants::TenantsPage;

use leptos::prelude::*;

/// What a page shows when its data could not be loaded.
pub fn load_error(e: ServerFnError) -> AnyView {
    view! { <p class="flash bad" role="alert">"Could not load from the cluster: " {e.to_string()}</p> }.into_any()
}

#[component]
pub fn NotFound() -> impl IntoView {
    view! {
        <section>
            <h1>"Not found"</h1>
            <p>"Nothing lives at this address. " <a href="/">"Back to the overview"</a></p>
        </section>
    }
}
