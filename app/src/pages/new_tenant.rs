use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::components::{Flash, LIMIT_FIELDS, LimitsFields};
use crate::forms::PostForm;
use crate::names::{
    MAX_DISPLAY_NAME, MAX_TENANT_NAME, validate_display_name, validate_tenant_name,
};

/// The create form. The same rules as the CRD schema run as you type (once hydrated) and again on the
/// server; a rejected no-JS post comes back with what was typed still in the fields.
#[component]
pub fn NewTenantPage() -> impl IntoView {
    let query = use_query_map();
    let initial = query.get_untracked();
    let (typed_name, typed_display) = (
        initial.get("name").unwrap_or_default(),
        initial.get("display_name").unwrap_or_default(),
    );
    view! {
        <section class="narrow">
            <h1>"New tenant"</h1>
            <Flash/>
            <PostForm action="/actions/tenants".to_owned() return_to="/tenants/new" class="stack">
                <NameFields typed_name typed_display/>
                <Choice legend="Provisioning" name="provisioning" chosen=initial.get("provisioning") options=[
                    ("Automatic", "the operator creates the database and credentials right away, and retries a few times if that fails"),
                    ("Manual", "nothing happens until someone clicks Provision"),
                ]/>
                <Choice legend="When the tenant is deleted" name="reclaim_policy" chosen=initial.get("reclaim_policy") options=[
                    ("Retain", "lock its logins, keep its database, user and credentials for a new tenant of the same name"),
                    ("Delete", "drop its database and user, delete its credentials"),
                ]/>
                <LimitsFields initial=LIMIT_FIELDS.map(|f| initial.get(f).unwrap_or_default())/>
                <div class="row">
                    <button type="submit" class="btn primary">"Create tenant"</button>
                    <a class="btn" href="/tenants">"Cancel"</a>
                </div>
            </PostForm>
        </section>
    }
}

/// Radio buttons for one of a few values, each with what it means; the first is the default, and
/// `chosen` (what a rejected no-JS post brought back) wins when it is one of them.
#[component]
fn Choice<const N: usize>(
    legend: &'static str,
    name: &'static str,
    chosen: Option<String>,
    options: [(&'static str, &'static str); N],
) -> impl IntoView {
    let chosen = chosen
        .filter(|c| options.iter().any(|(v, _)| v == c))
        .unwrap_or_else(|| options[0].0.to_owned());
    view! {
        <fieldset class="choice">
            <legend>{legend}</legend>
            {options.into_iter().map(|(value, meaning)| view! {
                <label><input type="radio" name=name value=value checked=chosen == value/>
                    " " {value} " " <span class="muted">"— " {meaning}</span></label>
            }).collect_view()}
        </fieldset>
    }
}

/// The name and display name, checked as they are typed (an island: the one part of the page that
/// runs in the browser).
#[island]
fn NameFields(typed_name: String, typed_display: String) -> impl IntoView {
    let name = RwSignal::new(typed_name.clone());
    let display = RwSignal::new(typed_display.clone());
    let name_error = move || {
        let n = name.get();
        (!n.is_empty())
            .then(|| validate_tenant_name(&n).err().map(|e| e.to_string()))
            .flatten()
    };
    let display_error = move || {
        validate_display_name(&display.get())
            .err()
            .map(|e| e.to_string())
    };
    view! {
        <label for="name">"Name"</label>
        <input id="name" name="name" required autocomplete="off" maxlength=MAX_TENANT_NAME.to_string()
            pattern="[a-z]([-a-z0-9]*[a-z0-9])?" placeholder="acme-corp" value=typed_name
            prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))
            aria-invalid=move || name_error().is_some().to_string()/>
        <small class="hint">"Lowercase letters, digits and '-', starting with a letter; at most " {MAX_TENANT_NAME} " characters. It names the database, user and Secret, and cannot change."</small>
        {move || name_error().map(|e| view! { <small class="field-error" role="alert">{e}</small> })}
        <label for="display_name">"Display name " <span class="muted">"(optional)"</span></label>
        <input id="display_name" name="display_name" autocomplete="off" maxlength=MAX_DISPLAY_NAME.to_string()
            placeholder="Acme Corp" value=typed_display prop:value=move || display.get() on:input=move |ev| display.set(event_target_value(&ev))/>
        {move || display_error().map(|e| view! { <small class="field-error" role="alert">{e}</small> })}
    }
}
